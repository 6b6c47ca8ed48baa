package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/job"
)

// This file holds the tables of migration 002: API keys, worker
// credentials and the audit log. Secrets are stored only as the hashes
// auth.HashSecret makes; no method here ever sees a key itself. Every
// change to a key or a credential writes its audit row in the same
// transaction, so neither exists without the other.

// querier is what both a pool and a transaction offer.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// AuditEntry is one row of the audit log.
type AuditEntry struct {
	ID         int64
	At         time.Time
	Actor      string // auth.Principal.Actor(), "cli:<user>", or "anonymous"
	Action     string // "job.cancel", "token.create", ...
	TargetType string // "job", "api_key", "worker_credential"
	TargetID   string
	Details    json.RawMessage // a JSON object; nil: {}
}

// Audit actions and target types.
const (
	AuditJobCancel              = "job.cancel"
	AuditJobRequeue             = "job.requeue"
	AuditJobDelete              = "job.delete"
	AuditJobBulk                = "job.bulk" // target_id: the action; details: its filters and counts
	AuditJobRunNow              = "job.run_now"
	AuditWorkerDrain            = "worker.drain"
	AuditWorkerUndrain          = "worker.undrain"
	AuditOperationCancel        = "operation.cancel"
	AuditTokenCreate            = "token.create"
	AuditTokenRevoke            = "token.revoke"
	AuditWorkerCredentialCreate = "worker_credential.create"
	AuditWorkerCredentialRevoke = "worker_credential.revoke"

	AuditTargetJob              = "job"
	AuditTargetAPIKey           = "api_key"
	AuditTargetWorkerCredential = "worker_credential"
	AuditTargetWorker           = "worker"
	AuditTargetOperation        = "operation"
)

func auditInsert(ctx context.Context, db querier, e AuditEntry) (int64, error) {
	details := e.Details
	if len(details) == 0 {
		details = json.RawMessage(`{}`)
	}
	var id int64
	err := db.QueryRow(ctx, q("AuditInsert"), e.Actor, e.Action, e.TargetType, e.TargetID, string(details)).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("insert audit row: %w", interpretError(err))
	}
	return id, nil
}

func detailsJSON(m map[string]any) json.RawMessage {
	b, err := json.Marshal(m)
	if err != nil { // only strings, numbers, bools and string slices go in
		return json.RawMessage(`{}`)
	}
	return b
}

// AuditInsert writes an audit row and returns its id. Callers write it
// before the action it announces, so that no admin action happens unrecorded,
// and then record the outcome with AuditSetOutcome.
func (s *Store) AuditInsert(ctx context.Context, e AuditEntry) (int64, error) {
	return auditInsert(ctx, s.pool, e)
}

// AuditSetOutcome merges outcome into the details of audit row id.
func (s *Store) AuditSetOutcome(ctx context.Context, id int64, outcome map[string]any) error {
	_, err := s.pool.Exec(ctx, q("AuditSetOutcome"), id, string(detailsJSON(outcome)))
	if err != nil {
		return fmt.Errorf("record outcome of audit row %d: %w", id, interpretError(err))
	}
	return nil
}

// AuditList returns up to limit audit rows, newest first, with ids below
// before (0: from the newest). next is the cursor of the next page (0: none).
func (s *Store) AuditList(ctx context.Context, limit int, before int64) (entries []AuditEntry, next int64, err error) {
	if before <= 0 {
		before = 1<<63 - 1
	}
	rows, err := s.pool.Query(ctx, q("AuditList"), before, limit+1)
	if err != nil {
		return nil, 0, fmt.Errorf("list audit log: %w", interpretError(err))
	}
	entries, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		var details []byte
		err := row.Scan(&e.ID, &e.At, &e.Actor, &e.Action, &e.TargetType, &e.TargetID, &details)
		e.Details = details
		return e, err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list audit log: %w", interpretError(err))
	}
	if len(entries) > limit {
		entries = entries[:limit]
		next = entries[limit-1].ID
	}
	return entries, next, nil
}

// ---- API keys ----

// APIKeyInsertParams describes an API key to create.
type APIKeyInsertParams struct {
	Name   string
	Hash   string        // auth.HashSecret of the key
	Scopes []string      // checked by auth.NormalizeScopes
	TTL    time.Duration // 0: never expires; counted on PostgreSQL's clock
	Actor  string        // who creates it, for the audit log
}

// scanAPIKey reads the columns of the fragment apiKeyColumns
// (queries/auth.sql), in its order.
func scanAPIKey(row pgx.Row) (auth.APIKey, error) {
	var k auth.APIKey
	err := row.Scan(&k.ID, &k.Name, &k.Scopes, &k.CreatedAt, &k.ExpiresAt, &k.RevokedAt, &k.LastUsedAt)
	return k, err
}

// APIKeyInsert creates an API key and its audit row in one transaction.
func (s *Store) APIKeyInsert(ctx context.Context, p APIKeyInsertParams) (auth.APIKey, error) {
	var k auth.APIKey
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		k, err = scanAPIKey(tx.QueryRow(ctx, q("APIKeyInsert"), p.Name, p.Hash, p.Scopes, millis(p.TTL)))
		if err != nil {
			return interpretError(err)
		}
		details := map[string]any{"name": p.Name, "scopes": p.Scopes}
		if k.ExpiresAt != nil {
			details["expires_at"] = k.ExpiresAt.UTC().Format(time.RFC3339)
		}
		_, err = auditInsert(ctx, tx, AuditEntry{Actor: p.Actor, Action: AuditTokenCreate, TargetType: AuditTargetAPIKey,
			TargetID: fmt.Sprint(k.ID), Details: detailsJSON(details)})
		return err
	})
	if err != nil {
		return auth.APIKey{}, fmt.Errorf("create api key: %w", err)
	}
	return k, nil
}

