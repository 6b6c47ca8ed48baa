package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/dtsched/dts/internal/wire"
)

// This file holds the admin and operator calls: deleting jobs, bulk
// actions, workers, queues, API keys and the audit log. Each needs the
// admin scope, except the reads (Workers, Worker, Queues), which need read.

// More of the API's types (docs/api.md describes every field).
type (
	// Token is an API key's facts (never the key itself).
	Token = wire.Token
	// TokenCreated is a new API key: its facts and, this once, Key.
	TokenCreated = wire.TokenCreated
	// AuditEntry is one row of the audit log.
	AuditEntry = wire.AuditEntry
	// AuditPage is one page of Audit; NextCursor is nil on the last page.
	AuditPage = wire.AuditListResponse
	// BulkRequest selects the jobs of Bulk and says what to do to them.
	BulkRequest = wire.BulkRequest
	// BulkResult says how many jobs Bulk selected and changed.
	BulkResult = wire.BulkResponse
	// Worker is a worker as the leader coordinator last recorded it.
	Worker = wire.Worker
)

// Bulk actions.
const (
	BulkCancel  = wire.BulkCancel
	BulkRequeue = wire.BulkRequeue
	BulkDelete  = wire.BulkDelete
)

// Delete deletes a job that is completed, failed or canceled. A live job
// is ErrConflict, an unknown one ErrNotFound.
func (c *Client) Delete(ctx context.Context, id string) (Submitted, error) {
	var out Submitted
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/jobs/" + url.PathEscape(id)}, &out)
	return out, err
}

// Bulk runs an action (BulkCancel, BulkRequeue, BulkDelete) on every job
// that r's filters select among the states the action applies to; with
// r.DryRun it only counts them. It is not retried on 503s other than
// overloaded (part of the jobs may have been changed), except a dry run.
func (c *Client) Bulk(ctx context.Context, r BulkRequest) (*BulkResult, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	var out BulkResult
	if _, err := c.do(ctx, request{method: http.MethodPost, path: "/jobs/bulk", body: body, idempotent: r.DryRun}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Workers lists the workers, by id.
func (c *Client) Workers(ctx context.Context) ([]Worker, error) {
	var out wire.WorkerListResponse
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/workers", idempotent: true}, &out); err != nil {
		return nil, err
	}
	return out.Workers, nil
}

// Worker returns one worker; an unknown id is ErrNotFound.
func (c *Client) Worker(ctx context.Context, id string) (*Worker, error) {
	var out Worker
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/workers/" + url.PathEscape(id), idempotent: true}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateToken makes an API key with name and scopes (submit, read, admin)
// that expires after ttl (0: never; negative: the server's default, 720h).
// The answer's Key is shown this once.
func (c *Client) CreateToken(ctx context.Context, name string, scopes []string, ttl time.Duration) (*TokenCreated, error) {
	req := wire.TokenRequest{Name: name, Scopes: scopes}
	if ttl >= 0 {
		s := ttl.String()
		req.TTL = &s
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var out TokenCreated
	if _, err := c.do(ctx, request{method: http.MethodPost, path: "/admin/tokens", body: body}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Tokens lists every API key, newest first, revoked ones included.
func (c *Client) Tokens(ctx context.Context) ([]Token, error) {
	var out wire.TokenListResponse
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/admin/tokens", idempotent: true}, &out); err != nil {
		return nil, err
	}
	return out.Tokens, nil
}

// RevokeToken revokes API key id (revoking it again changes nothing).
func (c *Client) RevokeToken(ctx context.Context, id string) (*Token, error) {
	var out Token
	if _, err := c.do(ctx, request{method: http.MethodDelete, path: "/admin/tokens/" + url.PathEscape(id), idempotent: true}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AuditParams pages Audit. Zero fields are left out.
type AuditParams struct {
	// Limit is the page size, 1..1000 (server default 50).
	Limit int
	// Cursor is the previous page's NextCursor.
	Cursor string
}

// Audit returns one page of the audit log, newest first.
func (c *Client) Audit(ctx context.Context, p AuditParams) (*AuditPage, error) {
	q := url.Values{}
	set(q, "cursor", p.Cursor)
	if p.Limit != 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	var out AuditPage
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/admin/audit", query: q, idempotent: true}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
