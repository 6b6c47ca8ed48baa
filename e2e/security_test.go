package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// cli runs one of the built binaries with a subcommand and returns its
// stdout (the secret it prints), failing the test on error.
func (c *cluster) cli(bin string, args ...string) string {
	c.t.Helper()
	cmd := exec.Command(filepath.Join(binDir, bin), args...)
	cmd.Env = c.base
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		c.t.Fatalf("%s %v: %v\n%s", bin, args, err, stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// authed sends a JSON request with a bearer token and decodes the answer.
func (c *cluster) authed(method, url, token string, body any) (int, map[string]any) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &out)
	return resp.StatusCode, out
}

// TestSecureCluster runs the real binaries with auth on: API keys made by
// the token subcommand, a worker with a credential made by the
// worker-credential subcommand, and one without, which is refused.
func TestSecureCluster(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "AUTH_API_KEYS=true")
	key := c.cli("submitter", "token", "create", "-name", "e2e", "-scope", "submit,read")
	admin := c.cli("submitter", "token", "create", "-name", "e2e-admin", "-scope", "admin", "-ttl", "1h")
	cred := c.cli("coordinator", "worker-credential", "create", "-worker-id", "w-trusted")
	for _, s := range []string{key, admin} {
		if !strings.HasPrefix(s, "dts_") {
			t.Fatalf("token create printed %q", s)
		}
	}
	if !strings.HasPrefix(cred, "dtsw_") {
		t.Fatalf("worker-credential create printed %q", cred)
	}

	coord := c.startCoordinator("c1")
	c.startSubmitter()
	c.startWorker("w-trusted", "WORKER_CREDENTIAL="+cred)
	c.startWorker("w-anon")

	// No token: 401. With one: the job runs on the trusted worker only.
	if code, out := c.authed("POST", c.submitter+"/submit_job", "", map[string]any{"name": "noop"}); code != 401 {
		t.Fatalf("submit without a token: %d %v", code, out)
	}
	var ids []string
	for range 6 {
		code, out := c.authed("POST", c.submitter+"/submit_job", key, map[string]any{"name": "noop"})
		if code != 201 {
			t.Fatalf("submit: %d %v", code, out)
		}
		ids = append(ids, out["job_id"].(string))
	}
	for _, id := range ids {
		c.eventually(30*time.Second, "job "+id+" completed", func() bool {
			_, j := c.authed("GET", c.submitter+"/jobs/"+id, key, nil)
			return j["status"] == "completed"
		})
		if _, j := c.authed("GET", c.submitter+"/jobs/"+id, key, nil); j["worker_id"] != "w-trusted" {
			t.Errorf("job %s ran on %v, want w-trusted", id, j["worker_id"])
		}
	}

	// The coordinator's /workers needs admin; it shows the trusted worker only.
	if code, _ := c.authed("GET", coord.url+"/workers", key, nil); code != 403 {
		t.Errorf("/workers with a submit,read key: %d", code)
	}
	code, out := c.authed("GET", coord.url+"/workers", admin, nil)
	if code != 200 {
		t.Fatalf("/workers: %d %v", code, out)
	}
	ws, _ := out["workers"].([]any)
	if len(ws) != 1 || ws[0].(map[string]any)["worker_id"] != "w-trusted" {
		t.Errorf("/workers = %v, want only w-trusted", out)
	}
	if n := c.metric(coord.url, "dts_worker_auth_failures_total", `reason="missing"`); n < 1 {
		t.Errorf("dts_worker_auth_failures_total{reason=missing} = %v", n)
	}

	// Revoking the key via the CLI locks it out within seconds.
	c.cli("submitter", "token", "revoke", "1")
	c.eventually(10*time.Second, "the revoked key refused", func() bool {
		code, _ := c.authed("GET", c.submitter+"/stats", key, nil)
		return code == 401
	})

	// The audit log has the token creations and revocation; no log has a secret.
	code, out = c.authed("GET", c.submitter+"/admin/audit", admin, nil)
	if code != 200 || len(out["entries"].([]any)) < 4 {
		t.Errorf("audit = %d %v", code, out)
	}
	for _, p := range []string{"c1", "submitter", "w-trusted", "w-anon"} {
		b, err := os.ReadFile(filepath.Join(c.logDir, p+".log"))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{key, admin, cred} {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s log contains a secret", p)
			}
		}
	}
}

// TestPublicBindRefusedWithoutAuth starts the binaries on 0.0.0.0 without
// auth: they exit at once with an error naming --insecure-no-auth.
func TestPublicBindRefusedWithoutAuth(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	for _, b := range []struct{ bin, addrVar string }{{"submitter", "SUBMITTER_ADDR"}, {"coordinator", "COORDINATOR_ADDR"}} {
		cmd := exec.Command(filepath.Join(binDir, b.bin))
		cmd.Env = append(append([]string{}, c.base...), b.addrVar+"=0.0.0.0:0")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "--insecure-no-auth") {
			t.Errorf("%s on 0.0.0.0 without auth: %v\n%s", b.bin, err, out)
		}
	}
}

