// Package worker runs job handlers for the dts scheduler. It is both the
// library users import to write their own workers and the engine of the
// bundled worker binary (cmd/worker).
//
//	w, err := worker.New(ctx, worker.Config{ID: "w1", RedisURL: "redis://127.0.0.1:6379/0", Concurrency: 8}, logger)
//	w.Handle("send_email", func(ctx context.Context, job *worker.Job) (any, error) { ... })
//	err = w.Run(ctx, nil) // until ctx is canceled, then drains; a listener serves /healthz and /metrics
//
// A worker announces itself and its handled job types on the heartbeat stream,
// receives leased jobs on its own Redis list, and reports each attempt's
// outcome on the results stream together with the lease's fencing token. The
// coordinator decides what the outcome means; the worker never writes to
// PostgreSQL.
package worker
