package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/job"
)

// This file holds the claims of unique jobs (docs/api.md, "Unique jobs").
// A job submitted with Unique claims its uniqueness key for Unique.For; a
// later submission of the same key gets the first job back while the claim
// holds: its time is not up and the first job is in one of Unique.States.
//
// What must stay true:
//   - Two concurrent submissions of one key create one job. Each first
//     takes the key's row of job_unique_claims (an upsert, which waits for
//     a concurrent claimer's commit), then, in a new statement whose
//     snapshot sees that commit, checks the claim, and only then inserts
//     the job and records it in the row, all in one transaction. Keys are
//     taken in byte order in one statement, so two batches never wait on
//     each other in a cycle; the rows of the jobs table are locked only
//     after every claim row is held.
//   - Jobs without Unique never read or write job_unique_claims, and no job
//     transition touches it: the claim's liveness is checked when the next
//     submission of the key arrives.
//   - Repeats of one key within a call get the answers they would get one
//     call each, in order: the first creates the key's job (or finds the
//     live one), the others answer its id. A first job not created because
//     its idempotency key names an earlier job is not the key's job (that
//     job holds no claim, and may be any job): the repeats with the same
//     idempotency key answer it too, and the next with another becomes the
//     key's first job in its place (promote).

// DefaultUniqueStates are the states in which a job holds its uniqueness
// claim when Unique.States is empty: until it fails or is canceled, and
// while it is completed, for the rest of the window.
var DefaultUniqueStates = []job.State{job.StateWaiting, job.StatePending, job.StateLeased, job.StateRetrying, job.StateCompleted}

// Unique makes a job unique (JobInsertParams.Unique).
type Unique struct {
	// For is how long the claim lasts from the submission (> 0).
	For time.Duration
	// States are the states in which the first job still holds the
	// claim; empty: DefaultUniqueStates.
	States []job.State
	// Key, if not empty, is the uniqueness key in place of the payload:
	// the claim is on name + queue + Key.
	Key string
}

// uniqueCleanupPerKey bounds the expired claims one claimed key deletes:
// more than one, so that the table shrinks back to the live claims.
const uniqueCleanupPerKey = 2

// uniqueDigest is the key of p's claim: a SHA-256 of its name, queue, and
// explicit key or canonical payload (object keys sorted, whitespace
// removed, so {"a":1,"b":2} and { "b": 2, "a": 1 } are one job).
func uniqueDigest(p *JobInsertParams) []byte {
	h := sha256.New()
	queue := p.Queue
	if queue == "" {
		queue = "default"
	}
	fmt.Fprintf(h, "dts-unique-v1\x00%s\x00%s\x00", p.Name, queue)
	if p.Unique.Key != "" {
		fmt.Fprintf(h, "key\x00%s", p.Unique.Key)
	} else {
		h.Write([]byte("payload\x00"))
		h.Write(canonicalJSON(p.Payload))
	}
	return h.Sum(nil)
}

// canonicalJSON re-encodes raw with object keys sorted (encoding/json
// sorts map keys) and numbers as written. Invalid JSON, which validation
// stops before here, is returned as it is.
func canonicalJSON(raw json.RawMessage) []byte {
	if len(raw) == 0 {
		return []byte("null")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return raw
	}
	out, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return out
}

// uniqueBatch is the claims of one JobInsert call.
type uniqueBatch struct {
	keys   map[int][]byte // index of a job to create → its claim's key
	follow map[int]int    // index of a repeat → index of the key's first job
}

