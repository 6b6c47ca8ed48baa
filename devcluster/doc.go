// Package devcluster starts a whole dts cluster for a test: a submitter, a
// coordinator and a worker in this process (this package), or the built
// binaries as child processes on loopback or in network namespaces
// (package process). client/integration, cli/integration, e2e and the
// benchmark all start their clusters through it, so that a change to how a
// cluster is put together is made once.
//
// Why it is its own module: it imports the submitter, the coordinator and
// the worker, and internal must not (a user's build of the worker or the
// client reads internal's go.mod). Package process imports none of them,
// so a program that starts binaries (the benchmark) does not compile the
// services.
//
// What must stay true: everything a Stack starts stops when its test
// ends, before the test's database and Redis prefix go; each Stack has a
// database (internal/pgtest) and a Redis key prefix (internal/redistest)
// no other test uses, so tests that use it run in parallel.
package devcluster
