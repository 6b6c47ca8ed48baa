package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
)

// The checks of the conformance suite. Each returns an error that names
// the protocol rule the worker broke (or what the suite could not do).

// The checks on the shared cluster, run in parallel.
var confSharedChecks = []confCheck{
	{"joins_by_heartbeat", checkJoin},
	{"results_carry_their_token", checkResults},
	{"retries", checkRetries},
	{"permanent_failure", checkPermanent},
	{"progress", checkProgress},
	{"logs", checkLogs},
	{"cancel_running", checkCancelRunning},
	{"time_limit", checkTimeLimit},
	{"credentials", checkCredentials},
}

// The checks on the isolated cluster, in order: each starts from the
// state the one before left.
var confIsolatedChecks = []confCheck{
	{"sigterm_drain_hands_back", checkDrain},
	{"cancel_before_delivery", checkCancelBeforeDelivery},
	{"released_jobs_complete_elsewhere", checkReleasedComplete},
	{"duplicate_and_stale_delivery", checkDuplicates},
	{"redis_restart", checkRedisRestart},
}

// confJob is what the checks read of GET /jobs/{id}.
type confJob struct {
	ID              string          `json:"job_id"`
	Status          string          `json:"status"`
	Attempts        int             `json:"attempts"`
	Result          json.RawMessage `json:"result"`
	LastError       string          `json:"last_error"`
	WorkerID        string          `json:"worker_id"`
	Progress        *int            `json:"progress"`
	ProgressMessage *string         `json:"progress_message"`
	Errors          []struct {
		Attempt int    `json:"attempt"`
		Error   string `json:"error"`
		Reason  string `json:"reason"`
	} `json:"errors"`
}

// confTimeline is what the checks read of GET /jobs/{id}/timeline.
type confTimeline struct {
	Attempts []struct {
		Attempt    int    `json:"attempt"`
		WorkerID   string `json:"worker_id"`
		LeaseToken string `json:"lease_token"`
		Outcome    string `json:"outcome"`
	} `json:"attempts"`
	Timeline []struct {
		Kind       string `json:"kind"`
		Attempt    int    `json:"attempt"`
		WorkerID   string `json:"worker_id"`
		LeaseToken string `json:"lease_token"`
		Outcome    string `json:"outcome"`
	} `json:"timeline"`
}

func (e *confEnv) submit(ctx context.Context, job map[string]any) (string, error) {
	var out struct {
		ID string `json:"job_id"`
	}
	if err := sendJSON(ctx, http.MethodPost, e.c.submitter+"/submit_job", job, &out); err != nil {
		return "", err
	}
	return out.ID, nil
}

func (e *confEnv) job(ctx context.Context, id string) (confJob, error) {
	var j confJob
	err := getJSON(ctx, e.c.submitter+"/jobs/"+id, &j)
	return j, err
}

func (e *confEnv) timeline(ctx context.Context, id string) (confTimeline, error) {
	var tl confTimeline
	err := getJSON(ctx, e.c.submitter+"/jobs/"+id+"/timeline", &tl)
	return tl, err
}

func (e *confEnv) cancel(ctx context.Context, id string) error {
	return sendJSON(ctx, http.MethodPost, e.c.submitter+"/jobs/"+id+"/cancel", nil, nil)
}

// waitFinal waits up to within for job id to reach a final state and
// returns it.
func (e *confEnv) waitFinal(t *testing.T, id string, within time.Duration) (confJob, error) {
	var j confJob
	err := testwait.Until(t, within, func() error {
		var err error
		if j, err = e.job(t.Context(), id); err != nil {
			return err
		}
		if final(j.Status) {
			return nil
		}
		return fmt.Errorf("job %s is %s", id, j.Status)
	})
	if err != nil {
		return j, fmt.Errorf("job %s did not end within %v: %w", id, within, err)
	}
	return j, nil
}

func final(status string) bool {
	return status == "completed" || status == "failed" || status == "canceled"
}

