package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/dtsched/dts/internal/wire"
)

// This file holds worker drain and background bulk operations. Drain,
// undrain and CancelOperation need the admin scope; Operation and
// Operations read.

// Operation is a background bulk action (Bulk with Background) and its
// progress.
type Operation = wire.Operation

// Operation states.
const (
	OperationRunning  = wire.OperationRunning
	OperationDone     = wire.OperationDone
	OperationCanceled = wire.OperationCanceled
	OperationFailed   = wire.OperationFailed
)

// DrainWorker asks that a worker get no new jobs: the leader coordinator
// stops leasing to it within a heartbeat interval, and its running jobs
// finish. An unknown worker is ErrNotFound.
func (c *Client) DrainWorker(ctx context.Context, id string) (*Worker, error) {
	var out Worker
	if _, err := c.do(ctx, request{method: http.MethodPost, path: "/workers/" + url.PathEscape(id) + "/drain", idempotent: true}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// UndrainWorker withdraws a DrainWorker request: the leader coordinator
// leases to the worker again from its next worker sync (within a heartbeat
// interval). A drain request otherwise stands, through the worker's
// crashes and restarts under the same id. Undraining a worker not asked to
// drain changes nothing; an unknown worker is ErrNotFound.
func (c *Client) UndrainWorker(ctx context.Context, id string) (*Worker, error) {
	var out Worker
	if _, err := c.do(ctx, request{method: http.MethodPost, path: "/workers/" + url.PathEscape(id) + "/undrain", idempotent: true}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Operation returns a background operation; an unknown id is ErrNotFound.
func (c *Client) Operation(ctx context.Context, id string) (*Operation, error) {
	var out Operation
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/operations/" + url.PathEscape(id), idempotent: true}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Operations returns the newest background operations.
func (c *Client) Operations(ctx context.Context) ([]Operation, error) {
	var out wire.OperationListResponse
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/operations", idempotent: true}, &out); err != nil {
		return nil, err
	}
	return out.Operations, nil
}

// CancelOperation cancels a running operation: no batch starts after it,
// and the batches done stay done. An operation already over is
// ErrConflict.
func (c *Client) CancelOperation(ctx context.Context, id string) (*Operation, error) {
	var out Operation
	if _, err := c.do(ctx, request{method: http.MethodPost, path: "/operations/" + url.PathEscape(id) + "/cancel"}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
