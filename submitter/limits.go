package submitter

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds the /limits routes. Reading needs the read scope; a
// change needs admin and is audited. The submitter only writes the limits
// table: the leader's limited claim reads it in each claim's own
// transaction (docs/architecture.md, "Limits"), so a change holds from
// the next claim. A limit on a job name applies to the jobs of that name
// submitted after it was set; a concurrency key's limit applies to every
// job of the key, already waiting or not.

func limitInfo(l store.Limit) wire.LimitInfo {
	return wire.LimitInfo{Key: l.Key, Concurrency: l.Concurrency, Rate: l.Rate, PeriodSeconds: int(l.Period.Seconds()),
		Running: l.Running, Waiting: l.Waiting, UpdatedAt: l.UpdatedAt.UTC()}
}

// Limits lists every configured limit by key, with its jobs running and
// waiting.
func (v service) Limits(ctx context.Context) (wire.LimitListResponse, error) {
	ls, err := v.s.store.LimitList(ctx)
	if err != nil {
		return wire.LimitListResponse{}, v.s.storeError(storeOpLimits, err)
	}
	resp := wire.LimitListResponse{Limits: make([]wire.LimitInfo, len(ls))}
	for i, l := range ls {
		resp.Limits[i] = limitInfo(l)
	}
	return resp, nil
}

// LimitSet creates or replaces the limit of a key (audited). The caller
// has checked it (checkLimit).
func (v service) LimitSet(ctx context.Context, l store.Limit) (wire.LimitInfo, error) {
	done, err := v.s.audit(ctx, store.AuditLimitSet, store.AuditTargetLimit, l.Key)
	if err != nil {
		return wire.LimitInfo{}, err
	}
	out, err := v.s.store.LimitSet(ctx, l)
	if err != nil {
		done(failure(err))
		return wire.LimitInfo{}, v.s.storeError(storeOpLimitWrite, err)
	}
	done(map[string]any{"result": "ok", "concurrency": out.Concurrency, "rate": out.Rate,
		"period_seconds": int(out.Period.Seconds())})
	v.s.wake() // a raised limit lets waiting jobs start now
	return limitInfo(out), nil
}

// LimitDelete removes the limit of a key (audited); 404 when it has none.
func (v service) LimitDelete(ctx context.Context, key string) error {
	if err := checkLimitKey(key); err != nil {
		return err
	}
	done, err := v.s.audit(ctx, store.AuditLimitDelete, store.AuditTargetLimit, key)
	if err != nil {
		return err
	}
	if err := v.s.store.LimitDelete(ctx, key); err != nil {
		if errors.Is(err, job.ErrNotFound) {
			err = httpx.Errorf(http.StatusNotFound, wire.CodeNotFound, "no limit for key %q", truncate(key, 40))
		}
		done(failure(err))
		return v.s.storeError(storeOpLimitWrite, err)
	}
	done(map[string]any{"result": "ok"})
	v.s.wake()
	return nil
}

// invalidLimit is the 400 of a bad limit.
func invalidLimit(field, format string, args ...any) error {
	return httpx.Errorf(http.StatusBadRequest, wire.CodeInvalidLimit, field+": "+format, args...)
}

// checkLimitKey checks a limit's key: 1 to 200 characters without control
// characters; "name:" must be followed by a valid job name.
func checkLimitKey(key string) error {
	if key == "" {
		return invalidLimit("key", "required")
	}
	if msg := checkText(key, wire.MaxLimitKeyLen); msg != "" {
		return invalidLimit("key", "%s", msg)
	}
	if name, ok := strings.CutPrefix(key, wire.NameLimitPrefix); ok {
		if name == "" {
			return invalidLimit("key", "%q must be followed by a job name", wire.NameLimitPrefix)
		}
		if msg := checkText(name, maxNameLen); msg != "" {
			return invalidLimit("key", "the job name %s", msg)
		}
	}
	return nil
}

// checkLimit checks the body of PUT /limits/{key}.
func checkLimit(key string, req wire.LimitUpdateRequest) (store.Limit, error) {
	if err := checkLimitKey(key); err != nil {
		return store.Limit{}, err
	}
	switch {
	case req.Concurrency < 0 || req.Concurrency > wire.MaxLimitConcurrency:
		return store.Limit{}, invalidLimit("concurrency", "must be between 0 (no cap) and %d", wire.MaxLimitConcurrency)
	case req.Rate < 0 || req.Rate > wire.MaxLimitRate:
		return store.Limit{}, invalidLimit("rate", "must be between 0 (no rate limit) and %d", wire.MaxLimitRate)
	case req.PeriodSeconds < 0 || req.PeriodSeconds > wire.MaxLimitPeriodSeconds:
		return store.Limit{}, invalidLimit("period_seconds", "must be between 1 and %d", wire.MaxLimitPeriodSeconds)
	case (req.Rate > 0) != (req.PeriodSeconds > 0):
		return store.Limit{}, invalidLimit("period_seconds", "rate and period_seconds go together: both above 0, or both 0")
	case req.Concurrency == 0 && req.Rate == 0:
		return store.Limit{}, invalidLimit("concurrency", "set concurrency or rate above 0; DELETE /limits/{key} removes a limit")
	}
	return store.Limit{Key: key, Concurrency: req.Concurrency, Rate: req.Rate,
		Period: time.Duration(req.PeriodSeconds) * time.Second}, nil
}

// pathKey returns the {key} route parameter, unescaped (chi matches the
// escaped path when the request had escapes Go does not make itself, such
// as %2F).
func pathKey(r *http.Request) (string, error) {
	raw := chi.URLParam(r, "key")
	if r.URL.RawPath == "" {
		return raw, nil
	}
	key, err := url.PathUnescape(raw)
	if err != nil {
		return "", invalidLimit("key", "is not a valid escaped path segment")
	}
	return key, nil
}

// listLimits handles GET /limits.
func (s *Server) listLimits(w http.ResponseWriter, r *http.Request) error {
	resp, err := s.svc.Limits(r.Context())
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// putLimit handles PUT /limits/{key} {"concurrency": N, "rate": N,
// "period_seconds": S} (admin; audited).
func (s *Server) putLimit(w http.ResponseWriter, r *http.Request) error {
	key, err := pathKey(r)
	if err != nil {
		return err
	}
	body, err := httpx.ReadBody(r)
	if err != nil {
		return err
	}
	var req wire.LimitUpdateRequest
	if err := decodeObject(body, &req); err != nil {
		return err
	}
	l, err := checkLimit(key, req)
	if err != nil {
		return err
	}
	info, err := s.svc.LimitSet(r.Context(), l)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, info)
	return nil
}

// deleteLimit handles DELETE /limits/{key} (admin; audited).
func (s *Server) deleteLimit(w http.ResponseWriter, r *http.Request) error {
	key, err := pathKey(r)
	if err != nil {
		return err
	}
	if err := s.svc.LimitDelete(r.Context(), key); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
