-- The SHA-256 (hex) of each migration file as applied, so that an edit to
-- an applied migration fails start-up (store.Migrate) instead of being
-- skipped on every existing database. Migrate fills it in after applying a
-- migration; rows applied before this one get the checksum of their file as
-- it is at the first start of a binary that has this migration.
ALTER TABLE schema_migrations ADD COLUMN checksum text;
