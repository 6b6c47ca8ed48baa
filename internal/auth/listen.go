package auth

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// LoopbackWarning is the line a server without auth logs when it listens
// on loopback only.
const LoopbackWarning = "auth is off: listening on loopback only"

// CheckListen is the safe default for a server's listen address: without
// auth (enabled false) only a loopback address (127.0.0.0/8, ::1,
// localhost) is accepted, unless insecure (--insecure-no-auth) says
// otherwise. An empty host (":8000") listens on every interface, and any
// other host name may resolve to anything, so both count as not loopback.
func CheckListen(addr string, enabled, insecure bool) error {
	if enabled || insecure {
		return nil
	}
	if IsLoopbackAddr(addr) {
		return nil
	}
	return fmt.Errorf("refusing to listen on %s without auth: anyone who can reach it could use it without a "+
		"token. Configure tokens (AUTH_JWT_SECRET, AUTH_JWT_PUBLIC_KEY_FILE or AUTH_API_KEYS=true; see "+
		"docs/security.md), listen on 127.0.0.1, or pass --insecure-no-auth if something else guards this port", addr)
}

// IsLoopbackAddr reports whether a host:port listen address is on loopback.
func IsLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	if err != nil {
		return false
	}
	return ip.Unmap().IsLoopback()
}
