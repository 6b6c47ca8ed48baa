package builtin

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dtsched/dts/worker"
)

func TestBlockedReason(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"127.0.0.1":        "loopback",
		"127.9.9.9":        "loopback",
		"::1":              "loopback",
		"::ffff:127.0.0.1": "loopback",
		"10.0.0.1":         "private",
		"172.16.5.4":       "private",
		"172.31.255.255":   "private",
		"192.168.1.1":      "private",
		"fd00::1":          "private",
		"169.254.169.254":  "link-local",
		"fe80::1":          "link-local",
		"fe80::1%eth0":     "link-local",
		"0.0.0.0":          "unspecified",
		"::":               "unspecified",
		"0.1.2.3":          "this-network",
		"224.0.0.1":        "link-local", // link-local multicast
		"239.1.2.3":        "multicast",
		"ff05::1":          "multicast",
		"100.100.100.200":  "shared",
		"255.255.255.255":  "reserved",
		"64:ff9b::a00:1":   "nat64",
		"8.8.8.8":          "",
		"1.1.1.1":          "",
		"172.32.0.1":       "",
		"2606:4700::1111":  "",
	}
	for addr, want := range tests {
		if got := blockedReason(netip.MustParseAddr(addr)); got != want {
			t.Errorf("blockedReason(%s) = %q, want %q", addr, got, want)
		}
	}
}

func TestNewAddrGuard(t *testing.T) {
	t.Parallel()
	g, err := newAddrGuard([]string{" 10.1.0.0/16", "127.0.0.1", "[::1]", "Hooks.Internal.", ""})
	if err != nil {
		t.Fatal(err)
	}
	for _, ok := range []string{"10.1.2.3", "127.0.0.1", "::1", "::ffff:127.0.0.1", "8.8.8.8"} {
		if err := g.checkIP(netip.MustParseAddr(ok), ok); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"10.2.0.1", "127.0.0.2", "169.254.169.254"} {
		var be *BlockedAddressError
		if err := g.checkIP(netip.MustParseAddr(bad), bad); !errors.As(err, &be) {
			t.Errorf("%s allowed", bad)
		}
	}
	if !g.hosts["hooks.internal"] {
		t.Errorf("hosts = %v", g.hosts)
	}
	for _, bad := range []string{"10.0.0.0/33", "http://x", "a b", "user@host"} {
		if _, err := newAddrGuard([]string{bad}); err == nil {
			t.Errorf("allow-list entry %q accepted", bad)
		}
	}
	cfg := testConfig(t)
	cfg.WebhookAllow = []string{"10.0.0.0/99"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "WebhookAllow") {
		t.Errorf("Validate = %v", err)
	}
	_, err = register(t, cfg).handler(t, "webhook")(t.Context(), newJob("webhook", `{"url":"http://example.com"}`))
	if !worker.IsPermanent(err) {
		t.Errorf("webhook with a bad allow-list: %v, want a permanent error", err)
	}
}

// counting is a receiver that counts its requests.
func counting(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if h != nil {
			h(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestWebhookGuard(t *testing.T) {
	t.Parallel()
	srv, hits := counting(t, nil)
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	tests := []struct {
		name  string
		allow []string
		url   string
		ok    bool
	}{
		{"loopback refused", nil, srv.URL, false},
		{"localhost refused", nil, "http://localhost:" + port, false},
		{"mapped loopback refused", nil, "http://[::ffff:127.0.0.1]:" + port, false},
		{"unspecified refused", nil, "http://0.0.0.0:" + port, false},
		// These are refused before any packet leaves: the guard runs
		// between socket() and connect().
		{"cloud metadata refused", nil, "http://169.254.169.254/latest/meta-data/", false},
		{"private refused", nil, "http://10.0.0.1:6379/", false},
		{"private v6 refused", nil, "http://[fd00::1]:5432/", false},
		{"other loopback address refused", []string{"127.0.0.1"}, "http://127.0.0.2:" + port, false},
		{"address allowed", []string{"127.0.0.1"}, srv.URL, true},
		{"network allowed", []string{"127.0.0.0/8"}, srv.URL, true},
		{"host name allowed", []string{"localhost"}, "http://localhost:" + port, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.WebhookAllow = tt.allow
			before := hits.Load()
			res, err := register(t, cfg).handler(t, "webhook")(t.Context(), newJob("webhook", `{"url":"`+tt.url+`"}`))
			if tt.ok {
				if err != nil || res.(map[string]any)["status"] != 204 {
					t.Fatalf("= %v, %v; want 204", res, err)
				}
				return
			}
			var be *BlockedAddressError
			if err == nil || !worker.IsPermanent(err) || !errors.As(err, &be) {
				t.Fatalf("= %v, %v; want a permanent BlockedAddressError", res, err)
			}
			if hits.Load() != before {
				t.Error("the receiver was reached")
			}
		})
	}
}

func TestWebhookRedirects(t *testing.T) {
	t.Parallel()
	// /r/N redirects to /r/N-1 ... /r/0 answers 204.
	var base string
	srv, hits := counting(t, func(w http.ResponseWriter, r *http.Request) {
		switch n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/r/")); {
		case strings.HasPrefix(r.URL.Path, "/to/"):
			http.Redirect(w, r, "http://"+strings.TrimPrefix(r.URL.Path, "/to/"), http.StatusFound)
		case n > 0:
			http.Redirect(w, r, base+"/r/"+strconv.Itoa(n-1), http.StatusFound)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	base = srv.URL
	u, _ := url.Parse(srv.URL)
	h := register(t, testConfig(t)).handler(t, "webhook") // allows 127.0.0.1 only
	run := func(path string) (any, error) {
		return h(t.Context(), newJob("webhook", `{"url":"`+srv.URL+path+`"}`))
	}
	if res, err := run("/r/5"); err != nil || res.(map[string]any)["status"] != 204 {
		t.Fatalf("5 redirects: %v, %v", res, err)
	}
	before := hits.Load()
	if _, err := run("/r/6"); !worker.IsPermanent(err) || !errors.Is(err, errRedirectRefused) {
		t.Fatalf("6 redirects: %v, want a permanent redirect error", err)
	}
	if got := hits.Load() - before; got != 6 {
		t.Errorf("6 redirects: %d requests, want 6 (the 7th is not sent)", got)
	}
	for _, target := range []string{"169.254.169.254/latest/meta-data/", "10.0.0.1:6379/", "127.0.0.2:" + u.Port() + "/"} {
		_, err := run("/to/" + target)
		var be *BlockedAddressError
		if !worker.IsPermanent(err) || !errors.As(err, &be) {
			t.Errorf("redirect to %s: %v, want a permanent BlockedAddressError", target, err)
		}
	}
}

// TestNetworkTaskNotGuarded: network_task targets the operator's NetworkURL
// (the local submitter by default), not user input, so the guard does not
// apply to it.
func TestNetworkTaskNotGuarded(t *testing.T) {
	t.Parallel()
	srv, hits := counting(t, nil)
	cfg := testConfig(t)
	cfg.WebhookAllow = nil
	cfg.NetworkURL = srv.URL + "/healthz"
	cfg.NetworkRequests = 1
	if _, err := register(t, cfg).handler(t, "network_task")(t.Context(), newJob("network_task", `"x"`)); err != nil {
		t.Fatal(err)
	}
	if hits.Load() != 1 {
		t.Errorf("%d requests, want 1", hits.Load())
	}
}
