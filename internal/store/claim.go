package store

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Claimed is a job just leased to a worker.
type Claimed struct {
	ID             int64
	Name           string
	Queue          string
	Payload        json.RawMessage
	Attempt        int
	MaxRetries     int
	TimeoutSeconds int
	LeaseToken     int64
	WorkerID       string
	CreatedAt      time.Time
	// TraceParent is the W3C trace context the job continues; empty:
	// none.
	TraceParent string
}

// JobClaimParams says how many due jobs to lease and to whom.
type JobClaimParams struct {
	// Epoch is the claiming leader's epoch (see dts_fence).
	Epoch int64
	// Types limits the claim to these job names; nil claims any name.
	Types []string
	// Slots names the worker for each claimed job in order: the first due
	// job goes to Slots[0], the next to Slots[1], and so on. Its length is
	// the most jobs claimed.
	Slots []string
	// Lease is how long the lease lasts unless heartbeats extend it.
	Lease time.Duration
}

// JobClaimBatch leases up to len(Slots) due jobs in priority, due-time, id
// order, skipping rows other claimers hold. Each gets a fresh fencing token
// (NewLeaseTokens) and its attempt count grows by one. A deposed leader's
// claim fails with job.ErrDeposed and leases nothing.
//
// It is one call of dts_claim_jobs (functions.sql): one round trip and one
// commit, which matters because the claim is on the path of every job's
// start. Inside, two statements: lock the due rows, then update exactly
// those by primary key from an unnest of ids and workers. A single statement
// joining the locked rows back to jobs let the generic plan guess the
// LIMIT's size from the statistics (10% of the table) and hash-join against
// a sequential scan of the whole table once it was large, which made each
// claim on a large backlog scan it. An unnest of ids is
// estimated at a handful of rows, so it always becomes primary-key lookups.
func (s *Store) JobClaimBatch(ctx context.Context, p JobClaimParams) ([]Claimed, error) {
	if len(p.Slots) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, q("JobClaimBatch"), p.Epoch, p.Types, p.Slots, NewLeaseTokens(len(p.Slots)), millis(p.Lease))
	if err != nil {
		return nil, fmt.Errorf("claim jobs: %w", interpretError(err))
	}
	return collectClaimed(rows, len(p.Slots))
}

// ClaimGroup is one group of slots of a JobClaimGroups: the job names its
// workers handle and its free slots.
type ClaimGroup struct {
	// Types are the group's job names; nil: any name.
	Types []string
	// Slots are as JobClaimParams's: the group's jobs go to them in order.
	Slots []string
}

// JobClaimGroupsParams is a claim for several groups of slots at once.
type JobClaimGroupsParams struct {
	// Epoch is the claiming leader's epoch (see dts_fence).
	Epoch int64
	// Groups are claimed for in order. No two may share a job name, and a
	// group of any name (Types nil) must be the only one.
	Groups []ClaimGroup
	// Lease is how long the leases last unless heartbeats extend them.
	Lease time.Duration
}

// JobClaimGroups is JobClaimBatch for several groups of slots in one round
// trip and one commit: each group leases up to len(Slots) due jobs of its
// names, in priority, due-time, id order, to its own slots. It is one call
// of dts_claim_group_jobs (functions.sql). Groups whose names overlap are
// refused (a job could be leased twice in one transaction): claim them
// one by one.
func (s *Store) JobClaimGroups(ctx context.Context, p JobClaimGroupsParams) ([]Claimed, error) {
	if err := checkDisjointGroups(p.Groups); err != nil {
		return nil, err
	}
	// Never nil: a NULL array would read as any name in every group.
	types, slots := []string{}, []string{}
	typeEnds := make([]int32, len(p.Groups))
	slotEnds := make([]int32, len(p.Groups))
	anyName := make([]bool, len(p.Groups))
	for i, g := range p.Groups {
		types = append(types, g.Types...)
		slots = append(slots, g.Slots...)
		typeEnds[i], slotEnds[i], anyName[i] = int32(len(types)), int32(len(slots)), g.Types == nil
	}
	if len(slots) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, q("JobClaimGroups"), p.Epoch, types, typeEnds, anyName, slots, slotEnds,
		NewLeaseTokens(len(slots)), millis(p.Lease))
	if err != nil {
		return nil, fmt.Errorf("claim jobs for %d groups: %w", len(p.Groups), interpretError(err))
	}
	return collectClaimed(rows, len(slots))
}

// checkDisjointGroups refuses groups that could lock the same job: two
// that share a name, or a group of any name beside another.
func checkDisjointGroups(gs []ClaimGroup) error {
	seen := map[string]int{}
	for i, g := range gs {
		if g.Types == nil && len(gs) > 1 {
			return fmt.Errorf("claim jobs for %d groups: group %d takes any name", len(gs), i)
		}
		for _, name := range g.Types {
			if j, ok := seen[name]; ok && j != i {
				return fmt.Errorf("claim jobs for %d groups: groups %d and %d both take %q", len(gs), j, i, name)
			}
			seen[name] = i
		}
	}
	return nil
}

