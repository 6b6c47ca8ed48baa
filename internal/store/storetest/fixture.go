// Package storetest builds large job tables for tests and benchmarks of
// what reads them (the console's queries on a million jobs).
//
// Why it is shaped this way: a million jobs inserted through the store
// would take minutes; one INSERT ... SELECT over generate_series per
// shape of job takes seconds, and the rows are those the store would
// write (each state's columns as its transitions leave them, the leased
// ones with a lease token). It is imported by _test.go files only.
//
// What must stay true: the mix is deterministic (the same n gives the
// same rows), so that figures taken on it compare run to run.
package storetest

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Fixture says what FillJobs made, for the queries a test runs on it.
type Fixture struct {
	N int64 // jobs inserted
	// FirstID and LastID bound the ids of the mix (the many-attempt job
	// is LastID+1).
	FirstID, LastID int64
	// ManyAttempts is a failed job with Attempts attempts in its errors
	// (with tokens, starts and backoffs), five stale results in job_events
	// and a requeue in the audit log.
	ManyAttempts int64
	Attempts     int
	// Key is an idempotency key of one job, KeyID; every KeyEvery-th job
	// has one ("key-<i>").
	Key      string
	KeyID    int64
	KeyEvery int64
	// Names and Queues are the job names and queues of the mix, most
	// common first.
	Names, Queues []string
}

// The mix, by i % 100: 65 completed, 10 failed (100,000 dead jobs in a
// million), 3 canceled, 12 pending (2 of them due in the future), 8
// retrying (half in backoff), 2 leased. The dead jobs' errors are of four
// kinds (60 % a timeout, 20 % a refused connection to one of 91 addresses,
// 10 % an HTTP 5xx from one of 977 URLs, 10 % a user not found), each kind
// one fingerprint, so the DLQ has about 30 groups (8 names, 4 errors).
const mix = `CASE
    WHEN i % 100 < 65 THEN 'completed'
    WHEN i % 100 < 75 THEN 'failed'
    WHEN i % 100 < 78 THEN 'canceled'
    WHEN i % 100 < 90 THEN 'pending'
    WHEN i % 100 < 98 THEN 'retrying'
    ELSE 'leased' END`

