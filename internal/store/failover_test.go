package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/testwait"
)

// A primary that hangs (SIGSTOP: its connections stay open and its kernel
// acknowledges what is sent) must not hang the store: a call with no
// deadline, like those of the coordinator's loops, fails once the server
// has answered nothing for connect_timeout, and once the standby is
// promoted, calls succeed on it through the multi-host URL. The leader's
// epoch, written on the primary before it hung, is on the promoted standby
// (synchronous replication), so its fencing still holds.
func TestStoreSurvivesHungPrimary(t *testing.T) {
	t.Parallel()
	const connectTimeout = 2 * time.Second
	p := pgtest.StartPair(t, pgtest.PairOptions{Sync: true})
	ctx := t.Context()
	s, err := store.Open(ctx, p.URL()+"&connect_timeout=2", store.Options{MaxConns: 4, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	epoch, err := s.LeaderAcquire(ctx, "a", time.Hour)
	if err != nil || epoch == 0 {
		t.Fatalf("acquire: %d, %v", epoch, err)
	}

	p.Primary.Pause()
	paused := time.Now()
	hung := make(chan error, 1)
	go func() { hung <- s.LeaderRenew(context.Background(), epoch, time.Hour) }()
	if err := p.Standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()

	select {
	case err := <-hung:
		if !errors.Is(err, job.ErrStoreUnavailable) {
			t.Errorf("renew on the hung primary: %v; want ErrStoreUnavailable", err)
		}
		t.Logf("the statement on the hung primary failed %v after the pause", time.Since(paused).Round(time.Millisecond))
	case <-time.After(3 * connectTimeout):
		t.Fatalf("a statement on the hung primary still waits %v after the pause", time.Since(paused).Round(time.Millisecond))
	}

	testwait.NoError(t, 3*connectTimeout-time.Since(promoted), "the store to reach the promoted standby", func() error {
		err := s.LeaderRenew(context.Background(), epoch, time.Hour)
		if err != nil && !errors.Is(err, job.ErrStoreUnavailable) {
			t.Fatalf("renew on the promoted standby: %v", err)
		}
		return err
	})
	t.Logf("recovered %v after the promotion", time.Since(promoted).Round(time.Millisecond))

	// Fencing carried over: a successor bumps the epoch on the new
	// primary, and the old epoch's renewal is refused.
	if _, err := s.Pool().Exec(ctx, "UPDATE coordinator_lease SET expires_at = now() - interval '1 second'"); err != nil {
		t.Fatal(err)
	}
	next, err := s.LeaderAcquire(ctx, "b", time.Hour)
	if err != nil || next != epoch+1 {
		t.Fatalf("successor's epoch = %d, %v; want %d", next, err, epoch+1)
	}
	if err := s.LeaderRenew(ctx, epoch, time.Hour); !store.IsDeposed(err) {
		t.Fatalf("old epoch's renewal after takeover: %v; want deposed", err)
	}
}

// The guard judges a server by whether it answers, not by how long a
// statement takes: a statement longer than connect_timeout on a live server
// completes.
func TestStoreSlowStatementOnLiveServer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := store.Open(ctx, pgtest.NewDatabase(t)+"&connect_timeout=1", store.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Pool().Exec(ctx, "SELECT pg_sleep(2.5)"); err != nil {
		t.Fatalf("a 2.5 s statement with connect_timeout=1: %v", err)
	}
}

// The libpq network parameters are read by dts, not sent to the server
// (which would refuse keepalives_idle as an unknown setting), and a bad
// value is refused by name.
func TestStoreNetworkParams(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	s, err := store.Open(ctx, url+"&connect_timeout=3&tcp_user_timeout=4000&keepalives=1&keepalives_idle=7&keepalives_interval=1&keepalives_count=2", store.Options{MaxConns: 2})
	if err != nil {
		t.Fatalf("open with the libpq network parameters: %v", err)
	}
	s.Close()
	if _, err := store.Open(ctx, url+"&tcp_user_timeout=soon", store.Options{MaxConns: 2}); err == nil || !strings.Contains(err.Error(), "tcp_user_timeout") {
		t.Fatalf("open with tcp_user_timeout=soon: %v; want an error naming it", err)
	}
}
