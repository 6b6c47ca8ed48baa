package submitter_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/config"
	"github.com/dtsched/dts/submitter"
)

// TestConfigDefaults: a zero Config takes the Default constants.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := submitter.Config{}.WithDefaults()
	want := submitter.Config{Addr: submitter.DefaultAddr, MaxBodyBytes: submitter.DefaultMaxBodyBytes,
		MaxBatchBodyBytes: submitter.DefaultMaxBatchBodyBytes, MaxPayloadBytes: submitter.DefaultMaxPayloadBytes,
		ReadHeaderTimeout: submitter.DefaultReadHeaderTimeout, ReadTimeout: submitter.DefaultReadTimeout,
		WriteTimeout: submitter.DefaultWriteTimeout, IdleTimeout: submitter.DefaultIdleTimeout,
		ShutdownTimeout: submitter.DefaultShutdownTimeout, RateLimitRPS: submitter.DefaultRateLimitRPS,
		RateLimitBurst: submitter.DefaultRateLimitBurst, MaxConcurrentRequests: submitter.DefaultMaxConcurrentRequests,
		MaxInflightBodyBytes: submitter.DefaultMaxInflightBodyBytes,
		MaxBacklog:           submitter.DefaultMaxBacklog, BacklogCheckInterval: submitter.DefaultBacklogCheckInterval,
		UIBasePath: submitter.DefaultUIBasePath}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("Config{}.WithDefaults() = %+v\nwant %+v", c, want)
	}
}

// TestConfigValidateNamesEveryBadField: Validate reports all bad fields
// at once, each by name.
func TestConfigValidateNamesEveryBadField(t *testing.T) {
	t.Parallel()
	c := submitter.Config{RedisURL: "redis://x", MaxPayloadBytes: 2, ReadTimeout: -time.Second, UIBasePath: "/jobs/ui"}
	err := c.Validate()
	if got, want := config.Fields(err), []string{"DatabaseURL", "MaxPayloadBytes", "ReadTimeout", "UIBasePath"}; !slices.Equal(got, want) {
		t.Fatalf("bad fields %v, want %v (error: %v)", got, want, err)
	}
	if msg := "config: DatabaseURL is required"; !strings.Contains(err.Error(), msg) {
		t.Errorf("error %q does not say %q", err, msg)
	}
}

// TestConfigUIBasePath: the console's base path is a plain path that
// shadows no API route.
func TestConfigUIBasePath(t *testing.T) {
	t.Parallel()
	for p, ok := range map[string]bool{"/ui": true, "/ops/console": true, "/a.b-c_~": true,
		"ui": false, "/ui/": false, "/": false, "/u i": false, "/jobs": false, "/admin/ui": false, "/ui/../x": false, "/.": false} {
		err := submitter.Config{DatabaseURL: "x", RedisURL: "y", UIBasePath: p}.Validate()
		if (err == nil) != ok {
			t.Errorf("UIBasePath %q: err %v, want ok=%v", p, err, ok)
		}
	}
}

// TestConfigGrafanaURL: GRAFANA_URL is empty or a plain http(s) base URL.
func TestConfigGrafanaURL(t *testing.T) {
	t.Parallel()
	for u, ok := range map[string]bool{"": true, "http://127.0.0.1:3000": true, "https://grafana.example/sub/": true,
		"javascript:alert(1)": false, "ftp://x": false, "http://x/?a=b": false, "http://u:p@x": false, "/grafana": false} {
		err := submitter.Config{DatabaseURL: "x", RedisURL: "y", GrafanaURL: u}.Validate()
		if (err == nil) != ok {
			t.Errorf("GrafanaURL %q: err %v, want ok=%v", u, err, ok)
		}
	}
}
