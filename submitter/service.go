package submitter

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter/ui"
)

// service is what the JSON handlers and the console (package ui) both
// call to read and change jobs: it validates filters, runs the store,
// counts store errors, writes the audit row of every action with the
// acting principal (from ctx, httpx.PrincipalFrom) and wakes the
// coordinator. Its errors are the API's (*httpx.Error, the job sentinels),
// so each front end only decides how to show them. It holds no state of
// its own.
type service struct{ s *Server }

// Stats counts jobs by state, the due queue, the DLQ and workers by state.
func (v service) Stats(ctx context.Context) (wire.StatsResponse, error) {
	st, err := v.s.store.StatsGet(ctx)
	if err != nil {
		return wire.StatsResponse{}, v.s.storeError(storeOpStats, err)
	}
	resp := wire.StatsResponse{
		Jobs:                        make(map[string]int64, len(job.States)),
		QueueDepth:                  st.QueueDepth,
		DLQDepth:                    st.DeadDepth,
		OldestPendingSeconds:        st.OldestPendingAge,
		OldestHandledPendingSeconds: st.OldestHandledAge,
		Workers:                     st.WorkersByState,
		UnknownNames:                st.Unhandled,
		UnknownNamesOther:           st.UnhandledOther,
		StarvedNames:                st.Starved,
	}
	for _, state := range job.States {
		resp.Jobs[string(state)] = st.ByState[state]
	}
	return resp, nil
}

// Leader returns the coordinator leader's id as recorded ("" if none ever
// led) and its epoch.
func (v service) Leader(ctx context.Context) (string, int64, error) {
	epoch, id, err := v.s.store.LeaderGet(ctx)
	if err != nil {
		return "", 0, v.s.storeError(storeOpLeader, err)
	}
	return id, epoch, nil
}

// Rollup returns the per-minute rollup (written by the leader
// coordinator) of the minutes from since on, oldest first.
func (v service) Rollup(ctx context.Context, since time.Time) ([]store.RollupRow, error) {
	rows, err := v.s.store.RollupRange(ctx, since)
	if err != nil {
		return nil, v.s.storeError(storeOpRollup, err)
	}
	return rows, nil
}

// JobGet returns one job.
func (v service) JobGet(ctx context.Context, id int64) (wire.Job, error) {
	j, err := v.s.store.JobGet(ctx, id)
	if err != nil {
		return wire.Job{}, v.s.storeError(storeOpGet, err)
	}
	return jobView(j), nil
}

// JobGetByKey returns the job holding an idempotency key (the console's
// key: search).
func (v service) JobGetByKey(ctx context.Context, key string) (wire.Job, error) {
	if err := checkIdempotencyKey(key, "key"); err != nil {
		return wire.Job{}, err
	}
	j, err := v.s.store.JobGetByKey(ctx, key)
	if err != nil {
		return wire.Job{}, v.s.storeError(storeOpGet, err)
	}
	return jobView(j), nil
}

// JobList returns a page of jobs, newest first. It checks p's filters
// (errors name them as the API's query parameters: status, name, queue)
// and bounds the page to maxListBytes.
func (v service) JobList(ctx context.Context, p store.JobListParams) (wire.JobListResponse, error) {
	p, err := v.checkList(p)
	if err != nil {
		return wire.JobListResponse{}, err
	}
	return v.jobList(ctx, p)
}

// checkList checks a listing's filters and bounds its bytes.
func (v service) checkList(p store.JobListParams) (store.JobListParams, error) {
	if p.State != "" && !p.State.Valid() {
		return p, httpx.InvalidField("status", "must be one of %s", statesList())
	}
	if p.Name != "" {
		if msg := checkText(p.Name, maxNameLen); msg != "" {
			return p, httpx.InvalidField("name", "%s", msg)
		}
	}
	if p.Queue != "" && !wire.ValidQueueName(p.Queue) {
		return p, httpx.InvalidField("queue", "must be 1 to %d characters from A-Z a-z 0-9 _ . : -", maxQueueLen)
	}
	if err := checkFingerprint(p.Fingerprint, p.Name); err != nil {
		return p, err
	}
	p.MaxBytes = maxListBytes
	return p, nil
}

// maxFingerprintLen bounds a fingerprint filter: dts_error_fingerprint
// cuts fingerprints to 200 characters.
const maxFingerprintLen = 200

// checkFingerprint checks a fingerprint filter ("" is none): a
// dead-letter group is a name and a fingerprint, so it needs name.
func checkFingerprint(fp, name string) error {
	if fp == "" {
		return nil
	}
	if msg := checkText(fp, maxFingerprintLen); msg != "" {
		return httpx.InvalidField("fingerprint", "%s", msg)
	}
	if name == "" {
		return httpx.InvalidField("fingerprint", "goes with name: a dead-letter group is a job name and an error fingerprint")
	}
	return nil
}

// jobList runs a checked listing.
func (v service) jobList(ctx context.Context, p store.JobListParams) (wire.JobListResponse, error) {
	jobs, next, err := v.s.store.JobList(ctx, p)
	if err != nil {
		return wire.JobListResponse{}, v.s.storeError(storeOpList, err)
	}
	resp := wire.JobListResponse{Jobs: make([]wire.Job, len(jobs))}
	for i, j := range jobs {
		resp.Jobs[i] = jobView(j)
	}
	if next > 0 {
		c := formatID(next)
		resp.NextCursor = &c
	}
	return resp, nil
}

// maxSearchLen bounds each text a search looks for; maxSearchPath the
// segments of a payload path.
const (
	maxSearchLen  = 200
	maxSearchPath = 16
)

