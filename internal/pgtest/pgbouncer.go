package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/childproc"
)

const bouncerDirPrefix = "dts-pgbouncer-"

// BouncerIgnoredParams are the startup parameters store.Open (and
// store.PinIndexPlans) send, which pgbouncer refuses unless told to ignore
// them. Ignored, they never reach PostgreSQL: through the pooler the
// sessions run on the server's (or the role's) settings.
var BouncerIgnoredParams = []string{"plan_cache_mode", "jit", "enable_seqscan", "enable_hashjoin", "enable_mergejoin"}

// StartPgBouncer starts a pgbouncer in front of the database of dbURL (a URL
// from NewDatabase) for this test and returns the URL to reach that database
// through it (postgres://postgres@127.0.0.1:PORT/NAME?sslmode=disable).
//
// The pooler runs in transaction mode with two server connections per
// database and user (default_pool_size = 2), so the transactions of all its
// clients share those two sessions: nothing a client leaves in a session
// (an advisory lock, a SET, a prepared statement) is its own. pgbouncer
// 1.18 does not track named prepared statements, so pgx must be told not to
// make them: add default_query_exec_mode=exec (or simple_protocol) to the
// URL.
//
// It listens on a free 127.0.0.1 port, with auth_type trust (the user must
// still be in its auth_file), ignores BouncerIgnoredParams, and logs into its
// temporary directory. As root it runs as the OS user postgres (pgbouncer
// refuses to run as root). It is stopped and its directory removed when the
// test ends; if the test binary dies first, the kernel kills it
// (Pdeathsig) and the next call removes the leftover directory.
//
// The binary is $PGBOUNCER, else pgbouncer on $PATH, else /usr/sbin/pgbouncer
// (Debian's place, not on a non-root PATH).
func StartPgBouncer(t testing.TB, dbURL string) string {
	t.Helper()
	u, err := startBouncer(t, dbURL)
	if err != nil {
		t.Fatalf("pgtest: pgbouncer: %v", err)
	}
	return u
}

func startBouncer(t testing.TB, dbURL string) (string, error) {
	bin, err := bouncerBinary()
	if err != nil {
		return "", err
	}
	target, err := url.Parse(dbURL)
	if err != nil {
		return "", fmt.Errorf("parse %q: %w", dbURL, err)
	}
	dbname := strings.TrimPrefix(target.Path, "/")
	user := target.User.Username()
	if dbname == "" || user == "" || target.Hostname() == "" || target.Port() == "" {
		return "", fmt.Errorf("%q lacks a host, port, user or database", dbURL)
	}

	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		if cred, err = postgresCredential(); err != nil {
			return "", err
		}
	}
	base := tempBase(cred)
	removeStale(base, bouncerDirPrefix)
	dir, err := os.MkdirTemp(base, bouncerDirPrefix)
	if err != nil {
		return "", fmt.Errorf("make temp dir: %w", err)
	}
	b := &bouncer{dir: dir, logPath: filepath.Join(dir, "pgbouncer.log")}
	t.Cleanup(b.stop)
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return "", fmt.Errorf("write owner file: %w", err)
	}
	authFile := filepath.Join(dir, "userlist.txt")
	if err := os.WriteFile(authFile, []byte(fmt.Sprintf("%q \"\"\n", user)), 0o644); err != nil {
		return "", fmt.Errorf("write auth file: %w", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return "", fmt.Errorf("chown %s to postgres: %w", dir, err)
		}
	}

	// The port is free when chosen but may be taken before pgbouncer binds
	// it; then try another.
	for attempt := 1; ; attempt++ {
		port, err := childproc.FreePort()
		if err != nil {
			return "", err
		}
		conf := fmt.Sprintf(`[databases]
%s = host=%s port=%s dbname=%s user=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = 2
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 200
ignore_startup_parameters = %s
logfile = %s
pidfile = %s
`, dbname, target.Hostname(), target.Port(), dbname, user,
			port, authFile, strings.Join(BouncerIgnoredParams, ","),
			b.logPath, filepath.Join(dir, "pgbouncer.pid"))
		confPath := filepath.Join(dir, "pgbouncer.ini")
		if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
			return "", fmt.Errorf("write config: %w", err)
		}
		u := fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", url.PathEscape(user), port, url.PathEscape(dbname))
		err = b.run(bin, confPath, u, cred)
		if err == nil {
			return u, nil
		}
		if !errors.Is(err, errPortTaken) || attempt == 5 {
			return "", err
		}
	}
}

type bouncer struct {
	dir     string
	logPath string
	proc    *childproc.Process
}

// run starts pgbouncer and waits until a query goes through it.
func (b *bouncer) run(bin, confPath, u string, cred *syscall.Credential) error {
	_ = os.Remove(b.logPath)
	cmd := exec.Command(bin, confPath)
	cmd.Dir = b.dir
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	proc, err := childproc.Start(cmd)
	if err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	b.proc = proc

	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = ping(ctx, u+"&default_query_exec_mode=simple_protocol")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-proc.Exited():
			b.proc = nil
			log := b.logTail()
			if strings.Contains(log, "Address already in use") {
				return fmt.Errorf("%w: %s", errPortTaken, u)
			}
			return fmt.Errorf("pgbouncer exited during start-up: %s\n%s", cmd.ProcessState, log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgbouncer not ready after %s: %v\n%s", startTimeout, err, b.logTail())
		}
	}
}

func ping(ctx context.Context, u string) error {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "SELECT 1")
	return err
}

// stop ends pgbouncer at once (SIGTERM: immediate shutdown; SIGKILL if it
// lingers) and removes the directory.
func (b *bouncer) stop() {
	if b.proc != nil {
		pid := b.proc.Cmd.Process.Pid
		_ = syscall.Kill(pid, syscall.SIGTERM)
		select {
		case <-b.proc.Exited():
		case <-time.After(stopTimeout):
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			<-b.proc.Exited()
		}
		b.proc = nil
	}
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
		b.dir = ""
	}
}

func (b *bouncer) logTail() string {
	data, _ := os.ReadFile(b.logPath)
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return strings.TrimSpace(string(data))
}

// bouncerBinary finds pgbouncer.
func bouncerBinary() (string, error) {
	if p := os.Getenv("PGBOUNCER"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if fi, err := os.Stat("/usr/sbin/pgbouncer"); err == nil && !fi.IsDir() {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", errors.New("pgbouncer not found: install it (deploy/local/prereqs.sh test; " +
		"Debian: apt-get install -y pgbouncer) or set PGBOUNCER")
}
