package coordinator

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/config"
	"github.com/dtsched/dts/internal/job"
)

// TestConfigDefaults: a zero Config takes the Default constants.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := Config{}.WithDefaults()
	want := Config{ID: c.ID,
		HeartbeatInterval: DefaultHeartbeatInterval, HeartbeatMisses: DefaultHeartbeatMisses,
		LeaseDuration: DefaultLeaseDuration, Backoff: job.DefaultBackoff, PollInterval: DefaultPollInterval,
		ClaimBatch: DefaultClaimBatch, ClaimBytes: DefaultClaimBytes, ResultBatch: DefaultResultBatch, ElectionInterval: DefaultElectionInterval,
		LeaderTTL:          DefaultLeaderTTLIntervals * DefaultElectionInterval,
		RetentionCompleted: DefaultRetentionCompleted, RetentionFailed: DefaultRetentionFailed,
		CleanupInterval: DefaultCleanupInterval, DeadMirrorInterval: DefaultDeadMirrorInterval,
		ScheduleGrace: DefaultScheduleGrace, ShutdownTimeout: DefaultShutdownTimeout}
	// A zero Jitter is a choice (no jitter), kept as it is.
	want.Backoff.Jitter = 0
	if c.ID == "" || !reflect.DeepEqual(c, want) {
		t.Errorf("Config{}.WithDefaults() = %+v\nwant %+v", c, want)
	}
	c.DatabaseURL, c.RedisURL = "postgres://x", "redis://x"
	if err := c.validate(); err != nil {
		t.Errorf("the defaults do not validate: %v", err)
	}
}

// TestConfigValidateNamesEveryBadField: validate reports all bad fields
// at once, each by name.
func TestConfigValidateNamesEveryBadField(t *testing.T) {
	t.Parallel()
	c := Config{RedisURL: "redis://x", HeartbeatInterval: time.Second, LeaseDuration: time.Second,
		ElectionInterval: time.Second, LeaderTTL: time.Second, ScheduleGrace: time.Second,
		RedisSentinelAddrs: []string{"127.0.0.1:26379", "sentinel-2"}, RedisSentinelMaster: "dts"}.WithDefaults()
	err := c.validate()
	if got, want := config.Fields(err), []string{"DatabaseURL", "RedisSentinelAddrs", "LeaseDuration", "LeaderTTL", "ScheduleGrace"}; !slices.Equal(got, want) {
		t.Fatalf("bad fields %v, want %v (error: %v)", got, want, err)
	}
	if msg := "config: LeaseDuration (1s) must be at least twice HeartbeatInterval (1s)"; !strings.Contains(err.Error(), msg) {
		t.Errorf("error %q does not say %q", err, msg)
	}
}