// JobSearch returns a page of the jobs p selects that pass scan's tests
// (the console's payload:, payload.<path>:, worker: and error:), newest
// first. It stops after ui.SearchBudget: stopped says so, and the
// NextCursor is where to go on.
func (v service) JobSearch(ctx context.Context, p store.JobListParams, scan store.JobScan) (resp wire.JobListResponse, stopped bool, err error) {
	p, err = v.checkList(p)
	if err != nil {
		return resp, false, err
	}
	if err := checkScan(scan); err != nil {
		return resp, false, err
	}
	res, err := v.s.store.JobSearch(ctx, store.JobSearchParams{List: p, Scan: scan, Budget: ui.SearchBudget})
	if err != nil {
		return resp, false, v.s.storeError(storeOpList, err)
	}
	resp.Jobs = make([]wire.Job, len(res.Jobs))
	for i, j := range res.Jobs {
		resp.Jobs[i] = jobView(j)
	}
	if res.Next > 0 {
		c := formatID(res.Next)
		resp.NextCursor = &c
	}
	return resp, res.Stopped, nil
}

// checkScan checks the tests of a search, each as the field the search
// box names it.
func checkScan(s store.JobScan) error {
	for _, f := range []struct{ name, val string }{{"payload", s.Text}, {"worker", s.Worker}, {"error", s.Error}} {
		if msg := checkText(f.val, maxSearchLen); msg != "" {
			return httpx.InvalidField(f.name, "%s", msg)
		}
	}
	if s.Path == nil {
		return nil
	}
	field := "payload." + strings.Join(s.Path, ".")
	if len(s.Path) > maxSearchPath {
		return httpx.InvalidField("payload", "a path has %d segments, at most %d are allowed", len(s.Path), maxSearchPath)
	}
	for _, seg := range s.Path {
		if seg == "" {
			return httpx.InvalidField("payload", "a path's segments must not be empty (payload.a.b:value)")
		}
		if msg := checkText(seg, maxSearchLen); msg != "" {
			return httpx.InvalidField("payload", "a path segment %s", msg)
		}
	}
	if msg := checkText(s.PathValue, maxSearchLen); msg != "" {
		return httpx.InvalidField(field, "%s", msg)
	}
	return nil
}

// DeadList returns a page of the DLQ, the most recently failed first,
// from cursor (a next_cursor; "" for the first page), of one queue's dead
// jobs when queue is not "" (errors name the query parameters: queue,
// cursor).
func (v service) DeadList(ctx context.Context, queue string, limit int, cursor string) (wire.DLQResponse, error) {
	if queue != "" && !wire.ValidQueueName(queue) {
		return wire.DLQResponse{}, httpx.InvalidField("queue", "must be 1 to %d characters from A-Z a-z 0-9 _ . : -", maxQueueLen)
	}
	p := store.DeadListParams{Limit: limit, MaxBytes: maxListBytes, Queue: queue}
	if cursor != "" {
		var err error
		if p.After, err = parseDeadCursor(cursor); err != nil {
			return wire.DLQResponse{}, httpx.InvalidField("cursor", "not a cursor from next_cursor")
		}
	}
	dead, next, err := v.s.store.DeadListPage(ctx, p)
	if err != nil {
		return wire.DLQResponse{}, v.s.storeError(storeOpDeadList, err)
	}
	resp := wire.DLQResponse{Jobs: make([]wire.DLQJob, len(dead))}
	for i, d := range dead {
		resp.Jobs[i] = wire.DLQJob{Job: jobView(d.Job), Reason: d.Reason, Fingerprint: d.Fingerprint}
	}
	if next != nil {
		c := formatDeadCursor(*next)
		resp.NextCursor = &c
	}
	return resp, nil
}

// DeadRequeue makes a failed job pending again (audited: the row is
// written before the job is touched, and records the outcome). A payload,
// when not nil, replaces the job's: it is checked first by the rule of
// submitted payloads (checkPayload), and a payload refused changes
// nothing and writes no audit row; the row of a requeue with a payload
// says "payload_edited" from the start.
func (v service) DeadRequeue(ctx context.Context, id int64, payload json.RawMessage) (wire.SubmitResponse, error) {
	var details map[string]any
	if payload != nil {
		var err error
		if payload, err = checkPayload(payload, v.s.cfg.MaxPayloadBytes, "payload"); err != nil {
			return wire.SubmitResponse{}, err
		}
		details = map[string]any{"payload_edited": true, "payload_bytes": len(payload)}
	}
	done, err := v.s.auditWith(ctx, store.AuditJobRequeue, store.AuditTargetJob, formatID(id), details)
	if err != nil {
		return wire.SubmitResponse{}, err
	}
	if err := v.s.store.JobRequeueDead(ctx, id, payload); err != nil {
		done(failure(err))
		return wire.SubmitResponse{}, v.s.storeError(storeOpRequeue, err)
	}
	done(map[string]any{"result": "ok", "state": string(job.StatePending)})
	v.s.wake()
	return wire.SubmitResponse{JobID: formatID(id), Status: string(job.StatePending)}, nil
}

// DeadGroups returns the limit largest groups of dead jobs by name and
// error fingerprint (the console's Dead letters page, which caches them).
func (v service) DeadGroups(ctx context.Context, limit int) (store.DeadGroups, error) {
	g, err := v.s.store.DeadGroups(ctx, limit)
	if err != nil {
		return g, v.s.storeError(storeOpDeadList, err)
	}
	return g, nil
}
