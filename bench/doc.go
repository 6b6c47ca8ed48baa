// Package bench is the dts load generator behind `make bench`: it starts a
// cluster of its own (submitter, coordinator, workers built from this
// workspace, on a fresh database and Redis key prefix) and measures four
// scenarios against it through the public HTTP API:
//
//   - drain: N noop jobs submitted while no worker runs, then the time from
//     starting the workers until PostgreSQL records the last one finished;
//   - sustained: batches submitted back to back while workers run; the
//     completed rate over a window is the maximum sustained throughput;
//   - latency: single submits at fixed offered loads (open loop), with
//     submit->start and submit->finish percentiles from PostgreSQL;
//   - recovery: a worker holding jobs is SIGKILLed; how long until each of
//     its jobs is leased again elsewhere.
//
// It also samples /proc for the CPU time and RSS of every process involved.
//
// Why it is shaped this way: the figures come from PostgreSQL, the source of
// truth, and never from the services' own view (their metrics are only a
// cross-check), and the bench reads the database but never writes jobs, so
// it measures the system as users drive it. Each run owns its database and
// Redis prefix, so it can run beside `make up` or the tests. What must stay
// true: every process the bench starts dies with it (Pdeathsig, and a kill
// on every exit path), and all traffic stays on 127.0.0.1.
package bench
