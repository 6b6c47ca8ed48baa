package pgtest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/pgtest"
)

// A synchronous pair: a committed row is on the standby; a paused primary
// answers nothing while its connections stay open; a killed one refuses
// connections; the promoted standby takes writes through the multi-host
// URL and holds every committed row. Cleanup leaves no process or
// directory behind.
func TestPairFailover(t *testing.T) {
	t.Parallel()
	var pids []int
	var dirs []string
	t.Run("pair", func(t *testing.T) {
		p := pgtest.StartPair(t, pgtest.PairOptions{Sync: true})
		pids = append(pids, postmasterPID(t, p.Primary), postmasterPID(t, p.Standby))
		dirs = append(dirs, filepath.Dir(dataDir(t, p.Primary)), filepath.Dir(dataDir(t, p.Standby)))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()

		// The standby replays each commit 300 ms after it flushed it, so
		// that a read of the standby that raced the replay would fail
		// every time, not once in a while under load.
		sconn := connect(t, p.Standby.URL(pgtest.PairDatabase))
		if _, err := sconn.Exec(ctx, "ALTER SYSTEM SET recovery_min_apply_delay = '300ms'"); err != nil {
			t.Fatal(err)
		}
		if _, err := sconn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			t.Fatal(err)
		}
		sconn.Close(ctx)
		conn := connect(t, p.URL())
		// A synchronous commit returns once the standby has flushed it,
		// which a query on the standby sees only once it is replayed too:
		// remote_apply waits for both, so the read below cannot race the
		// replay (it did under load, "relation t does not exist").
		if _, err := conn.Exec(ctx, "SET synchronous_commit = remote_apply"); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE t (id int primary key)"); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "INSERT INTO t VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		// Synchronous: the commit returned once the standby had it.
		var n int
		if err := p.Standby.Query(ctx, pgtest.PairDatabase, "SELECT count(*) FROM t", &n); err != nil || n != 1 {
			t.Fatalf("standby rows = %d, %v; want 1", n, err)
		}

		p.Primary.Pause()
		qctx, qcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err := conn.Exec(qctx, "SELECT 1")
		qcancel()
		if !errors.Is(err, context.DeadlineExceeded) && !pgconnTimeout(err) {
			t.Fatalf("query on a paused primary: %v; want a timeout", err)
		}
		p.Primary.Resume()
		p.Primary.Kill()
		if _, err := pgx.Connect(ctx, p.Primary.URL(pgtest.PairDatabase)); err == nil {
			t.Fatal("connected to a killed primary")
		}

		if err := p.Standby.Promote(ctx); err != nil {
			t.Fatal(err)
		}
		conn2 := connect(t, p.URL())
		if _, err := conn2.Exec(ctx, "INSERT INTO t VALUES (2)"); err != nil {
			t.Fatal(err)
		}
		if err := conn2.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 2 {
			t.Fatalf("rows after promotion = %d, %v; want 2", n, err)
		}
	})
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("postmaster %d still runs after the test", pid)
		}
	}
	for _, dir := range dirs {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s still exists after the test (%v)", dir, err)
		}
	}
}

func pgconnTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

func postmasterPID(t *testing.T, n *pgtest.Node) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir(t, n), "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func dataDir(t *testing.T, n *pgtest.Node) string {
	t.Helper()
	var dir string
	if err := n.Query(context.Background(), "postgres", "SHOW data_directory", &dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A partitioned primary answers nothing, not even a connection attempt,
// and its namespace is gone after the test.
func TestPairPartition(t *testing.T) {
	t.Parallel()
	var ns string
	t.Run("pair", func(t *testing.T) {
		p := pgtest.StartPair(t, pgtest.PairOptions{Sync: true, PartitionablePrimary: true})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		ns = netnsOf(t, p.Primary)
		conn := connect(t, p.URL())
		if _, err := conn.Exec(ctx, "CREATE TABLE t (id int primary key); INSERT INTO t VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		if err := p.Primary.Partition(); err != nil {
			t.Fatal(err)
		}
		qctx, qcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := conn.Exec(qctx, "SELECT 1")
		qcancel()
		if !errors.Is(err, context.DeadlineExceeded) && !pgconnTimeout(err) {
			t.Fatalf("query on a partitioned primary: %v; want a timeout", err)
		}
		cctx, ccancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err = pgx.Connect(cctx, p.Primary.URL(pgtest.PairDatabase))
		ccancel()
		if err == nil {
			t.Fatal("connected to a partitioned primary")
		}
		if err := p.Standby.Promote(ctx); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := p.Standby.Query(ctx, pgtest.PairDatabase, "SELECT count(*) FROM t", &n); err != nil || n != 1 {
			t.Fatalf("rows on the promoted standby = %d, %v; want 1", n, err)
		}
	})
	if out, err := exec.Command("ip", "netns", "list").CombinedOutput(); err != nil || strings.Contains(string(out), ns) {
		t.Errorf("network namespace %s still exists after the test (%v): %s", ns, err, out)
	}
}

// netnsOf is the network namespace the node's postmaster runs in.
func netnsOf(t *testing.T, n *pgtest.Node) string {
	t.Helper()
	pid := postmasterPID(t, n)
	out, err := exec.Command("ip", "netns", "identify", strconv.Itoa(pid)).Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("the primary runs in no named network namespace (%v, %q)", err, out)
	}
	return strings.TrimSpace(string(out))
}