// redisACL are the ACL users docs/security.md shows, one per role, each
// limited to the commands and keys that role uses (internal/queue). Keep
// the two in step: TestRedisACLUsers runs the system under them and fails
// on any command Redis denies.
var redisACL = map[string]string{
	"dts-coordinator": "on >coordinator-pw resetkeys resetchannels ~dts:* ~dead_letter_queue ~dead_letter_queue:rebuild ~dead_letter_queue:epoch &dts:wakeup " +
		"-@all +ping +hello +auth +select +time +evalsha +eval " +
		"+lpush +rpush +del +rename +llen +lrange +lrem +get +set +exists +multi +exec " +
		"+xread +xrevrange +xreadgroup +xgroup|create +xack +xdel +xinfo|groups +xpending +xrange +subscribe +unsubscribe",
	"dts-submitter": "on >submitter-pw resetkeys resetchannels ~dts:worker:*:control &dts:wakeup " +
		"-@all +ping +hello +auth +select +lpush +publish",
	"dts-worker-w1": "on >worker-pw resetkeys resetchannels ~dts:worker:w1:jobs ~dts:worker:w1:control ~dts:heartbeats ~dts:results " +
		"-@all +ping +hello +auth +select +lmpop +blmpop +xadd",
}

// TestRedisACLUsers runs a cluster whose processes each log in to Redis as
// their own restricted ACL user, drives every Redis path (delivery,
// results, heartbeats, wake-ups, a cancel, the DLQ) and checks that Redis
// denied nothing.
func TestRedisACLUsers(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := ctxT(t, 2*time.Minute)
	admin := redis.NewClient(&redis.Options{Addr: c.redis.Addr()})
	defer admin.Close()
	for user, rules := range redisACL {
		args := []any{"ACL", "SETUSER", user}
		for _, r := range strings.Fields(rules) {
			args = append(args, r)
		}
		if err := admin.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("ACL SETUSER %s: %v", user, err)
		}
	}
	if err := admin.Do(ctx, "ACL", "LOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}
	url := func(user, pw string) string {
		return "REDIS_URL=redis://" + user + ":" + pw + "@" + c.redis.Addr() + "/0"
	}
	c1 := c.start("c1", "coordinator", "COORDINATOR_ADDR", "COORDINATOR_ID=c1", url("dts-coordinator", "coordinator-pw"))
	p := c.start("submitter", "submitter", "SUBMITTER_ADDR", url("dts-submitter", "submitter-pw"))
	c.submitter = p.url
	w1 := c.startWorker("w1", url("dts-worker-w1", "worker-pw"))

	done := c.submit(map[string]any{"name": "noop"})
	dead := c.submit(map[string]any{"name": "test_job", "payload": "invalid_job_1", "max_retries": 1})
	long := c.submit(map[string]any{"name": "sleep", "payload": map[string]any{"seconds": 30}})
	c.waitStatus(done, "completed", 30*time.Second)
	c.waitStatus(dead, "failed", 30*time.Second)
	c.waitStatus(long, "leased", 30*time.Second)
	if code, out := c.do("POST", c.submitter+"/jobs/"+long+"/cancel", nil); code != 202 {
		t.Fatalf("cancel: %d %v", code, out)
	}
	c.waitStatus(long, "canceled", 30*time.Second)
	if code, out := c.do("POST", c.submitter+"/dlq/"+dead+"/requeue", nil); code != 200 {
		t.Fatalf("requeue: %d %v", code, out)
	}
	c.eventually(30*time.Second, "the requeued job failed again", func() bool {
		j := c.job(dead)
		return j["status"] == "failed" && j["attempts"].(float64) == 2
	})
	if n, err := admin.LLen(ctx, "dead_letter_queue").Result(); err != nil || n < 1 {
		t.Errorf("dead_letter_queue has %d entries (%v)", n, err)
	}
	// A clean stop: the leader releases what the worker left once its
	// results are applied (which it checks on the results stream), then
	// forgets it.
	w1.signal(t, syscall.SIGTERM)
	c.eventually(30*time.Second, "the stopped worker forgotten by the leader", func() bool {
		var ws struct {
			Workers []struct {
				ID string `json:"worker_id"`
			} `json:"workers"`
		}
		resp, err := http.Get(c1.url + "/workers")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		if json.NewDecoder(resp.Body).Decode(&ws) != nil {
			return false
		}
		return len(ws.Workers) == 0
	})
	entries, err := admin.Do(ctx, "ACL", "LOG").Slice()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("Redis denied: %v", e)
	}
}
