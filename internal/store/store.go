// Package store is the only code that talks to PostgreSQL, the source of
// truth for every job. Each state change is one guarded statement: its WHERE
// names the state it expects and, for a leased job, the lease's fencing
// token, so a late or duplicate actor changes nothing. Hot paths (claim,
// complete, fail, extend) take batches and cost one round trip per batch.
// Times that matter (lease deadlines, next_run_at) come from PostgreSQL's
// clock, never from the caller's.
//
// No pgx type crosses this package's boundary: errors are translated to the
// sentinels of package job by interpretError.
//
// The SQL is not in the Go code: queries/<file>.sql holds the statements of
// <file>.go as blocks named after the function that runs each, loaded once
// at init by an embedded loader (queries.go says why a loader and not sqlc).
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dtsched/dts/internal/job"
)

// Store is a PostgreSQL connection pool with the scheduler's queries.
type Store struct {
	pool  *pgxpool.Pool
	guard *hangGuard
}

// Options says how Open sets up the pool. The zero value: pgx's pool size
// (pool_max_conns in the URL, or pgx's default), no migrations, the
// planner's defaults.
type Options struct {
	// MaxConns bounds the pool; 0: pool_max_conns from the URL, or pgx's
	// default.
	MaxConns int32
	// Migrate applies the migrations Open has not seen applied.
	Migrate bool
	// PinIndexPlans makes the pool's sessions plan with enable_seqscan,
	// enable_hashjoin and enable_mergejoin off, for a pool whose
	// statements all reach rows by key or through a partial index (the
	// coordinator's). A session keeps the generic plan it made the first
	// time it ran a statement: one made while the jobs table was nearly
	// empty, as on a fresh install, scans the whole table, and goes on
	// scanning it as it grows until an ANALYZE invalidates the plan
	// (autovacuum's first can be a minute away). The off switches only
	// make those plans expensive, so a statement with no other way still
	// runs. StatsGet, which does count the whole table, turns sequential
	// scans back on for itself.
	PinIndexPlans bool
	// Configure, when set, changes the pool's configuration last (tests
	// add tracers with it).
	Configure func(*pgxpool.Config)
}

// Open connects to databaseURL, checks the connection, and applies the
// migrations when o.Migrate is set. It bounds every wait on the network
// (dial.go) and starts a guard that closes the connections of a server
// that stops answering (hangGuard), which Close stops.
func Open(ctx context.Context, databaseURL string, o Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	ns, err := parseNetSettings(cfg)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	guard := newHangGuard(ns.dialer().DialContext, ns.connectTimeout)
	cfg.ConnConfig.ConnectTimeout = ns.connectTimeout
	cfg.ConnConfig.DialFunc = guard.DialContext
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	// Generic plans only: the batch statements are written for them (see
	// leased in lease.go); a custom plan built from stale statistics can be
	// quadratic.
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	// No JIT compilation: every statement here is short, and a plan whose
	// cost is above jit_above_cost gets compiled with inlining and
	// optimization on each run. PinIndexPlans makes any plan that must
	// still scan a table cost 10^10, so even the coordinator's sync of a
	// three-row workers table, every second, would be compiled at a cost
	// of a large share of a core, delaying job starts.
	cfg.ConnConfig.RuntimeParams["jit"] = "off"
	if o.PinIndexPlans {
		for _, name := range []string{"enable_seqscan", "enable_hashjoin", "enable_mergejoin"} {
			cfg.ConnConfig.RuntimeParams[name] = "off"
		}
	}
	if o.Configure != nil {
		o.Configure(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	s := &Store{pool: pool, guard: guard}
	guard.start()
	if err := pool.Ping(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("ping database: %w", err)
	}
	if o.Migrate {
		if err := Migrate(ctx, pool); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// Close closes the pool and stops its guard.
func (s *Store) Close() {
	s.pool.Close()
	s.guard.stop()
}

// Ping checks that PostgreSQL answers.
func (s *Store) Ping(ctx context.Context) error {
	return interpretError(s.pool.Ping(ctx))
}

// DatabaseURL returns the connection string the pool was opened with.
func (s *Store) DatabaseURL() string { return s.pool.Config().ConnString() }

// interpretError turns pgx errors into the sentinels of package job.
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return job.ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if pgErr.Code == sqlstateDeposed {
			return fmt.Errorf("%w: %w: %s", job.ErrDeposed, job.ErrRefused, pgErr.Message)
		}
		if pgErr.Code == "23505" { // unique_violation
			return fmt.Errorf("%w: %w: %w: %s", job.ErrConflict, job.ErrRefused, job.ErrBadData, pgErr.Message)
		}
		// An ERROR aborts the statement and the session goes on; a FATAL
		// (the server ending the session, say at shutdown) can come after
		// a commit, so what was written is unknown.
		refused := severity(pgErr) == "ERROR"
		switch {
		case refused && badData(pgErr.Code):
			return fmt.Errorf("%w: %w: %w", job.ErrRefused, job.ErrBadData, err)
		case unavailable(err) && refused:
			return fmt.Errorf("%w: %w: %w", job.ErrStoreUnavailable, job.ErrRefused, err)
		case unavailable(err):
			return fmt.Errorf("%w: %w", job.ErrStoreUnavailable, err)
		case refused:
			return fmt.Errorf("%w: %w", job.ErrRefused, err)
		}
		return err
	}
	if unavailable(err) {
		return fmt.Errorf("%w: %w", job.ErrStoreUnavailable, err)
	}
	return err
}

// badData reports whether an ERROR of SQLSTATE code is the fault of a
// value the statement carried, so that sending the same values again is
// refused again (job.ErrBadData): class 22 data_exception (a number out of
// range, invalid text or JSON), 23 integrity_constraint_violation (a CHECK,
// NOT NULL, unique or foreign key), 54 program_limit_exceeded (a value too
// large or too deeply nested) and P0 plpgsql_error (a trigger's RAISE
// EXCEPTION, which refuses a row as a CHECK does). Every other class is
// about the moment or the server, not the data (40 transaction_rollback:
// deadlock, serialization failure; 53 insufficient_resources; 55P03
// lock_not_available; 57014 query_canceled; 57P0x shutdown; 58 system
// errors; 08 connection errors), or about the schema or the code (42,
// XX): a caller retries those and must not blame the row.
func badData(code string) bool {
	switch code[:min(2, len(code))] {
	case "22", "23", "54", "P0":
		return true
	}
	return false
}

// sqlstateDeposed is what dts_fence raises when a leader's epoch is no
// longer current (functions.sql).
const sqlstateDeposed = "DTS01"

// unavailable reports whether err says PostgreSQL cannot be reached or
// ended the session: a failed connection attempt (refused, reset, the
// server starting up or shutting down), SQLSTATE class 08
// (connection_exception), 57P01 admin_shutdown, 57P02 crash_shutdown,
// 57P03 cannot_connect_now, or a connection cut mid-statement.
func unavailable(err error) bool {
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03":
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08")
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false // the caller's own deadline or cancel, not the server
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// severity is the untranslated severity of a server message.
func severity(e *pgconn.PgError) string {
	if e.SeverityUnlocalized != "" {
		return e.SeverityUnlocalized
	}
	return e.Severity
}

func millis(d time.Duration) int64 { return d.Milliseconds() }
