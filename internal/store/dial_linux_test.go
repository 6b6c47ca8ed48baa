package store_test

import (
	"syscall"
	"testing"

	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/store"
)

// The network settings reach the sockets: the defaults, and libpq's
// parameters when DATABASE_URL has them.
func TestStoreSocketOptions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	for _, tc := range []struct {
		params                                     string
		userTimeoutMS, keepAlive, idle, intvl, cnt int
	}{
		{"", 10000, 1, 5, 2, 3},
		{"&tcp_user_timeout=4000&keepalives_idle=7&keepalives_interval=1&keepalives_count=2", 4000, 1, 7, 1, 2},
		{"&tcp_user_timeout=0&keepalives=0", 0, 0, -1, -1, -1},
	} {
		s, err := store.Open(ctx, url+tc.params, store.Options{MaxConns: 1})
		if err != nil {
			t.Fatal(err)
		}
		conn, err := s.Pool().Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := store.SocketOf(conn.Conn().PgConn().Conn())
		if err != nil {
			t.Fatal(err)
		}
		get := func(level, opt int) int {
			var v int
			var gerr error
			if err := raw.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), level, opt) }); err != nil || gerr != nil {
				t.Fatalf("getsockopt %d: %v %v", opt, err, gerr)
			}
			return v
		}
		got := []int{get(syscall.IPPROTO_TCP, 0x12), get(syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)}
		want := []int{tc.userTimeoutMS, tc.keepAlive}
		if tc.keepAlive == 1 {
			got = append(got, get(syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE), get(syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL), get(syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT))
			want = append(want, tc.idle, tc.intvl, tc.cnt)
		}
		conn.Release()
		s.Close()
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("DATABASE_URL%s: TCP_USER_TIMEOUT, SO_KEEPALIVE, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT = %v; want %v", tc.params, got, want)
				break
			}
		}
	}
}
