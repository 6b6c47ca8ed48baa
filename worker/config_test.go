package worker

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dtsched/dts/internal/config"
	"github.com/dtsched/dts/internal/wire"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := Config{}.WithDefaults()
	want := Config{ID: c.ID, Concurrency: DefaultConcurrency, HeartbeatInterval: DefaultHeartbeatInterval,
		ShutdownGrace: DefaultShutdownGrace}
	if c.ID == "" || !reflect.DeepEqual(c, want) {
		t.Errorf("Config{}.WithDefaults() = %+v\nwant %+v", c, want)
	}
	c.RedisURL = "redis://x"
	if err := c.validate(); err != nil {
		t.Errorf("the defaults do not validate: %v", err)
	}
	set := Config{ID: "w1", Concurrency: 3, HeartbeatInterval: 1, ShutdownGrace: 2}
	if got := set.WithDefaults(); !reflect.DeepEqual(got, set) {
		t.Errorf("WithDefaults changed set fields: %+v, want %+v", got, set)
	}
}

func TestConfigValidateNamesEveryBadField(t *testing.T) {
	t.Parallel()
	c := Config{ID: strings.Repeat("w", maxIDLen+1), Concurrency: maxConcurrency + 1,
		Queues: []QueueWeight{{Name: "a", Weight: wire.MaxQueueWeight + 1}}, RedisSentinelAddrs: []string{"127.0.0.1"}}.WithDefaults()
	err := c.validate()
	if got, want := config.Fields(err), []string{"RedisURL", "RedisSentinelAddrs", "RedisSentinelMaster", "ID", "Concurrency", "Queues"}; !slices.Equal(got, want) {
		t.Fatalf("bad fields %v, want %v (error: %v)", got, want, err)
	}
	if msg := "config: Concurrency (100001) is above 100000"; !strings.Contains(err.Error(), msg) {
		t.Errorf("error %q does not say %q", err, msg)
	}
}
