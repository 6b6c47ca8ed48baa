package app

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/otelx"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter/ui"
)

// This file holds reading jobs (one, a page, a search), the stats, the
// dead-letter queue and requeueing from it.

// Stats counts jobs by state, the due queue, the DLQ and workers by state.
func (a *App) Stats(ctx context.Context) (wire.StatsResponse, error) {
	st, err := a.store.StatsGet(ctx)
	if err != nil {
		return wire.StatsResponse{}, a.storeError(storeOpStats, err)
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
func (a *App) Leader(ctx context.Context) (string, int64, error) {
	epoch, id, err := a.store.LeaderGet(ctx)
	if err != nil {
		return "", 0, a.storeError(storeOpLeader, err)
	}
	return id, epoch, nil
}

// Rollup returns the per-minute rollup (written by the leader
// coordinator) of the minutes from since on, oldest first.
func (a *App) Rollup(ctx context.Context, since time.Time) ([]store.RollupRow, error) {
	rows, err := a.store.RollupRange(ctx, since)
	if err != nil {
		return nil, a.storeError(storeOpRollup, err)
	}
	return rows, nil
}

// JobGet returns one job.
func (a *App) JobGet(ctx context.Context, id int64) (wire.Job, error) {
	j, err := a.store.JobGet(ctx, id)
	if err != nil {
		return wire.Job{}, a.storeError(storeOpGet, err)
	}
	return jobView(j), nil
}

// JobGetByKey returns the job holding an idempotency key (the console's
// key: search).
func (a *App) JobGetByKey(ctx context.Context, key string) (wire.Job, error) {
	if err := CheckIdempotencyKey(key, "key"); err != nil {
		return wire.Job{}, err
	}
	j, err := a.store.JobGetByKey(ctx, key)
	if err != nil {
		return wire.Job{}, a.storeError(storeOpGet, err)
	}
	return jobView(j), nil
}

// JobList returns a page of jobs, newest first. It checks p's filters
// (errors name them as the API's query parameters: status, name, queue)
// and bounds the page to maxListBytes.
func (a *App) JobList(ctx context.Context, p store.JobListParams) (wire.JobListResponse, error) {
	p, err := a.checkList(p)
	if err != nil {
		return wire.JobListResponse{}, err
	}
	return a.jobList(ctx, p)
}

// checkList checks a listing's filters and bounds its bytes.
func (a *App) checkList(p store.JobListParams) (store.JobListParams, error) {
	if p.State != "" && !p.State.Valid() {
		return p, httpx.InvalidField("status", "must be one of %s", StatesList())
	}
	if p.Name != "" {
		if msg := CheckText(p.Name, maxNameLen); msg != "" {
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
	if msg := CheckText(fp, maxFingerprintLen); msg != "" {
		return httpx.InvalidField("fingerprint", "%s", msg)
	}
	if name == "" {
		return httpx.InvalidField("fingerprint", "goes with name: a dead-letter group is a job name and an error fingerprint")
	}
	return nil
}

// jobList runs a checked listing.
func (a *App) jobList(ctx context.Context, p store.JobListParams) (wire.JobListResponse, error) {
	jobs, next, err := a.store.JobList(ctx, p)
	if err != nil {
		return wire.JobListResponse{}, a.storeError(storeOpList, err)
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
func (a *App) JobSearch(ctx context.Context, p store.JobListParams, scan store.JobScan) (resp wire.JobListResponse, stopped bool, err error) {
	p, err = a.checkList(p)
	if err != nil {
		return resp, false, err
	}
	if err := checkScan(scan); err != nil {
		return resp, false, err
	}
	res, err := a.store.JobSearch(ctx, store.JobSearchParams{List: p, Scan: scan, Budget: ui.SearchBudget})
	if err != nil {
		return resp, false, a.storeError(storeOpList, err)
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
		if msg := CheckText(f.val, maxSearchLen); msg != "" {
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
		if msg := CheckText(seg, maxSearchLen); msg != "" {
			return httpx.InvalidField("payload", "a path segment %s", msg)
		}
	}
	if msg := CheckText(s.PathValue, maxSearchLen); msg != "" {
		return httpx.InvalidField(field, "%s", msg)
	}
	return nil
}

// DeadList returns a page of the DLQ, the most recently failed first,
// from cursor (a next_cursor; "" for the first page), of one queue's dead
// jobs when queue is not "" (errors name the query parameters: queue,
// cursor).
func (a *App) DeadList(ctx context.Context, queue string, limit int, cursor string) (wire.DLQResponse, error) {
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
	dead, next, err := a.store.DeadListPage(ctx, p)
	if err != nil {
		return wire.DLQResponse{}, a.storeError(storeOpDeadList, err)
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
func (a *App) DeadRequeue(ctx context.Context, id int64, payload json.RawMessage) (wire.SubmitResponse, error) {
	var details map[string]any
	if payload != nil {
		var err error
		if payload, err = CheckPayload(payload, a.cfg.MaxPayloadBytes, "payload"); err != nil {
			return wire.SubmitResponse{}, err
		}
		details = map[string]any{"payload_edited": true, "payload_bytes": len(payload)}
	}
	done, err := a.auditWith(ctx, store.AuditJobRequeue, store.AuditTargetJob, formatID(id), details)
	if err != nil {
		return wire.SubmitResponse{}, err
	}
	if err := a.store.JobRequeueDead(ctx, id, payload); err != nil {
		done(failure(err))
		return wire.SubmitResponse{}, a.storeError(storeOpRequeue, err)
	}
	done(map[string]any{"result": "ok", "state": string(job.StatePending)})
	a.wake()
	return wire.SubmitResponse{JobID: formatID(id), Status: string(job.StatePending)}, nil
}

// DeadGroups returns the limit largest groups of dead jobs by name and
// error fingerprint (the console's Dead letters page, which caches them).
func (a *App) DeadGroups(ctx context.Context, limit int) (store.DeadGroups, error) {
	g, err := a.store.DeadGroups(ctx, limit)
	if err != nil {
		return g, a.storeError(storeOpDeadList, err)
	}
	return g, nil
}

// A DLQ cursor is "<finished_at in Unix microseconds>-<id>": the DLQ is
// ordered by failure time, which PostgreSQL keeps to the microsecond.
func formatDeadCursor(c store.DeadCursor) string {
	return strconv.FormatInt(c.FinishedAt.UnixMicro(), 10) + "-" + formatID(c.ID)
}

func parseDeadCursor(s string) (*store.DeadCursor, error) {
	at, id, ok := strings.Cut(s, "-")
	if !ok {
		return nil, errors.New("not a DLQ cursor")
	}
	micros, err := ParseID(at)
	if err != nil {
		return nil, err
	}
	n, err := ParseID(id)
	if err != nil {
		return nil, err
	}
	return &store.DeadCursor{FinishedAt: time.UnixMicro(micros), ID: n}, nil
}

// jobView is a job as the API shows it.
func jobView(j *job.Job) wire.Job {
	v := wire.Job{
		JobID:           formatID(j.ID),
		Name:            j.Name,
		Queue:           j.Queue,
		Priority:        j.Priority,
		Payload:         j.Payload,
		Status:          string(j.State),
		Attempts:        j.Attempts,
		MaxRetries:      j.MaxRetries,
		TimeoutSeconds:  j.TimeoutSeconds,
		LastError:       optString(j.LastError),
		Errors:          make([]wire.AttemptError, len(j.Errors)),
		Result:          j.Result,
		WorkerID:        optString(j.WorkerID),
		CreatedAt:       j.CreatedAt.UTC(),
		StartedAt:       optTime(j.StartedAt),
		FinishedAt:      optTime(j.FinishedAt),
		NextRunAt:       optTime(&j.NextRunAt),
		CancelRequested: j.CancelRequest,
		Progress:        j.Progress,
		ProgressMessage: optString(j.ProgressMessage),
		LimitKey:        j.LimitKey,
		TraceID:         otelx.TraceID(j.TraceParent),
	}
	if len(v.Payload) == 0 {
		v.Payload = []byte("null")
	}
	for i, e := range j.Errors {
		v.Errors[i] = wire.AttemptError{Attempt: e.Attempt, Error: e.Error, Reason: e.Reason, WorkerID: e.WorkerID, At: e.At.UTC(),
			LeaseToken: formatToken(e.LeaseToken), StartedAt: optTime(e.StartedAt), LeaseExtensions: e.Extensions,
			NextState: string(e.NextState), RetryAt: optTime(e.RetryAt)}
	}
	return v
}

// JobLogsQuery selects a job's log lines.
type JobLogsQuery struct {
	ID      int64
	Attempt int64 // 0: every attempt
	After   int64 // only lines with a greater seq (a follower's last)
	Limit   int64 // 0: wire.MaxJobLogPage
}

// JobLogs returns a job's log lines after q.After, oldest first, at most
// q.Limit (wire.MaxJobLogPage), with the dropped counts of its attempts;
// job.ErrNotFound if there is no such job. A follower asks again with
// NextAfter.
func (a *App) JobLogs(ctx context.Context, q JobLogsQuery) (wire.JobLogs, error) {
	limit := q.Limit
	if limit <= 0 || limit > wire.MaxJobLogPage {
		limit = wire.MaxJobLogPage
	}
	lines, drops, err := a.store.JobLogsGet(ctx, store.JobLogsQuery{ID: q.ID, Attempt: int(q.Attempt), After: q.After, Limit: int(limit)})
	if err != nil {
		return wire.JobLogs{}, a.storeError(storeOpGet, err)
	}
	out := wire.JobLogs{JobID: strconv.FormatInt(q.ID, 10), Lines: make([]wire.JobLogLine, len(lines)),
		Dropped: make([]wire.JobLogDropped, len(drops)), NextAfter: q.After, More: int64(len(lines)) == limit}
	for i, l := range lines {
		out.Lines[i] = wire.JobLogLine{Seq: l.Seq, Attempt: l.Attempt, Time: l.At.UTC(), Level: l.Level, Message: l.Message}
		out.NextAfter = l.Seq
	}
	for i, d := range drops {
		out.Dropped[i] = wire.JobLogDropped{Attempt: d.Attempt, Dropped: d.Dropped}
	}
	return out, nil
}

// JobTimeline returns a job with its attempts and timeline. Operator
// actions name their actor only to a principal with the admin scope, as
// GET /admin/audit does.
func (a *App) JobTimeline(ctx context.Context, id int64) (wire.JobTimeline, error) {
	j, evs, err := a.store.JobTimelineGet(ctx, id)
	if err != nil {
		return wire.JobTimeline{}, a.storeError(storeOpGet, err)
	}
	if !httpx.PrincipalFrom(ctx).Has(auth.ScopeAdmin) {
		for i := range evs {
			evs[i].Actor = ""
		}
	}
	return timelineView(j, job.BuildTimeline(j, evs)), nil
}

// timelineView is the API's form of a job and its timeline.
func timelineView(j *job.Job, t job.Timeline) wire.JobTimeline {
	v := wire.JobTimeline{Job: jobView(j), IdempotencyKey: optString(j.IdempotencyKey), DeadReason: optString(j.DeadReason),
		LeaseExpiresAt: optTime(j.LeaseExpiresAt), LeaseExtensions: j.LeaseExtensions,
		Attempts: make([]wire.Attempt, len(t.Attempts)), Timeline: make([]wire.TimelineEntry, len(t.Entries))}
	for i, a := range t.Attempts {
		w := wire.Attempt{Attempt: a.Attempt, WorkerID: a.WorkerID, LeaseToken: formatToken(a.LeaseToken), Running: a.Live,
			StartedAt: optTime(a.StartedAt), EndedAt: optTime(a.EndedAt), LeaseExtensions: a.Extensions,
			LeaseExpiresAt: optTime(a.ExpiresAt), Outcome: a.Outcome, Error: a.Error, NextState: string(a.NextState),
			RetryAt: optTime(a.RetryAt)}
		if d, ok := a.Duration(); ok {
			ms := d.Milliseconds()
			w.DurationMS = &ms
		}
		v.Attempts[i] = w
	}
	for i, e := range t.Entries {
		v.Timeline[i] = wire.TimelineEntry{At: e.At.UTC(), Kind: e.Kind, Attempt: e.Attempt, WorkerID: e.WorkerID,
			LeaseToken: formatToken(e.LeaseToken), Running: e.Live, Until: optTime(e.Until), LeaseExtensions: e.Extensions,
			Reason: e.Reason, Error: e.Error, Outcome: e.Outcome, OfAttempt: e.OfAttempt, Action: e.Action,
			Actor: e.Actor, Result: e.Result}
	}
	return v
}

// formatToken writes a fencing token in decimal, "" for none (0).
func formatToken(t int64) string {
	if t == 0 {
		return ""
	}
	return strconv.FormatInt(t, 10)
}
