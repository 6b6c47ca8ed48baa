package app

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// This file holds the limits. The submitter only writes the limits
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
func (a *App) Limits(ctx context.Context) (wire.LimitListResponse, error) {
	ls, err := a.store.LimitList(ctx)
	if err != nil {
		return wire.LimitListResponse{}, a.storeError(storeOpLimits, err)
	}
	resp := wire.LimitListResponse{Limits: make([]wire.LimitInfo, len(ls))}
	for i, l := range ls {
		resp.Limits[i] = limitInfo(l)
	}
	return resp, nil
}

// LimitSet creates or replaces the limit of key with req (the body of PUT
// /limits/{key}; audited).
func (a *App) LimitSet(ctx context.Context, key string, req wire.LimitUpdateRequest) (wire.LimitInfo, error) {
	l, err := checkLimit(key, req)
	if err != nil {
		return wire.LimitInfo{}, err
	}
	done, err := a.audit(ctx, store.AuditLimitSet, store.AuditTargetLimit, l.Key)
	if err != nil {
		return wire.LimitInfo{}, err
	}
	out, err := a.store.LimitSet(ctx, l)
	if err != nil {
		done(failure(err))
		return wire.LimitInfo{}, a.storeError(storeOpLimitWrite, err)
	}
	done(map[string]any{"result": "ok", "concurrency": out.Concurrency, "rate": out.Rate,
		"period_seconds": int(out.Period.Seconds())})
	a.wake() // a raised limit lets waiting jobs start now
	return limitInfo(out), nil
}

// LimitDelete removes the limit of a key (audited); 404 when it has none.
func (a *App) LimitDelete(ctx context.Context, key string) error {
	if err := checkLimitKey(key); err != nil {
		return err
	}
	done, err := a.audit(ctx, store.AuditLimitDelete, store.AuditTargetLimit, key)
	if err != nil {
		return err
	}
	if err := a.store.LimitDelete(ctx, key); err != nil {
		if errors.Is(err, job.ErrNotFound) {
			err = httpx.Errorf(http.StatusNotFound, wire.CodeNotFound, "no limit for key %q", Truncate(key, 40))
		}
		done(failure(err))
		return a.storeError(storeOpLimitWrite, err)
	}
	done(map[string]any{"result": "ok"})
	a.wake()
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
	if msg := CheckText(key, wire.MaxLimitKeyLen); msg != "" {
		return invalidLimit("key", "%s", msg)
	}
	if name, ok := strings.CutPrefix(key, wire.NameLimitPrefix); ok {
		if name == "" {
			return invalidLimit("key", "%q must be followed by a job name", wire.NameLimitPrefix)
		}
		if msg := CheckText(name, maxNameLen); msg != "" {
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
