// Package integration tests the client against a real submitter, coordinator
// and worker, run in process on a real PostgreSQL and Redis
// (internal/pgtest, internal/redistest).
//
// It is a module of its own so that the client module's go.mod stays what a
// user's build reads: it requires only internal. Were these tests in the
// client module, its go.mod would list the submitter and the coordinator,
// and every program importing the client would have to resolve them.
package integration
