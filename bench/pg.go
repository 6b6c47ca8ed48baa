package bench

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pg reads the bench database directly: the bench measures what PostgreSQL
// recorded (the source of truth), not what the API reports. It never writes
// jobs. Queries that run while load is applied stay on indexes, so polling
// costs the server little.
type pg struct {
	pool *pgxpool.Pool
	// setup are the jobs made before the scenarios (LimitKeys), which
	// backlog, completed and completedSpan leave out.
	setup setupJobs
}

func openPG(ctx context.Context, dbURL string) (*pg, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	cfg.MaxConns = 4
	// No parallel workers for our counts: each would be a new process
	// that PostgreSQL forks per query, a cost the bench would add.
	cfg.ConnConfig.RuntimeParams["max_parallel_workers_per_gather"] = "0"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping database: %w", err)
	}
	return &pg{pool: pool}, nil
}

func (p *pg) close() { p.pool.Close() }

// createDatabase creates a database named name on the server of serverURL
// and returns its URL.
func createDatabase(ctx context.Context, serverURL, name string) (string, error) {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", redactURL(serverURL), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", fmt.Errorf("parse database url: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// dropDatabase drops name, ending its sessions.
func dropDatabase(ctx context.Context, serverURL, name string) error {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", redactURL(serverURL), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// redactURL hides a password in a URL.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable url)"
	}
	return u.Redacted()
}

// serverInfo describes the PostgreSQL server and the durability settings
// that decide what a commit costs.
func (p *pg) serverInfo(ctx context.Context) (PostgresInfo, error) {
	var in PostgresInfo
	err := p.pool.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('fsync'),
		current_setting('synchronous_commit'), current_setting('full_page_writes'),
		current_setting('shared_buffers'), current_setting('max_connections')::int, current_database()`).
		Scan(&in.Version, &in.Fsync, &in.SynchronousCommit, &in.FullPageWrites, &in.SharedBuffers, &in.MaxConnections, &in.Database)
	if err != nil {
		return in, fmt.Errorf("read server settings: %w", err)
	}
	return in, nil
}

// backendPIDs lists the server processes serving our database plus the
// server-wide ones (WAL writer, checkpointer, ...), whose work we cause.
func (p *pg) backendPIDs(ctx context.Context) ([]int, error) {
	rows, err := p.pool.Query(ctx, `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() OR datname IS NULL`)
	if err != nil {
		return nil, fmt.Errorf("list backends: %w", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("list backends: %w", err)
	}
	out := make([]int, len(pids))
	for i, pid := range pids {
		out[i] = int(pid)
	}
	return out, nil
}

// backlog counts the jobs not finished yet: pending, retrying or leased
// (the setup's waiting jobs left out). Each count reads one partial index
// (jobs_queue_due_idx, jobs_leased_idx), so it stays cheap while the table
// grows.
func (p *pg) backlog(ctx context.Context) (int64, error) {
	var n int64
	err := p.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM jobs WHERE status IN ('pending', 'retrying')) +
		(SELECT count(*) FROM jobs WHERE status = 'leased')`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count backlog: %w", err)
	}
	return n - p.setup.waiting, nil
}