// jobUniqueClaim takes the claim rows of the unique jobs among params and
// fills out for each whose claim is held by a live job. It returns the
// indices, ascending, of the jobs still to insert: those without Unique and
// the first job of each key not held.
func jobUniqueClaim(ctx context.Context, tx pgx.Tx, params []JobInsertParams, out []JobInsertResult) (*uniqueBatch, []int, error) {
	u := &uniqueBatch{keys: map[int][]byte{}, follow: map[int]int{}}
	first := map[string]int{}
	var rest []int
	var keys [][]byte
	for k := range params {
		p := &params[k]
		if p.Unique == nil {
			rest = append(rest, k)
			continue
		}
		d := uniqueDigest(p)
		if f, ok := first[string(d)]; ok {
			u.follow[k] = f
			continue
		}
		first[string(d)] = k
		u.keys[k] = d
		keys = append(keys, d)
	}
	slices.SortFunc(keys, bytes.Compare)
	if _, err := tx.Exec(ctx, q("JobUniqueClaimLock"), keys); err != nil {
		return nil, nil, fmt.Errorf("take unique keys: %w", err)
	}
	rows, err := tx.Query(ctx, q("JobUniqueClaimLive"), keys)
	if err != nil {
		return nil, nil, fmt.Errorf("check unique keys: %w", err)
	}
	live := map[string]int64{}
	for rows.Next() {
		var key []byte
		var id int64
		if err := rows.Scan(&key, &id); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("check unique keys: %w", err)
		}
		live[string(key)] = id
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("check unique keys: %w", err)
	}
	for k, d := range u.keys {
		if id, ok := live[string(d)]; ok {
			out[k] = JobInsertResult{ID: id}
			delete(u.keys, k) // its claim stays as it is
			continue
		}
		rest = append(rest, k)
	}
	slices.Sort(rest)
	return u, rest, nil
}

// promote runs after the jobs of u.keys are inserted. For each key whose
// first job was not created, its idempotency key naming an earlier job,
// the repeats in order that carry the same idempotency key keep following
// it (alone, they would get that job too); the first repeat with another
// one (or none) takes the key's place in u.keys (this transaction holds
// the claim row), and the repeats after it follow it. It returns those
// new first jobs, ascending, to be inserted; then promote runs again.
func (u *uniqueBatch) promote(params []JobInsertParams, out []JobInsertResult) []int {
	if len(u.follow) == 0 {
		return nil
	}
	repeats := map[int][]int{} // a first job not created → its repeats
	for k, f := range u.follow {
		if _, ok := u.keys[f]; ok && !out[f].Created {
			repeats[f] = append(repeats[f], k)
		}
	}
	var next []int
	for f, rs := range repeats {
		slices.Sort(rs)
		for i, r := range rs {
			if params[r].IdempotencyKey == params[f].IdempotencyKey {
				continue
			}
			u.keys[r] = u.keys[f]
			delete(u.keys, f)
			delete(u.follow, r)
			for _, later := range rs[i+1:] {
				u.follow[later] = r
			}
			next = append(next, r)
			break
		}
	}
	slices.Sort(next)
	return next
}

// fillRepeats answers each repeat of a key with its first job's id, once
// that job is inserted or found.
func (u *uniqueBatch) fillRepeats(out []JobInsertResult) {
	for k, f := range u.follow {
		out[k] = JobInsertResult{ID: out[f].ID}
	}
}

// jobUniqueSet records the jobs created for the taken keys in their claim
// rows (a key whose job was not created, its idempotency key naming an
// earlier job, is left unclaimed) and deletes a few expired claims.
func jobUniqueSet(ctx context.Context, tx pgx.Tx, params []JobInsertParams, u *uniqueBatch, out []JobInsertResult) error {
	n := len(u.keys)
	if n == 0 {
		return nil
	}
	keys, ids, states, ms := make([][]byte, 0, n), make([]*int64, 0, n), make([]string, 0, n), make([]int64, 0, n)
	for k, d := range u.keys {
		p := params[k]
		var id *int64
		if out[k].Created {
			id = &out[k].ID
		}
		sts := p.Unique.States
		if len(sts) == 0 {
			sts = DefaultUniqueStates
		}
		names := make([]string, len(sts))
		for i, st := range sts {
			names[i] = string(st)
		}
		keys, ids = append(keys, d), append(ids, id)
		states, ms = append(states, strings.Join(names, ",")), append(ms, millis(p.Unique.For))
	}
	if _, err := tx.Exec(ctx, q("JobUniqueSetClaims"), keys, ids, states, ms); err != nil {
		return fmt.Errorf("record unique claims: %w", err)
	}
	if _, err := tx.Exec(ctx, q("JobUniqueSetCleanup"), uniqueCleanupPerKey*n); err != nil {
		return fmt.Errorf("delete expired unique claims: %w", err)
	}
	return nil
}