// FillJobs inserts n jobs in mixed states into the database at url
// (migrated, with no jobs of its own needed), plus one failed job with 25
// attempts, then VACUUMs and ANALYZEs jobs.
func FillJobs(ctx context.Context, url string, n int64) (Fixture, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return Fixture{}, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	f := Fixture{N: n, Attempts: 25, KeyEvery: 10,
		Names:  []string{"send_email", "resize_image", "sync_account", "report", "webhook", "cleanup", "index_doc", "rare_job"},
		Queues: []string{"default", "mail", "media", "reports", "low"}}
	// Created over the last 7 days, oldest first, so ids grow with time as
	// they do in service; names and queues skewed (the last name is 1 in
	// 10,000).
	stmt := `INSERT INTO jobs (name, queue, priority, payload, status, attempts, max_retries, idempotency_key,
		last_error, errors, result, worker_id, lease_token, lease_expires_at, dead_reason, error_fingerprint,
		created_at, started_at, finished_at, next_run_at)
	SELECT
		CASE WHEN i % 10000 = 7 THEN 'rare_job' ELSE (ARRAY['send_email','send_email','send_email','resize_image','resize_image',
			'sync_account','report','webhook','cleanup','index_doc'])[1 + (i / 7) % 10] END,
		(ARRAY['default','default','default','default','mail','mail','media','reports','low','low'])[1 + (i / 3) % 10],
		(i % 3) - 1,
		jsonb_build_object('user', 'u' || (i % 50000), 'n', i, 'note', 'order ' || i || ' of customer ' || (i % 977)),
		st,
		CASE st WHEN 'completed' THEN 1 WHEN 'failed' THEN 4 WHEN 'retrying' THEN 2 WHEN 'leased' THEN 1 ELSE 0 END,
		3,
		CASE WHEN i % 10 = 0 THEN 'key-' || i END,
		err,
		CASE WHEN st IN ('failed', 'retrying') THEN jsonb_build_array(jsonb_build_object('attempt', 1, 'error', err,
			'reason', 'timeout', 'worker_id', 'w' || (i % 40), 'at', t)) ELSE '[]' END,
		CASE WHEN st = 'completed' THEN '{"ok": true}'::jsonb END,
		CASE WHEN st IN ('leased', 'completed', 'failed') THEN 'w' || (i % 40) END,
		CASE WHEN st = 'leased' THEN i END,
		CASE WHEN st = 'leased' THEN now() + interval '5 minutes' END,
		CASE WHEN st = 'failed' THEN 'max_retries' END,
		CASE WHEN st = 'failed' THEN dts_error_fingerprint(err) END,
		t,
		CASE WHEN st IN ('completed', 'failed', 'leased') THEN t + interval '1 second' END,
		CASE WHEN st IN ('completed', 'failed', 'canceled') THEN t + interval '2 seconds' END,
		CASE WHEN st IN ('pending', 'retrying') AND i % 100 IN (88, 89, 94, 95, 96, 97) THEN now() + (i % 3600) * interval '1 second'
			ELSE t END
	FROM (SELECT i, t, st, CASE
			WHEN st = 'retrying' THEN 'timeout after 30s'
			WHEN st <> 'failed' THEN NULL
			WHEN i % 10 < 6 THEN 'timeout after 30s'
			WHEN i % 10 < 8 THEN 'dial tcp 10.0.' || (i % 7) || '.' || (i % 13) || ':5432: connect: connection refused'
			WHEN i % 10 < 9 THEN 'HTTP ' || (500 + i % 4) || ' from https://api.example.com/v1/users/' || (i % 977)
			ELSE 'user "u' || (i % 50000) || '" not found' END AS err
		FROM (SELECT i, now() - interval '7 days' + i * ($2::float8 / $1) * interval '1 second' AS t, ` + mix + ` AS st
			FROM generate_series(1, $1) AS i) AS g0) AS g`
	if _, err := conn.Exec(ctx, stmt, n, (7 * 24 * time.Hour).Seconds()); err != nil {
		return f, fmt.Errorf("insert %d jobs: %w", n, err)
	}
	if err := conn.QueryRow(ctx, `SELECT min(id), max(id) FROM jobs`).Scan(&f.FirstID, &f.LastID); err != nil {
		return f, fmt.Errorf("ids: %w", err)
	}
	if err := conn.QueryRow(ctx, `INSERT INTO jobs (name, queue, payload, status, attempts, max_retries, last_error, errors,
		worker_id, dead_reason, started_at, finished_at, created_at, error_fingerprint)
	SELECT 'flaky', 'default', '{"user": "u1"}', 'failed', 25, 24, 'attempt 25: connection reset',
		jsonb_agg(jsonb_build_object('attempt', a, 'error', 'attempt ' || a || ': connection reset by peer',
			'reason', 'job_error', 'worker_id', 'w' || (a % 7), 'at', now() - (26 - a) * interval '1 minute',
			'token', 4611686018427387904 + a, 'started', now() - (26 - a) * interval '1 minute' - interval '2 seconds',
			'extended', a % 3, 'next_state', CASE WHEN a < 25 THEN 'retrying' ELSE 'failed' END)
			|| CASE WHEN a < 25 THEN jsonb_build_object('retry_at', now() - (26 - a) * interval '1 minute' + interval '5 seconds')
			        ELSE '{}' END ORDER BY a),
		'w4', 'max_retries', now() - interval '1 minute', now(), now() - interval '30 minutes',
		dts_error_fingerprint('attempt 25: connection reset')
	FROM generate_series(1, 25) AS a
	RETURNING id`).Scan(&f.ManyAttempts); err != nil {
		return f, fmt.Errorf("the job of 25 attempts: %w", err)
	}
	// Its timeline's events: late results of five of its leases, and a
	// requeue refused (it was not dead yet).
	if _, err := conn.Exec(ctx, `INSERT INTO job_events (job_id, at, kind, detail)
		SELECT $1, now() - (26 - a) * interval '1 minute' + interval '1 second', 'stale_result',
			jsonb_build_object('worker_id', 'w' || (a % 7), 'token', 4611686018427387904 + a, 'attempt', a, 'outcome', 'completed')
		FROM generate_series(1, 25, 5) AS a`, f.ManyAttempts); err != nil {
		return f, fmt.Errorf("the events of the job of 25 attempts: %w", err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO audit_log (at, actor, action, target_type, target_id, details)
		VALUES (now() - interval '10 minutes', 'api_key:ops', 'job.requeue', 'job', $1::bigint::text, '{"result": "failed", "status": 409}')`,
		f.ManyAttempts); err != nil {
		return f, fmt.Errorf("the audit row of the job of 25 attempts: %w", err)
	}
	// A key in the middle of the table.
	mid := n / 2 / f.KeyEvery * f.KeyEvery
	f.Key = fmt.Sprintf("key-%d", mid)
	if err := conn.QueryRow(ctx, `SELECT id FROM jobs WHERE idempotency_key = $1`, f.Key).Scan(&f.KeyID); err != nil {
		return f, fmt.Errorf("key %s: %w", f.Key, err)
	}
	// As autovacuum leaves a table at rest: statistics, and the visibility
	// map that lets an index-only scan skip the heap.
	if _, err := conn.Exec(ctx, `VACUUM ANALYZE jobs`); err != nil {
		return f, fmt.Errorf("vacuum: %w", err)
	}
	return f, nil
}