// waitRunning waits until the worker's heartbeat names job id's lease
// (started, when the worker says so), and returns the lease token.
func (e *confEnv) waitRunning(t *testing.T, worker, id string, within time.Duration) (int64, error) {
	jobID, _ := strconv.ParseInt(id, 10, 64)
	var token int64
	err := testwait.Until(t, within, func() error {
		if j, err := e.job(t.Context(), id); err != nil {
			return err
		} else if j.Status != "leased" {
			err := fmt.Errorf("job %s is %s, not leased (running)", id, j.Status)
			if final(j.Status) {
				return testwait.GiveUp(err)
			}
			return err
		}
		hb, err := e.lastHeartbeat(t.Context(), worker)
		if err != nil {
			return err
		}
		for _, f := range hb.InFlight {
			if f.JobID == jobID && !f.Waiting {
				token = f.LeaseToken
				return nil
			}
		}
		return fmt.Errorf("the last heartbeat of %s does not name job %s as running: %+v", worker, id, hb.InFlight)
	})
	return token, err
}

// staleResults returns the timeline's stale_result events of job id:
// outcomes the coordinator rejected because their lease was gone.
func (e *confEnv) staleResults(ctx context.Context, id string) ([]string, error) {
	tl, err := e.timeline(ctx, id)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ev := range tl.Timeline {
		if ev.Kind == "stale_result" {
			out = append(out, fmt.Sprintf("%s of attempt %d (token %s)", ev.Outcome, ev.Attempt, ev.LeaseToken))
		}
	}
	return out, nil
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func short(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + fmt.Sprintf("… (%d bytes)", len(b))
	}
	return string(b)
}

