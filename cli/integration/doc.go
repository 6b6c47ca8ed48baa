// Package integration tests dtsctl (github.com/dtsched/dts/cli/command)
// against a real submitter, coordinator and worker run in process on
// PostgreSQL and Redis from internal/pgtest and internal/redistest. It is
// its own module so that the cli module, which users install, requires
// none of the servers. Golden files live in ../testdata; -update rewrites
// them.
package integration
