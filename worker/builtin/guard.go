package builtin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// The webhook handler sends requests to URLs that whoever submits a job
// chooses. Without a guard, that makes every worker a proxy into its own
// network: the cloud metadata service (169.254.169.254), the local
// Redis and PostgreSQL, admin ports on 10.x. So webhook connects only to
// public addresses unless Config.WebhookAllow names the destination.
//
// The check is made where it cannot be dodged: on the address actually
// dialed (net.Dialer.Control runs after DNS resolution, on every address
// tried), so a host name that resolves to a private address, or resolves
// differently the second time (DNS rebinding), is refused all the same;
// and on every redirect, which is dialed through the same guard. No proxy
// is used (a proxy would dial for us, past the guard).

// maxRedirects is the longest redirect chain webhook follows.
const maxRedirects = 5

// BlockedAddressError is the error of a webhook whose destination (or a
// redirect's) is an address the guard refuses. Handlers treat it as
// permanent: retrying cannot change where the URL points.
type BlockedAddressError struct {
	Addr   string // the address refused (host or ip:port)
	Reason string // "loopback", "private", "link-local", ...
}

func (e *BlockedAddressError) Error() string {
	return fmt.Sprintf("refusing to connect to %s: %s address (allow it with WebhookAllow / WEBHOOK_ALLOW)", e.Addr, e.Reason)
}

// errRedirectRefused is the redirect policy's error: a chain longer than
// maxRedirects, or a redirect to a scheme other than http and https.
var errRedirectRefused = errors.New("redirect refused")

// addrGuard decides which addresses webhook may connect to.
type addrGuard struct {
	nets  []netip.Prefix  // allowed networks (an address is a /32 or /128)
	hosts map[string]bool // allowed host names, lower case, without a trailing dot
}

// newAddrGuard parses an allow-list: CIDRs, addresses or host names.
func newAddrGuard(allow []string) (*addrGuard, error) {
	g := &addrGuard{hosts: map[string]bool{}}
	for _, raw := range allow {
		s := strings.TrimSpace(raw)
		switch {
		case s == "":
			continue
		case strings.Contains(s, "/"):
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("allow-list entry %q: %w", raw, err)
			}
			g.nets = append(g.nets, p.Masked())
		default:
			if ip, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
				ip = ip.WithZone("").Unmap()
				g.nets = append(g.nets, netip.PrefixFrom(ip, ip.BitLen()))
				continue
			}
			host := normalizeHost(s)
			if strings.ContainsAny(host, " :/@?#") {
				return nil, fmt.Errorf("allow-list entry %q: not a CIDR, an address or a host name", raw)
			}
			g.hosts[host] = true
		}
	}
	return g, nil
}

func normalizeHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// blockedReason says why ip is not a public address, or "" if it is.
func blockedReason(ip netip.Addr) string {
	ip = ip.WithZone("").Unmap() // ::ffff:127.0.0.1 is 127.0.0.1
	switch {
	case !ip.IsValid():
		return "invalid"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return "link-local" // 169.254.169.254: cloud metadata
	case ip.IsMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast"
	case ip.IsPrivate():
		return "private" // 10/8, 172.16/12, 192.168/16, fc00::/7
	}
	for _, b := range otherBlocked {
		if b.p.Contains(ip) {
			return b.reason
		}
	}
	return ""
}

// otherBlocked are non-public ranges netip has no predicate for.
var otherBlocked = []struct {
	p      netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network"},      // "this host" on Linux
	{netip.MustParsePrefix("100.64.0.0/10"), "shared"},        // carrier-grade NAT; some clouds' metadata (100.100.100.200)
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved"},       // IETF protocol assignments
	{netip.MustParsePrefix("198.18.0.0/15"), "reserved"},      // benchmarking
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},        // and 255.255.255.255 broadcast
	{netip.MustParsePrefix("fec0::/10"), "site-local"},        // deprecated, still routed by some
	{netip.MustParsePrefix("64:ff9b::/96"), "nat64"},          // would reach any IPv4 address, private ones included
	{netip.MustParsePrefix("64:ff9b:1::/48"), "nat64"},        // local-use NAT64
	{netip.MustParsePrefix("2002::/16"), "6to4"},              // embeds an IPv4 address
	{netip.MustParsePrefix("2001::/32"), "teredo"},            // embeds an IPv4 address
	{netip.MustParsePrefix("::/96"), "ipv4-compatible"},       // deprecated, embeds an IPv4 address
	{netip.MustParsePrefix("100::/64"), "discard"},            // discard-only
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"}, // never routed
}

// checkIP returns nil if ip is public or allowed.
func (g *addrGuard) checkIP(ip netip.Addr, shown string) error {
	ip = ip.WithZone("").Unmap()
	reason := blockedReason(ip)
	if reason == "" {
		return nil
	}
	for _, p := range g.nets {
		if p.Contains(ip) {
			return nil
		}
	}
	return &BlockedAddressError{Addr: shown, Reason: reason}
}

// control is the net.Dialer.Control of guarded dials: it runs on the
// resolved address just before the connection is made.
func (g *addrGuard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &BlockedAddressError{Addr: address, Reason: "unparseable"}
	}
	return g.checkIP(ap.Addr(), address)
}

// dialContext dials through d, guarded unless the host is named in the
// allow-list (then any address it resolves to is fine).
func (g *addrGuard) dialContext(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	guarded := *d
	guarded.Control = g.control
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, _, err := net.SplitHostPort(addr); err == nil && g.hosts[normalizeHost(host)] {
			return d.DialContext(ctx, network, addr)
		}
		return guarded.DialContext(ctx, network, addr)
	}
}

// checkRedirect follows at most maxRedirects redirects, to http or https
// URLs only; an address literal is checked at once (names are checked when
// dialed, like every connection).
func (g *addrGuard) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > maxRedirects {
		return fmt.Errorf("%w: more than %d redirects", errRedirectRefused, maxRedirects)
	}
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return fmt.Errorf("%w: to a %q URL", errRedirectRefused, req.URL.Scheme)
	}
	if ip, err := netip.ParseAddr(strings.Trim(req.URL.Hostname(), "[]")); err == nil {
		return g.checkIP(ip, req.URL.Host)
	}
	return nil
}

// newWebhookClient returns the guarded client of webhook: no proxy, the
// guard on every dial and redirect, and timeout over the whole exchange.
func newWebhookClient(g *addrGuard, timeout time.Duration) *http.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{
		Timeout:       timeout,
		CheckRedirect: g.checkRedirect,
		Transport: &http.Transport{
			Proxy:                  nil,
			DialContext:            g.dialContext(dialer),
			ForceAttemptHTTP2:      true,
			MaxIdleConns:           100,
			IdleConnTimeout:        90 * time.Second,
			TLSHandshakeTimeout:    10 * time.Second,
			ExpectContinueTimeout:  time.Second,
			ResponseHeaderTimeout:  timeout,
			MaxResponseHeaderBytes: 64 << 10,
		},
	}
}

// isGuardError reports whether err is the guard's (or the redirect
// policy's): permanent, since the same URL leads to the same place.
func isGuardError(err error) bool {
	var blocked *BlockedAddressError
	return errors.As(err, &blocked) || errors.Is(err, errRedirectRefused)
}
