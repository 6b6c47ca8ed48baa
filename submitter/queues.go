package submitter

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds the /queues routes. Reading needs the read scope; a
// pause, a resume or a cap needs admin and is audited. The submitter only
// writes the queues table: the leader coordinator reloads it every poll
// interval and its claims read it again in their own transaction
// (docs/architecture.md, "Queues"), so a change takes effect within one
// POLL_INTERVAL.

// Queues lists every queue with jobs waiting, running, dead or finished in
// the last minute, or with a setting, and its counts.
func (v service) Queues(ctx context.Context) (wire.QueueListResponse, error) {
	qs, err := v.s.store.QueueStatsList(ctx)
	if err != nil {
		return wire.QueueListResponse{}, v.s.storeError(storeOpQueues, err)
	}
	resp := wire.QueueListResponse{Queues: make([]wire.QueueInfo, len(qs))}
	for i, q := range qs {
		resp.Queues[i] = wire.QueueInfo{Name: q.Name, Paused: q.Paused, Concurrency: q.Concurrency, Depth: q.Depth,
			Pending: q.Pending, OldestPendingSeconds: q.OldestAge, Running: q.Running,
			CompletedPerMinute: q.Completed, FailedPerMinute: q.Failed, Dead: q.Dead}
	}
	return resp, nil
}

// QueueSetPaused pauses or resumes a queue (audited).
func (v service) QueueSetPaused(ctx context.Context, name string, paused bool) (wire.QueueInfo, error) {
	action := store.AuditQueueResume
	if paused {
		action = store.AuditQueuePause
	}
	return v.changeQueue(ctx, name, action, func() (store.QueueSetting, error) {
		return v.s.store.QueueSetPaused(ctx, name, paused)
	})
}

// QueueSetConcurrency caps a queue (0: no cap; audited).
func (v service) QueueSetConcurrency(ctx context.Context, name string, n int) (wire.QueueInfo, error) {
	return v.changeQueue(ctx, name, store.AuditQueueConcurrency, func() (store.QueueSetting, error) {
		return v.s.store.QueueSetConcurrency(ctx, name, n)
	})
}

func (v service) changeQueue(ctx context.Context, name, action string, change func() (store.QueueSetting, error)) (wire.QueueInfo, error) {
	if !wire.ValidQueueName(name) {
		return wire.QueueInfo{}, httpx.InvalidField("name", "a queue name is 1 to %d characters from A-Z a-z 0-9 _ . : -", wire.MaxQueueNameLen)
	}
	done, err := v.s.audit(ctx, action, store.AuditTargetQueue, name)
	if err != nil {
		return wire.QueueInfo{}, err
	}
	qs, err := change()
	if err != nil {
		done(failure(err))
		return wire.QueueInfo{}, v.s.storeError(storeOpQueueWrite, err)
	}
	done(map[string]any{"result": "ok", "paused": qs.Paused, "concurrency": qs.Concurrency})
	v.s.wake() // a resumed queue's jobs are due now
	return wire.QueueInfo{Name: qs.Name, Paused: qs.Paused, Concurrency: qs.Concurrency}, nil
}

// listQueues handles GET /queues.
func (s *Server) listQueues(w http.ResponseWriter, r *http.Request) error {
	resp, err := s.svc.Queues(r.Context())
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// pauseQueue handles POST /queues/{name}/pause (admin; audited).
func (s *Server) pauseQueue(w http.ResponseWriter, r *http.Request) error {
	q, err := s.svc.QueueSetPaused(r.Context(), chi.URLParam(r, "name"), true)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, q)
	return nil
}

// resumeQueue handles POST /queues/{name}/resume (admin; audited).
func (s *Server) resumeQueue(w http.ResponseWriter, r *http.Request) error {
	q, err := s.svc.QueueSetPaused(r.Context(), chi.URLParam(r, "name"), false)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, q)
	return nil
}

// updateQueue handles PUT and POST /queues/{name} {"concurrency": N}
// (admin; audited).
func (s *Server) updateQueue(w http.ResponseWriter, r *http.Request) error {
	name := chi.URLParam(r, "name")
	if !wire.ValidQueueName(name) {
		return httpx.InvalidField("name", "a queue name is 1 to %d characters from A-Z a-z 0-9 _ . : -", wire.MaxQueueNameLen)
	}
	body, err := httpx.ReadBody(r)
	if err != nil {
		return err
	}
	var req wire.QueueUpdateRequest
	if err := decodeObject(body, &req); err != nil {
		return err
	}
	if req.Concurrency == nil {
		return httpx.InvalidField("concurrency", "required: the most jobs of the queue leased at once, 0 for no cap")
	}
	if n := *req.Concurrency; n < 0 || n > wire.MaxQueueConcurrency {
		return httpx.InvalidField("concurrency", "must be between 0 (no cap) and %d", wire.MaxQueueConcurrency)
	}
	q, err := s.svc.QueueSetConcurrency(r.Context(), name, *req.Concurrency)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, q)
	return nil
}
