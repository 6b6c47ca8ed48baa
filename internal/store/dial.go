package store

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// How long dts waits for PostgreSQL at the network level. Each can be set
// in DATABASE_URL with libpq's name and unit; libpq waits without limit
// where these defaults do not, and waiting without limit on a server that
// hangs is how a process stops working without failing.
const (
	// DefaultConnectTimeout bounds each host's connection attempt
	// (connect_timeout, seconds; 0 means this default). It is also how
	// long a server may answer nothing before every connection to it is
	// closed (see hangGuard).
	DefaultConnectTimeout = 5 * time.Second
	// DefaultTCPUserTimeout bounds how long data sent may stay
	// unacknowledged before the kernel drops the connection
	// (tcp_user_timeout, milliseconds; 0 leaves the system's).
	DefaultTCPUserTimeout = 10 * time.Second
	// DefaultKeepAliveIdle, DefaultKeepAliveInterval and
	// DefaultKeepAliveCount are the TCP keepalive of idle connections
	// (keepalives_idle and keepalives_interval in seconds,
	// keepalives_count; keepalives=0 turns them off): a peer that is gone
	// is noticed after about idle + interval × count.
	DefaultKeepAliveIdle     = 5 * time.Second
	DefaultKeepAliveInterval = 2 * time.Second
	DefaultKeepAliveCount    = 3
)

// netSettings are the network settings of a pool.
type netSettings struct {
	connectTimeout time.Duration
	userTimeout    time.Duration
	keepAlive      net.KeepAliveConfig
}

// libpqNetParams are the libpq parameters read here that pgx does not
// know; left in the config, pgx would send them to the server as settings.
var libpqNetParams = []string{"tcp_user_timeout", "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count"}

// parseNetSettings reads the network settings from cfg (libpq's names),
// applying dts's defaults, and removes them from the runtime parameters.
func parseNetSettings(cfg *pgxpool.Config) (netSettings, error) {
	s := netSettings{
		connectTimeout: cfg.ConnConfig.ConnectTimeout,
		userTimeout:    DefaultTCPUserTimeout,
		keepAlive:      net.KeepAliveConfig{Enable: true, Idle: DefaultKeepAliveIdle, Interval: DefaultKeepAliveInterval, Count: DefaultKeepAliveCount},
	}
	if s.connectTimeout <= 0 {
		s.connectTimeout = DefaultConnectTimeout
	}
	params := cfg.ConnConfig.RuntimeParams
	for _, name := range libpqNetParams {
		v, ok := params[name]
		if !ok {
			continue
		}
		delete(params, name)
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return s, fmt.Errorf("%s=%q: want a whole number ≥ 0", name, v)
		}
		switch name {
		case "tcp_user_timeout":
			s.userTimeout = time.Duration(n) * time.Millisecond
		case "keepalives":
			s.keepAlive.Enable = n != 0
		case "keepalives_idle":
			s.keepAlive.Idle = time.Duration(n) * time.Second
		case "keepalives_interval":
			s.keepAlive.Interval = time.Duration(n) * time.Second
		case "keepalives_count":
			s.keepAlive.Count = n
		}
	}
	return s, nil
}

// dialer is the net.Dialer of these settings.
func (s netSettings) dialer() *net.Dialer {
	d := &net.Dialer{Timeout: s.connectTimeout, KeepAliveConfig: s.keepAlive}
	if !s.keepAlive.Enable {
		d.KeepAlive = -1
	}
	if s.userTimeout > 0 {
		ms := int(s.userTimeout.Milliseconds())
		d.Control = func(network, _ string, c syscall.RawConn) error {
			if !strings.HasPrefix(network, "tcp") {
				return nil
			}
			var serr error
			if err := c.Control(func(fd uintptr) { serr = setTCPUserTimeout(fd, ms) }); err != nil {
				return err
			}
			return serr
		}
	}
	return d
}
