package store

import "github.com/jackc/pgx/v5/pgxpool"

// Pool exposes the store's pool to the external tests, which need the
// store's own sessions (plans_test.go).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// InterpretError exposes interpretError to the external tests.
var InterpretError = interpretError

// MigrateFS is Migrate with the migrations read from fsys.
var MigrateFS = migrate

// Q exposes q to the external tests, which EXPLAIN the store's statements
// (console_plans_test.go).
var Q = q
