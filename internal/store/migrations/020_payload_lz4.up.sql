-- Large payloads and results are compressed when stored (TOAST). lz4
-- compresses and decompresses several times faster than PostgreSQL's
-- default, pglz, which also spends long on data it then fails to shrink:
-- an incompressible 1 MiB payload costs an insert about half as much with
-- lz4. The change is to the catalog only; values written before keep
-- their compression and stay readable. A PostgreSQL built without lz4,
-- or older than 14 (no SET COMPRESSION: hence EXECUTE, which parses the
-- statement only when it runs), keeps pglz.
DO $$
BEGIN
    EXECUTE 'ALTER TABLE jobs ALTER COLUMN payload SET COMPRESSION lz4, '
            'ALTER COLUMN result SET COMPRESSION lz4';
EXCEPTION WHEN feature_not_supported OR syntax_error THEN
    RAISE NOTICE 'lz4 is not available: payloads and results keep pglz';
END $$;
