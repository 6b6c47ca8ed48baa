package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/store"
)

// TestBadDataBySQLState: only an ERROR about the values a statement carried
// is job.ErrBadData (sending them again fails again); an ERROR of the moment
// (a timeout, a cancel, a deadlock, resources short, a shutdown) or of the
// schema is refused but not bad data, so that no caller blames a row for it.
func TestBadDataBySQLState(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code, what string
		bad        bool
	}{
		{"22003", "numeric_value_out_of_range", true},
		{"22P02", "invalid_text_representation", true},
		{"22P05", "untranslatable_character", true},
		{"22001", "string_data_right_truncation", true},
		{"23514", "check_violation", true},
		{"23502", "not_null_violation", true},
		{"23503", "foreign_key_violation", true},
		{"23505", "unique_violation", true},
		{"54000", "program_limit_exceeded", true},
		{"54001", "statement_too_complex", true},
		{"P0001", "raise_exception", true},
		{"55P03", "lock_not_available", false},
		{"55006", "object_in_use", false},
		{"57014", "query_canceled", false},
		{"57P01", "admin_shutdown", false},
		{"57P02", "crash_shutdown", false},
		{"57P03", "cannot_connect_now", false},
		{"40001", "serialization_failure", false},
		{"40P01", "deadlock_detected", false},
		{"40003", "statement_completion_unknown", false},
		{"53100", "disk_full", false},
		{"53200", "out_of_memory", false},
		{"53300", "too_many_connections", false},
		{"53400", "configuration_limit_exceeded", false},
		{"08006", "connection_failure", false},
		{"08P01", "protocol_violation", false},
		{"58000", "system_error", false},
		{"58030", "io_error", false},
		{"42P01", "undefined_table", false},
		{"42501", "insufficient_privilege", false},
		{"XX000", "internal_error", false},
		{"DTS01", "deposed", false},
		{"", "no code", false},
	} {
		err := store.InterpretError(&pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: tc.code, Message: tc.what})
		if got := errors.Is(err, job.ErrBadData); got != tc.bad {
			t.Errorf("%s %s: bad data = %v, want %v (%v)", tc.code, tc.what, got, tc.bad, err)
		}
		if !errors.Is(err, job.ErrRefused) {
			t.Errorf("%s %s: %v, want job.ErrRefused (an ERROR wrote nothing)", tc.code, tc.what, err)
		}
	}
	err := store.InterpretError(&pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "22003"})
	if errors.Is(err, job.ErrBadData) || errors.Is(err, job.ErrRefused) {
		t.Errorf("FATAL: %v, must be neither refused nor bad data", err)
	}
}

// TestTransientErrorsAreNotBadData: real errors of the moment from
// PostgreSQL (a lock timeout, a statement timeout, a deadlock) are refused
// but not bad data; real errors of a value (out of range, a CHECK) are.
func TestTransientErrorsAreNotBadData(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := store.Open(ctx, pgtest.NewDatabase(t), store.Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pool := s.Pool()
	if _, err := pool.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY, n int CHECK (n >= 0)); INSERT INTO t VALUES (1, 0), (2, 0)`); err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error, code string, bad bool) {
		t.Helper()
		if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != code {
			t.Errorf("%s: %v; want SQLSTATE %s", what, err, code)
		}
		err = store.InterpretError(err)
		if !errors.Is(err, job.ErrRefused) || errors.Is(err, job.ErrBadData) != bad {
			t.Errorf("%s: %v; want refused, bad data %v", what, err, bad)
		}
	}
	_, err = pool.Exec(ctx, `SELECT 1e300000::float8`)
	check("out of range", err, "22003", true)
	_, err = pool.Exec(ctx, `UPDATE t SET n = -1 WHERE id = 1`)
	check("CHECK", err, "23514", true)

	c, err := pool.Acquire(ctx) // one session for the timeouts, set with SET LOCAL
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	_, err = c.Exec(ctx, `BEGIN; SET LOCAL statement_timeout = 50; SELECT pg_sleep(5); COMMIT`)
	check("statement timeout", err, "57014", false)
	if _, err := c.Exec(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}

	// Two sessions each lock one row, then each wants the other's.
	a, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	b, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	txA, err := a.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = txA.Rollback(context.WithoutCancel(ctx)) }()
	txB, err := b.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = txB.Rollback(context.WithoutCancel(ctx)) }()
	lock := func(tx pgx.Tx, id int) error {
		_, err := tx.Exec(ctx, `SELECT 1 FROM t WHERE id = $1 FOR UPDATE`, id)
		return err
	}
	if err := lock(txA, 1); err != nil {
		t.Fatal(err)
	}
	if err := lock(txB, 2); err != nil {
		t.Fatal(err)
	}
	// A second session on row 1 times out waiting (lock_timeout).
	_, err = c.Exec(ctx, `BEGIN; SET LOCAL lock_timeout = 50; SELECT 1 FROM t WHERE id = 1 FOR UPDATE; COMMIT`)
	check("lock timeout", err, "55P03", false)
	if _, err := c.Exec(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	if _, err := txA.Exec(ctx, `SET LOCAL deadlock_timeout = 20`); err != nil {
		t.Fatal(err)
	}
	errA := make(chan error, 1)
	go func() { errA <- lock(txA, 2) }()
	errB := lock(txB, 1)
	if errB != nil { // the deadlock's victim; the other gets its lock
		_ = txB.Rollback(ctx)
		check("deadlock", errB, "40P01", false)
		if err := <-errA; err != nil {
			t.Errorf("the survivor: %v", err)
		}
	} else {
		check("deadlock", <-errA, "40P01", false)
	}
}