// completed counts completed jobs (a scan of jobs_finished_idx), the
// setup's left out.
func (p *pg) completed(ctx context.Context) (int64, error) {
	var n int64
	if err := p.pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE status = 'completed'`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count completed jobs: %w", err)
	}
	return n - p.setup.completed, nil
}

// statusCountsUpTo counts the jobs up to lastID by status.
func (p *pg) statusCountsUpTo(ctx context.Context, lastID int64) (map[string]int64, error) {
	rows, err := p.pool.Query(ctx, `SELECT status, count(*) FROM jobs WHERE id <= $1 GROUP BY status`, lastID)
	if err != nil {
		return nil, fmt.Errorf("count jobs by status: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var s string
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			return nil, fmt.Errorf("count jobs by status: %w", err)
		}
		out[s] = n
	}
	return out, rows.Err()
}

// nameWorkerCount is how many jobs of a name one worker completed.
type nameWorkerCount struct {
	name, workerID string
	count          int64
}

// completedByWorker counts the completed jobs (the setup's left out) by
// name and worker.
func (p *pg) completedByWorker(ctx context.Context) ([]nameWorkerCount, error) {
	rows, err := p.pool.Query(ctx, `SELECT name, coalesce(worker_id, ''), count(*) FROM jobs
		WHERE status = 'completed' AND id > $1 GROUP BY 1, 2`, p.setup.lastID)
	if err != nil {
		return nil, fmt.Errorf("count completed jobs by worker: %w", err)
	}
	defer rows.Close()
	var out []nameWorkerCount
	for rows.Next() {
		var n nameWorkerCount
		if err := rows.Scan(&n.name, &n.workerID, &n.count); err != nil {
			return nil, fmt.Errorf("count completed jobs by worker: %w", err)
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// statusCounts counts every job by status.
func (p *pg) statusCounts(ctx context.Context) (map[string]int64, error) {
	return p.statusCountsUpTo(ctx, math.MaxInt64)
}

// span is what PostgreSQL recorded about a set of completed jobs.
type span struct {
	completed     int64
	firstStarted  time.Time
	firstFinished time.Time
	lastFinished  time.Time
}

// completedSpan summarises every completed job but the setup's.
func (p *pg) completedSpan(ctx context.Context) (span, error) {
	var s span
	var fs, ff, lf *time.Time
	err := p.pool.QueryRow(ctx, `SELECT count(*), min(started_at), min(finished_at), max(finished_at)
		FROM jobs WHERE status = 'completed' AND id > $1`, p.setup.lastID).Scan(&s.completed, &fs, &ff, &lf)
	if err != nil {
		return s, fmt.Errorf("read completed span: %w", err)
	}
	if fs != nil {
		s.firstStarted, s.firstFinished, s.lastFinished = *fs, *ff, *lf
	}
	return s, nil
}

// unfinished counts the jobs among ids without a finished_at.
func (p *pg) unfinished(ctx context.Context, ids []int64) (int64, error) {
	var n int64
	err := p.pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE id = ANY($1) AND finished_at IS NULL`, ids).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count unfinished jobs: %w", err)
	}
	return n, nil
}

// jobDelays returns, for each of ids that finished, started_at − created_at
// and finished_at − created_at in seconds, both on PostgreSQL's clock.
func (p *pg) jobDelays(ctx context.Context, ids []int64) (toStart, toFinish []float64, err error) {
	rows, err := p.pool.Query(ctx, `SELECT extract(epoch FROM started_at - created_at)::float8,
		extract(epoch FROM finished_at - created_at)::float8
		FROM jobs WHERE id = ANY($1) AND started_at IS NOT NULL AND finished_at IS NOT NULL`, ids)
	if err != nil {
		return nil, nil, fmt.Errorf("read job delays: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var s, f float64
		if err := rows.Scan(&s, &f); err != nil {
			return nil, nil, fmt.Errorf("read job delays: %w", err)
		}
		toStart, toFinish = append(toStart, s), append(toFinish, f)
	}
	return toStart, toFinish, rows.Err()
}

// jobState is one job's row, as far as the recovery scenario cares.
type jobState struct {
	id         int64
	status     string
	workerID   string
	attempts   int
	startedAt  time.Time
	lastReason string // reason of the last failed attempt, from jobs.errors
}

func (p *pg) jobStates(ctx context.Context, ids []int64) ([]jobState, error) {
	rows, err := p.pool.Query(ctx, `SELECT id, status, coalesce(worker_id, ''), attempts,
		coalesce(started_at, 'epoch'), coalesce(errors -> -1 ->> 'reason', '')
		FROM jobs WHERE id = ANY($1) ORDER BY id`, ids)
	if err != nil {
		return nil, fmt.Errorf("read job states: %w", err)
	}
	defer rows.Close()
	var out []jobState
	for rows.Next() {
		var s jobState
		if err := rows.Scan(&s.id, &s.status, &s.workerID, &s.attempts, &s.startedAt, &s.lastReason); err != nil {
			return nil, fmt.Errorf("read job states: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// databaseName is the name of a fresh bench database.
func databaseName(t time.Time) string {
	return strings.ToLower(fmt.Sprintf("bench_%d", t.Unix()))
}