// checkResults: echo, text (non-ASCII) and large jobs complete once, on
// the worker, with exactly the expected result, applied under the
// attempt's own lease token.
func checkResults(t *testing.T, e *confEnv) error {
	text := "héllo 👋🏽 世界 e\u0301 ñ \u0915\u094d\u0937 🇫🇷"
	size := 1<<20 - 64 // a result just under the coordinator's 1 MiB bound
	cases := []struct {
		name    string
		payload any
		want    any
	}{
		{"conf.echo", map[string]any{"a": []any{1.5, "two", nil, true}, "nested": map[string]any{"k": "v"}}, nil},
		{"conf.echo", "a plain string", nil},
		{"conf.text", map[string]any{"text": text}, map[string]any{"text": text, "runes": len([]rune(text))}},
		{"conf.large", map[string]any{"size": size}, map[string]any{"data": strings.Repeat("x", size)}},
	}
	ids := make([]string, len(cases))
	for i, c := range cases {
		id, err := e.submit(t.Context(), map[string]any{"name": c.name, "payload": c.payload, "max_retries": 0})
		if err != nil {
			return err
		}
		ids[i] = id
	}
	var errs []error
	for i, c := range cases {
		want := c.want
		if want == nil {
			want = c.payload
		}
		wantJSON, _ := json.Marshal(want)
		j, err := e.waitFinal(t, ids[i], 20*time.Second)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if j.Status != "completed" || !sameJSON(j.Result, wantJSON) {
			errs = append(errs, fmt.Errorf("result: %s job %s ended %s with result %s (error %q), want completed with %s",
				c.name, ids[i], j.Status, short(j.Result), j.LastError, short(wantJSON)))
			continue
		}
		if j.Attempts != 1 || j.WorkerID != e.worker {
			errs = append(errs, fmt.Errorf("run once: %s job %s took %d attempts on %q, want 1 on %s", c.name, ids[i], j.Attempts, j.WorkerID, e.worker))
		}
		tl, err := e.timeline(t.Context(), ids[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, ev := range tl.Timeline {
			if ev.Kind == "completed" && (len(tl.Attempts) == 0 || ev.LeaseToken != tl.Attempts[len(tl.Attempts)-1].LeaseToken) {
				errs = append(errs, fmt.Errorf("result token: %s job %s completed under token %s, not its attempt's", c.name, ids[i], ev.LeaseToken))
			}
			if ev.Kind == "stale_result" {
				errs = append(errs, fmt.Errorf("one outcome per token: %s job %s got a second (stale) result: %s of attempt %d",
					c.name, ids[i], ev.Outcome, ev.Attempt))
			}
		}
	}
	return errors.Join(errs...)
}

// checkRetries: a retryable failure is retried until the attempt that
// succeeds, and a job out of retries fails with the handler's error.
func checkRetries(t *testing.T, e *confEnv) error {
	ok, err := e.submit(t.Context(), map[string]any{"name": "conf.fail", "payload": map[string]any{"succeed_on": 3}, "max_retries": 3})
	if err != nil {
		return err
	}
	dead, err := e.submit(t.Context(), map[string]any{"name": "conf.fail", "payload": map[string]any{}, "max_retries": 1})
	if err != nil {
		return err
	}
	var errs []error
	j, err := e.waitFinal(t, ok, 20*time.Second)
	if err != nil {
		return err
	}
	if j.Status != "completed" || !sameJSON(j.Result, []byte(`{"attempt":3}`)) || j.Attempts != 3 {
		errs = append(errs, fmt.Errorf("retry: conf.fail with succeed_on 3 ended %s after %d attempts with %s (error %q), want completed on attempt 3 with {\"attempt\":3}",
			j.Status, j.Attempts, short(j.Result), j.LastError))
	}
	for i, f := range j.Errors {
		if want := fmt.Sprintf("failed on attempt %d", i+1); f.Error != want || f.Reason != "error" {
			errs = append(errs, fmt.Errorf("retry: attempt %d failed with %q (reason %s), want %q (reason error)", i+1, f.Error, f.Reason, want))
		}
	}
	j, err = e.waitFinal(t, dead, 20*time.Second)
	if err != nil {
		return err
	}
	if j.Status != "failed" || j.Attempts != 2 || j.LastError != "failed on attempt 2" {
		errs = append(errs, fmt.Errorf("retries run out: conf.fail with max_retries 1 ended %s after %d attempts with error %q, want failed after 2 with \"failed on attempt 2\"",
			j.Status, j.Attempts, j.LastError))
	}
	return errors.Join(errs...)
}

// checkPermanent: a permanent failure ends the job after one attempt,
// retries left or not.
func checkPermanent(t *testing.T, e *confEnv) error {
	id, err := e.submit(t.Context(), map[string]any{"name": "conf.permanent", "max_retries": 3})
	if err != nil {
		return err
	}
	j, err := e.waitFinal(t, id, 20*time.Second)
	if err != nil {
		return err
	}
	if j.Status != "failed" || j.Attempts != 1 || j.LastError != "permanent failure" || len(j.Errors) != 1 || j.Errors[0].Reason != "permanent" {
		return fmt.Errorf("permanent failure: conf.permanent ended %s after %d attempts with %+v, want failed after 1 attempt, reason permanent, error \"permanent failure\"",
			j.Status, j.Attempts, j.Errors)
	}
	return nil
}

// checkProgress: a progress report shows on the job while it runs.
func checkProgress(t *testing.T, e *confEnv) error {
	id, err := e.submit(t.Context(), map[string]any{"name": "conf.progress", "payload": map[string]any{"ms": 3000}, "max_retries": 0})
	if err != nil {
		return err
	}
	var j confJob
	err = testwait.Until(t, 10*time.Second, func() error {
		var err error
		if j, err = e.job(t.Context(), id); err != nil {
			return err
		}
		if j.Status != "leased" && j.Status != "pending" {
			return nil // ended before the report: judged below
		}
		if j.Progress == nil || j.ProgressMessage == nil {
			return fmt.Errorf("job %s is %s with no progress yet", id, j.Status)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("progress: no report within 10s: %w", err)
	}
	if j.Status != "leased" || j.Progress == nil || *j.Progress != 50 || j.ProgressMessage == nil || *j.ProgressMessage != "halfway" {
		return fmt.Errorf("progress: while conf.progress runs GET /jobs/%s shows status %s, progress %v, message %v; want leased, 50, \"halfway\"",
			id, j.Status, deref(j.Progress), deref(j.ProgressMessage))
	}
	if j, err = e.waitFinal(t, id, 15*time.Second); err != nil {
		return err
	}
	if j.Status != "completed" || !sameJSON(j.Result, []byte(`{"done":true}`)) {
		return fmt.Errorf("progress: conf.progress ended %s with %s (error %q), want completed with {\"done\":true}", j.Status, short(j.Result), j.LastError)
	}
	return nil
}

// checkLogs: the lines a handler logs with its SDK's job logger arrive in
// GET /jobs/{id}/logs, in order, at level INFO under attempt 1, each with
// its attribute as key=value.
func checkLogs(t *testing.T, e *confEnv) error {
	lines := []string{"first line", "zweite Zeile ✓"}
	id, err := e.submit(t.Context(), map[string]any{"name": "conf.log", "payload": map[string]any{"lines": lines}, "max_retries": 0})
	if err != nil {
		return err
	}
	j, err := e.waitFinal(t, id, 10*time.Second)
	if err != nil {
		return err
	}
	if j.Status != "completed" {
		return fmt.Errorf("logs: conf.log ended %s (error %q), want completed", j.Status, j.LastError)
	}
	var got wire.JobLogs
	if err := getJSON(t.Context(), e.c.submitter+"/jobs/"+id+"/logs", &got); err != nil {
		return err
	}
	var want, have []string
	for i, l := range lines {
		want = append(want, fmt.Sprintf("1 INFO %s n=%d", l, i+1))
	}
	for _, l := range got.Lines {
		have = append(have, fmt.Sprintf("%d %s %s", l.Attempt, l.Level, l.Message))
	}
	if !slices.Equal(have, want) {
		return fmt.Errorf("logs: GET /jobs/%s/logs has %q, want %q: the job logger's lines travel in the result's logs field", id, have, want)
	}
	return nil
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// checkCancelRunning: a running job canceled through the API ends
// canceled at once, its handler stopped.
func checkCancelRunning(t *testing.T, e *confEnv) error {
	id, err := e.submit(t.Context(), map[string]any{"name": "conf.sleep", "payload": map[string]any{"ms": 60_000}, "max_retries": 3})
	if err != nil {
		return err
	}
	if _, err := e.waitRunning(t, e.worker, id, 10*time.Second); err != nil {
		return fmt.Errorf("cancel of a running job: conf.sleep of 60s is not running: %w", err)
	}
	if err := e.cancel(t.Context(), id); err != nil {
		// A worker that ends a 60 s sleep at once has it final before
		// the cancel: that worker breaks this rule too.
		return fmt.Errorf("cancel of a running job: conf.sleep of 60s could not be canceled: %w", err)
	}
	start := time.Now()
	j, err := e.waitFinal(t, id, 5*time.Second)
	if err != nil {
		return fmt.Errorf("cancel of a running job: the worker did not stop conf.sleep and report it: %w", err)
	}
	if j.Status != "canceled" || j.Attempts != 1 {
		return fmt.Errorf("cancel of a running job: conf.sleep ended %s after %d attempts (error %q), want canceled after 1", j.Status, j.Attempts, j.LastError)
	}
	t.Logf("canceled %v after the request", time.Since(start).Round(time.Millisecond))
	return nil
}

// checkTimeLimit: timeout_seconds ends an attempt that honours its
// cancellation (conf.sleep) and one that ignores it (conf.stubborn) with
// reason timeout.
func checkTimeLimit(t *testing.T, e *confEnv) error {
	var errs []error
	ids := map[string]string{}
	for _, name := range []string{"conf.sleep", "conf.stubborn"} {
		ms := 60_000
		if name == "conf.stubborn" {
			ms = 2500
		}
		id, err := e.submit(t.Context(), map[string]any{"name": name, "payload": map[string]any{"ms": ms}, "max_retries": 0, "timeout_seconds": 1})
		if err != nil {
			return err
		}
		ids[name] = id
	}
	for name, id := range ids {
		j, err := e.waitFinal(t, id, 15*time.Second)
		if err != nil {
			errs = append(errs, fmt.Errorf("time limit: %s with timeout_seconds 1: %w", name, err))
			continue
		}
		if j.Status != "failed" || len(j.Errors) != 1 || j.Errors[0].Reason != "timeout" {
			errs = append(errs, fmt.Errorf("time limit: %s with timeout_seconds 1 ended %s with errors %+v, want failed with reason timeout",
				name, j.Status, j.Errors))
		}
	}
	return errors.Join(errs...)
}

// checkCredentials: with credentials required, the worker with its own
// credential gets jobs (every other check), and one that sends another
// worker's credential is refused: never registered, never sent a job.
func checkCredentials(t *testing.T, e *confEnv) error {
	const rival = "conf-rival"
	before := e.c.metric(e.coordinator.url, "dts_worker_auth_failures_total", `reason="invalid"`)
	p := e.startWorker(t, rival, "WORKER_CREDENTIAL="+e.credentials[e.worker]) // not its own
	defer func() { _ = p.cmd.Process.Kill(); <-p.done }()
	err := testwait.Until(t, 10*time.Second, func() error {
		if n := e.c.metric(e.coordinator.url, "dts_worker_auth_failures_total", `reason="invalid"`); n < before+3 {
			return fmt.Errorf("dts_worker_auth_failures_total{reason=\"invalid\"} went from %v to %v", before, n)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("credentials: the worker's credential (WORKER_CREDENTIAL) is not in its heartbeats: three refusals expected: %w", err)
	}
	ws, err := e.workers(t.Context())
	if err != nil {
		return err
	}
	if _, ok := ws[rival]; ok {
		return fmt.Errorf("credentials: %s joined with another worker's credential: %+v", rival, ws[rival])
	}
	if n, err := e.rdb.LLen(t.Context(), e.keys.WorkerJobs(rival)).Result(); err != nil || n != 0 {
		return fmt.Errorf("credentials: the refused worker's delivery list holds %d (%v)", n, err)
	}
	return nil
}

// forge heartbeats as worker id until stop is called: the coordinator
// then leases jobs to id's list before the SDK's worker of that id runs,
// which is how the suite puts deliveries (and a cancel) in a worker's
// lists before it reads them. It stops by itself once the real worker's
// first heartbeat is on the stream.
func (e *confEnv) forge(t *testing.T, id string, concurrency int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(confHeartbeat)
		defer tick.Stop()
		for {
			hb := wire.Heartbeat{WorkerID: id, JobTypes: confJobTypes, Concurrency: concurrency, InFlight: []wire.InFlight{},
				SentAt: time.Now(), Host: "conformance-suite", Version: "forged"}
			b, _ := json.Marshal(hb)
			_ = e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: e.keys.Heartbeats(), Values: []any{"h", string(b)}}).Err()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			hbs, _ := e.heartbeats(ctx, id)
			for _, h := range hbs {
				if h.Version != "forged" {
					return
				}
			}
		}
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

// realHeartbeat waits for a heartbeat of id that the suite did not forge.
func (e *confEnv) realHeartbeat(t *testing.T, id string, within time.Duration) error {
	err := testwait.Until(t, within, func() error {
		hbs, err := e.heartbeats(t.Context(), id)
		if err != nil {
			return err
		}
		for _, h := range hbs {
			if h.Version != "forged" {
				return nil
			}
		}
		return fmt.Errorf("no heartbeat of %s yet", id)
	})
	if err != nil {
		return fmt.Errorf("joining by heartbeat: %s sent none within %v: %w", id, within, err)
	}
	return nil
}

// waitListLen waits until key holds n entries.
func (e *confEnv) waitListLen(t *testing.T, key string, n int64, within time.Duration) error {
	return testwait.Until(t, within, func() error {
		got, err := e.rdb.LLen(t.Context(), key).Result()
		if err != nil {
			return err
		}
		if got != n {
			return fmt.Errorf("%s holds %d entries, want %d", key, got, n)
		}
		return nil
	})
}

// The isolated cluster's worker ids.
const (
	confDrainWorker = "conf-drain"
	confIsoWorker   = "conf-iso"
)

// checkDrain: a worker told to stop (SIGTERM) says it drains, hands back
// the job still running when SHUTDOWN_GRACE ends and the deliveries it
// has not started (released: their attempt does not count), says it
// stopped, and exits 0.
func checkDrain(t *testing.T, e *confEnv) error {
	stop := e.forge(t, confDrainWorker, 3)
	var ids []string
	for range 3 {
		// Long enough to outlast the wait for it to run and the grace.
		id, err := e.submit(t.Context(), map[string]any{"name": "conf.sleep", "payload": map[string]any{"ms": 4000}, "max_retries": 3})
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	if err := e.waitListLen(t, e.keys.WorkerJobs(confDrainWorker), 3, 10*time.Second); err != nil {
		return fmt.Errorf("setup: the coordinator did not deliver 3 jobs to %s: %w", confDrainWorker, err)
	}
	p := e.startWorker(t, confDrainWorker, "WORKER_CONCURRENCY=1", "SHUTDOWN_GRACE="+confGrace.String())
	if err := e.realHeartbeat(t, confDrainWorker, 20*time.Second); err != nil {
		return err
	}
	stop()
	var running string
	err := testwait.Until(t, 10*time.Second, func() error {
		for _, id := range ids {
			if _, err := e.waitRunning(t, confDrainWorker, id, 0); err == nil {
				running = id
				return nil
			}
		}
		return fmt.Errorf("none of %v runs on %s", ids, confDrainWorker)
	})
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	e.drained = ids
	p.signal(t, syscall.SIGTERM)
	sent := time.Now()
	select {
	case <-p.done:
	case <-time.After(confGrace + 10*time.Second):
		return fmt.Errorf("drain: the worker did not exit within SHUTDOWN_GRACE (%v) + 10s of SIGTERM", confGrace)
	}
	var errs []error
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		errs = append(errs, fmt.Errorf("drain: the worker exited %d after SIGTERM, want 0", code))
	}
	t.Logf("exited %v after SIGTERM", time.Since(sent).Round(time.Millisecond))
	hbs, err := e.heartbeats(t.Context(), confDrainWorker)
	if err != nil {
		return err
	}
	var draining, stopped bool
	for _, h := range hbs {
		draining = draining || h.Draining
		stopped = h.Stopped
	}
	if !draining {
		errs = append(errs, errors.New("drain: no heartbeat with draining=true after SIGTERM"))
	}
	if !stopped {
		errs = append(errs, errors.New("drain: the last heartbeat before exiting does not say stopped=true"))
	}
	for _, id := range ids {
		var j confJob
		err := testwait.Until(t, 10*time.Second, func() error {
			var err error
			if j, err = e.job(t.Context(), id); err != nil {
				return err
			}
			if j.Status != "pending" {
				return fmt.Errorf("job %s is %s", id, j.Status)
			}
			return nil
		})
		what := "a delivery not started"
		if id == running {
			what = "the job running past SHUTDOWN_GRACE"
		}
		if err != nil || j.Attempts != 0 {
			errs = append(errs, fmt.Errorf("hand-back: %s (job %s) is %s with %d attempts after the drain, want pending (released) with 0: %v",
				what, id, j.Status, j.Attempts, err))
		}
	}
	return errors.Join(errs...)
}

// checkCancelBeforeDelivery: a cancel that reaches the worker before the
// delivery it names (the suite fills the worker's lists before starting
// it) cancels the job: it never runs.
func checkCancelBeforeDelivery(t *testing.T, e *confEnv) error {
	// Submitted before the worker exists, and ahead of the jobs handed
	// back by the drain, so that it is the one delivery.
	id, err := e.submit(t.Context(), map[string]any{"name": "conf.sleep", "payload": map[string]any{"ms": 60_000}, "max_retries": 3, "priority": 100})
	if err != nil {
		return err
	}
	stop := e.forge(t, confIsoWorker, 1)
	if err := e.waitListLen(t, e.keys.WorkerJobs(confIsoWorker), 1, 10*time.Second); err != nil {
		return fmt.Errorf("setup: the coordinator did not deliver job %s to %s: %w", id, confIsoWorker, err)
	}
	if j, err := e.job(t.Context(), id); err != nil || j.Status != "leased" || j.WorkerID != confIsoWorker {
		return fmt.Errorf("setup: job %s is not the delivery (%+v, %v)", id, j, err)
	}
	if err := e.cancel(t.Context(), id); err != nil {
		return err
	}
	if err := e.waitListLen(t, e.keys.WorkerControl(confIsoWorker), 1, 10*time.Second); err != nil {
		return fmt.Errorf("setup: no cancel on %s's control list: %w", confIsoWorker, err)
	}
	e.iso = e.startWorker(t, confIsoWorker, "WORKER_CONCURRENCY=4")
	if err := e.realHeartbeat(t, confIsoWorker, 20*time.Second); err != nil {
		return err
	}
	stop()
	j, err := e.waitFinal(t, id, 5*time.Second)
	if err != nil {
		return fmt.Errorf("cancel before delivery: conf.sleep of 60s whose cancel came first was run or never reported: %w", err)
	}
	if j.Status != "canceled" {
		return fmt.Errorf("cancel before delivery: the job ended %s (error %q), want canceled", j.Status, j.LastError)
	}
	return nil
}

// checkReleasedComplete: the jobs the drained worker handed back complete
// on another worker, with their handed-back attempt not counted.
func checkReleasedComplete(t *testing.T, e *confEnv) error {
	if len(e.drained) == 0 {
		return errors.New("the drain check handed back no jobs")
	}
	var errs []error
	for _, id := range e.drained {
		j, err := e.waitFinal(t, id, 20*time.Second)
		if err != nil {
			errs = append(errs, fmt.Errorf("hand-back: %w", err))
			continue
		}
		if j.Status != "completed" || j.WorkerID != confIsoWorker || j.Attempts != 1 {
			errs = append(errs, fmt.Errorf("hand-back: released job %s ended %s on %q after %d attempts, want completed on %s after 1 (the handed-back attempt does not count)",
				id, j.Status, j.WorkerID, j.Attempts, confIsoWorker))
		}
	}
	return errors.Join(errs...)
}

// checkDuplicates: copies of deliveries pushed straight into the worker's
// list (one with the token of a running attempt, one with the token of a
// completed one, one with an older token of that job) are not run again:
// the coordinator records no second outcome for any of them (the job
// timeline's stale_result events, which it writes for every result whose
// lease is gone).
func checkDuplicates(t *testing.T, e *confEnv) error {
	if e.iso == nil {
		return errors.New("no worker: the cancel-before-delivery check did not start one")
	}
	retried, err := e.submit(t.Context(), map[string]any{"name": "conf.fail", "payload": map[string]any{"succeed_on": 2}, "max_retries": 2})
	if err != nil {
		return err
	}
	slow, err := e.submit(t.Context(), map[string]any{"name": "conf.sleep", "payload": map[string]any{"ms": 1000}, "max_retries": 0})
	if err != nil {
		return err
	}
	token, err := e.waitRunning(t, confIsoWorker, slow, 10*time.Second)
	if err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	slowID, _ := strconv.ParseInt(slow, 10, 64)
	if err := e.pushDelivery(t.Context(), wire.Delivery{JobID: slowID, Name: "conf.sleep", Payload: json.RawMessage(`{"ms":1000}`),
		Attempt: 1, LeaseToken: token, CreatedAt: time.Now()}); err != nil {
		return err
	}
	if j, err := e.waitFinal(t, retried, 20*time.Second); err != nil || j.Status != "completed" || j.Attempts != 2 {
		return fmt.Errorf("setup: conf.fail with succeed_on 2 did not complete on attempt 2: %+v %v", j, err)
	}
	tl, err := e.timeline(t.Context(), retried)
	if err != nil {
		return err
	}
	if len(tl.Attempts) != 2 {
		return fmt.Errorf("setup: the timeline of job %s has %d attempts, want 2", retried, len(tl.Attempts))
	}
	retriedID, _ := strconv.ParseInt(retried, 10, 64)
	for i := len(tl.Attempts) - 1; i >= 0; i-- { // the last token, then the older one
		tok, _ := strconv.ParseInt(tl.Attempts[i].LeaseToken, 10, 64)
		if err := e.pushDelivery(t.Context(), wire.Delivery{JobID: retriedID, Name: "conf.fail", Payload: json.RawMessage(`{"succeed_on":2}`),
			Attempt: i + 1, MaxRetries: 2, LeaseToken: tok, CreatedAt: time.Now()}); err != nil {
			return err
		}
	}
	// The list is FIFO: once a job submitted now has run as long as the
	// slow copy would, the worker has read every copy, and a copy it ran
	// has reported.
	marker, err := e.submit(t.Context(), map[string]any{"name": "conf.sleep", "payload": map[string]any{"ms": 1000}, "max_retries": 0})
	if err != nil {
		return err
	}
	if j, err := e.waitFinal(t, slow, 10*time.Second); err != nil || j.Status != "completed" {
		return fmt.Errorf("run once: the job whose running delivery was copied ended %+v (%v), want completed", j, err)
	}
	if j, err := e.waitFinal(t, marker, 10*time.Second); err != nil || j.Status != "completed" {
		return fmt.Errorf("setup: the marker job did not complete: %+v %v", j, err)
	}
	// A second outcome reaches the coordinator within a heartbeat or two
	// of the marker's; wait that long for one (a bounded wait for nothing
	// to happen).
	var stale []string
	_ = testwait.Until(t, 5*confHeartbeat, func() error {
		stale = nil
		for _, id := range []string{slow, retried} {
			s, err := e.staleResults(t.Context(), id)
			if err != nil {
				return err
			}
			stale = append(stale, s...)
		}
		if len(stale) > 0 {
			return nil
		}
		return errors.New("no stale result")
	})
	if len(stale) > 0 {
		return fmt.Errorf("run once per token: the worker ran a duplicate or stale delivery again and reported a second outcome: %v", stale)
	}
	for _, id := range []string{slow, retried} {
		j, err := e.job(t.Context(), id)
		if err != nil {
			return err
		}
		if j.Status != "completed" {
			return fmt.Errorf("one outcome per token: job %s is %s after the copies, want completed", id, j.Status)
		}
	}
	return nil
}

// pushDelivery puts a JSON delivery straight into the isolated worker's
// list, as the coordinator does.
func (e *confEnv) pushDelivery(ctx context.Context, d wire.Delivery) error {
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	return e.rdb.LPush(ctx, e.keys.WorkerJobs(confIsoWorker), b).Err()
}

// checkRedisRestart: Redis restarts (empty) while jobs run; the worker
// reconnects, their results are applied, and it takes new jobs.
func checkRedisRestart(t *testing.T, e *confEnv) error {
	if e.iso == nil {
		return errors.New("no worker: the cancel-before-delivery check did not start one")
	}
	var ids []string
	for range 3 {
		id, err := e.submit(t.Context(), map[string]any{"name": "conf.sleep", "payload": map[string]any{"ms": 1500}, "max_retries": 0})
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		if _, err := e.waitRunning(t, confIsoWorker, id, 10*time.Second); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
	}
	e.c.redis.Restart(t)
	var errs []error
	for _, id := range ids {
		j, err := e.waitFinal(t, id, 20*time.Second)
		if err != nil {
			errs = append(errs, fmt.Errorf("redis restart: a job running across the restart: %w", err))
			continue
		}
		if j.Status != "completed" || j.Attempts != 1 {
			errs = append(errs, fmt.Errorf("redis restart: job %s running across the restart ended %s after %d attempts (error %q), want completed after 1",
				id, j.Status, j.Attempts, j.LastError))
		}
	}
	id, err := e.submit(t.Context(), map[string]any{"name": "conf.echo", "payload": "after", "max_retries": 0})
	if err != nil {
		return err
	}
	if j, err := e.waitFinal(t, id, 20*time.Second); err != nil || j.Status != "completed" || !bytes.Equal(j.Result, []byte(`"after"`)) {
		errs = append(errs, fmt.Errorf("redis restart: the worker did not reconnect: a job submitted after the restart ended %+v (%v)", j, err))
	}
	return errors.Join(errs...)
}
