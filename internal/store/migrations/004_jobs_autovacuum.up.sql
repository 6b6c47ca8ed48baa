-- Vacuum the jobs table by the number of dead rows, not by a share of the
-- table. Every job leaves dead row versions behind (the claim and the
-- result each update it), and the claim's index scan over jobs_due_idx
-- starts at the oldest entries, which are exactly those of the jobs just
-- claimed: until a vacuum removes them, every claim walks over them. After
-- 750,000 jobs went through with the default settings (a vacuum once 20%
-- of the table is dead, and that slowed by cost delays), one claim took
-- 5 ms instead of 0.5 ms, and p50 submit->start at 100 jobs/s went from
-- 2.5 to 8.8 ms. A fixed threshold keeps a vacuum of the table due every
-- few seconds under load, and no cost delay lets it finish quickly.
ALTER TABLE jobs SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 20000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 100000,
    autovacuum_vacuum_cost_delay = 0
);