// APIKeyList returns every API key, newest first (revoked ones included).
func (s *Store) APIKeyList(ctx context.Context) ([]auth.APIKey, error) {
	rows, err := s.pool.Query(ctx, q("APIKeyList"))
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", interpretError(err))
	}
	keys, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (auth.APIKey, error) { return scanAPIKey(row) })
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", interpretError(err))
	}
	return keys, nil
}

// APIKeyRevoke revokes API key id (a second revocation keeps the first
// time) and writes the audit row, in one transaction. It returns
// job.ErrNotFound if there is no such key.
func (s *Store) APIKeyRevoke(ctx context.Context, id int64, actor string) (auth.APIKey, error) {
	var k auth.APIKey
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var already bool
		if err := tx.QueryRow(ctx, q("APIKeyRevokeLock"), id).Scan(&already); err != nil {
			return interpretError(err)
		}
		var err error
		k, err = scanAPIKey(tx.QueryRow(ctx, q("APIKeyRevoke"), id))
		if err != nil {
			return interpretError(err)
		}
		_, err = auditInsert(ctx, tx, AuditEntry{Actor: actor, Action: AuditTokenRevoke, TargetType: AuditTargetAPIKey,
			TargetID: fmt.Sprint(id), Details: detailsJSON(map[string]any{"name": k.Name, "already_revoked": already})})
		return err
	})
	if err != nil {
		return auth.APIKey{}, fmt.Errorf("revoke api key %d: %w", id, err)
	}
	return k, nil
}

// APIKeyByHash implements auth.KeyLookup: it finds the key with hash (even
// a revoked or expired one: the caller decides) and records that it was
// used. An unknown hash gives auth.ErrKeyNotFound.
func (s *Store) APIKeyByHash(ctx context.Context, hash string) (auth.APIKey, error) {
	k, err := scanAPIKey(s.pool.QueryRow(ctx, q("APIKeyByHash"), hash))
	if err != nil {
		if err = interpretError(err); errors.Is(err, job.ErrNotFound) {
			return auth.APIKey{}, auth.ErrKeyNotFound
		}
		return auth.APIKey{}, fmt.Errorf("look up api key: %w", err)
	}
	return k, nil
}

// ---- worker credentials ----

// WorkerCredential is a worker credential as stored (never the secret).
type WorkerCredential struct {
	ID        int64
	WorkerID  string
	CreatedAt time.Time
	RevokedAt *time.Time
}

// WorkerCredentialInsert stores the hash of a new credential for workerID
// and its audit row, in one transaction. Earlier credentials stay valid
// until revoked, so a worker can be moved to a new one without downtime.
func (s *Store) WorkerCredentialInsert(ctx context.Context, workerID, hash, actor string) (WorkerCredential, error) {
	var c WorkerCredential
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, q("WorkerCredentialInsert"), workerID, hash).Scan(&c.ID, &c.WorkerID, &c.CreatedAt, &c.RevokedAt)
		if err != nil {
			return interpretError(err)
		}
		_, err = auditInsert(ctx, tx, AuditEntry{Actor: actor, Action: AuditWorkerCredentialCreate, TargetType: AuditTargetWorkerCredential,
			TargetID: workerID, Details: detailsJSON(map[string]any{"credential_id": c.ID})})
		return err
	})
	if err != nil {
		return WorkerCredential{}, fmt.Errorf("create credential for worker %s: %w", workerID, err)
	}
	return c, nil
}

// WorkerCredentialList returns every worker credential, newest first.
func (s *Store) WorkerCredentialList(ctx context.Context) ([]WorkerCredential, error) {
	rows, err := s.pool.Query(ctx, q("WorkerCredentialList"))
	if err != nil {
		return nil, fmt.Errorf("list worker credentials: %w", interpretError(err))
	}
	cs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (WorkerCredential, error) {
		var c WorkerCredential
		err := row.Scan(&c.ID, &c.WorkerID, &c.CreatedAt, &c.RevokedAt)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("list worker credentials: %w", interpretError(err))
	}
	return cs, nil
}

// WorkerCredentialRevoke revokes every active credential of workerID and
// writes the audit row, in one transaction. It returns how many it revoked
// (0 is not an error: the audit row still says someone tried).
func (s *Store) WorkerCredentialRevoke(ctx context.Context, workerID, actor string) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, q("WorkerCredentialRevoke"), workerID)
		if err != nil {
			return interpretError(err)
		}
		n = tag.RowsAffected()
		_, err = auditInsert(ctx, tx, AuditEntry{Actor: actor, Action: AuditWorkerCredentialRevoke, TargetType: AuditTargetWorkerCredential,
			TargetID: workerID, Details: detailsJSON(map[string]any{"revoked": n})})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("revoke credentials of worker %s: %w", workerID, err)
	}
	return n, nil
}

// WorkerCredentialHashes returns the hashes of every unrevoked credential,
// by worker id: the coordinator checks heartbeats against a copy of it.
func (s *Store) WorkerCredentialHashes(ctx context.Context) (map[string][]string, error) {
	rows, err := s.pool.Query(ctx, q("WorkerCredentialHashes"))
	if err != nil {
		return nil, fmt.Errorf("load worker credentials: %w", interpretError(err))
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var id, hash string
		if err := rows.Scan(&id, &hash); err != nil {
			return nil, fmt.Errorf("load worker credentials: %w", interpretError(err))
		}
		out[id] = append(out[id], hash)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load worker credentials: %w", interpretError(err))
	}
	return out, nil
}