// JobClaimQueuesParams is a claim that honours queues: JobClaimParams plus
// which queues to claim from and each one's share of the slots.
type JobClaimQueuesParams struct {
	JobClaimParams
	// Queues are the queues to claim from; nil claims from every queue.
	Queues []string
	// Shares, when not nil, has one entry per queue of Queues: how many
	// slots that queue gets before the slots left are filled from every
	// queue in priority order. Nil: priority order from the start.
	Shares []int32
}

// JobClaimQueues is JobClaimBatch for when queues are configured: paused
// queues are skipped and capped ones stay within their cap, both read in
// the claim's own transaction, and Shares split the slots by queue. It is
// one call of dts_claim_queue_jobs (functions.sql). The dispatcher calls
// it only when something is configured: otherwise JobClaimBatch, whose
// statement knows nothing of queues, does the same work for less.
func (s *Store) JobClaimQueues(ctx context.Context, p JobClaimQueuesParams) ([]Claimed, error) {
	if len(p.Slots) == 0 {
		return nil, nil
	}
	if p.Shares != nil && len(p.Shares) != len(p.Queues) {
		return nil, fmt.Errorf("claim jobs by queue: %d shares for %d queues", len(p.Shares), len(p.Queues))
	}
	rows, err := s.pool.Query(ctx, q("JobClaimQueues"), p.Epoch, p.Types, p.Queues, p.Shares, p.Slots,
		NewLeaseTokens(len(p.Slots)), millis(p.Lease))
	if err != nil {
		return nil, fmt.Errorf("claim jobs by queue: %w", interpretError(err))
	}
	return collectClaimed(rows, len(p.Slots))
}

// JobClaimLimitedParams is a claim of jobs with a limit_key: JobClaimParams
// plus the queues the slots' workers serve.
type JobClaimLimitedParams struct {
	JobClaimParams
	// Queues are the only queues to claim from; nil: every queue.
	Queues []string
}

// JobClaimLimited leases up to len(Slots) due jobs that have a limit_key
// (a concurrency key, or a name limit's key) and nothing else, keeping
// each key within its concurrency and rate (table limits) and each queue
// within its pause and cap, all read in the claim's own transaction. It is
// one call of dts_claim_limited_jobs (functions.sql). JobClaimBatch and
// JobClaimQueues never lease such jobs; the dispatcher calls this only
// while some may be waiting (JobLimitedWaiting).
func (s *Store) JobClaimLimited(ctx context.Context, p JobClaimLimitedParams) ([]Claimed, error) {
	if len(p.Slots) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, q("JobClaimLimited"), p.Epoch, p.Types, p.Queues, p.Slots,
		NewLeaseTokens(len(p.Slots)), millis(p.Lease))
	if err != nil {
		return nil, fmt.Errorf("claim limited jobs: %w", interpretError(err))
	}
	return collectClaimed(rows, len(p.Slots))
}

// collectClaimed reads the rows of a claim function.
func collectClaimed(rows pgx.Rows, slots int) ([]Claimed, error) {
	// Sized for every slot: growing the slice row by row was an eighth of
	// the leader's CPU under load.
	// c outside the function: Scan's arguments escape, and a variable of
	// the function would move to the heap once per row. The payload is
	// scanned as bytes: as a json.RawMessage pgx would parse every payload
	// with encoding/json, which PostgreSQL has checked already (jsonb).
	var c Claimed
	out, err := pgx.AppendRows(make([]Claimed, 0, slots), rows, func(r pgx.CollectableRow) (Claimed, error) {
		c = Claimed{}
		err := r.Scan(&c.ID, &c.Name, &c.Queue, (*[]byte)(&c.Payload), &c.Attempt, &c.MaxRetries, &c.TimeoutSeconds,
			&c.LeaseToken, &c.WorkerID, &c.CreatedAt, &c.TraceParent)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim jobs: %w", interpretError(err))
	}
	// RETURNING order is not guaranteed; callers map jobs to workers by
	// WorkerID, and slot order is kept by the function's ids.
	return out, nil
}

// NewLeaseTokens returns n fencing tokens: random, positive 63-bit
// numbers from crypto/rand. A token is the only secret that ties a result
// to its lease, so it must not be guessable from another lease's token.
func NewLeaseTokens(n int) []int64 {
	buf := make([]byte, 8*n)
	_, _ = rand.Read(buf) // crypto/rand.Read never fails (Go 1.24+)
	out := make([]int64, n)
	for i := range out {
		t := int64(binary.LittleEndian.Uint64(buf[8*i:]) >> 1)
		if t == 0 {
			t = 1 // 0 means "no token" in the registry
		}
		out[i] = t
	}
	return out
}
