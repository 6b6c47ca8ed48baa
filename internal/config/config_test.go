package config

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestCheckNamesEveryBadField(t *testing.T) {
	t.Parallel()
	var c Check
	if err := c.Err(); err != nil {
		t.Fatalf("no bad field: %v, want nil", err)
	}
	c.Bad("RedisURL", "is required")
	c.Bad("LeaseDuration", "(%v) must be at least twice HeartbeatInterval (%v)", "1s", "1s")
	err := c.Err()
	want := "config: RedisURL is required\nconfig: LeaseDuration (1s) must be at least twice HeartbeatInterval (1s)"
	if err == nil || err.Error() != want {
		t.Fatalf("Err() = %v, want %q", err, want)
	}
	if got := Fields(fmt.Errorf("start: %w", err)); !slices.Equal(got, []string{"RedisURL", "LeaseDuration"}) {
		t.Errorf("Fields = %v", got)
	}
	if got := Fields(nil); got != nil {
		t.Errorf("Fields(nil) = %v", got)
	}
	if !strings.HasPrefix(err.Error(), "config: ") {
		t.Errorf("message does not start with config: %q", err)
	}
}

func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		addrs  []string
		master string
		want   []string // bad fields
	}{
		{"off", nil, "", nil},
		{"on", []string{"127.0.0.1:26379", "[::1]:26380", "sentinel-3:26379"}, "dts", nil},
		{"missing port", []string{"127.0.0.1"}, "dts", []string{"RedisSentinelAddrs"}},
		{"port zero", []string{"127.0.0.1:0"}, "dts", []string{"RedisSentinelAddrs"}},
		{"port not a number", []string{"h:sentinel"}, "dts", []string{"RedisSentinelAddrs"}},
		{"no host", []string{":26379"}, "dts", []string{"RedisSentinelAddrs"}},
		{"no master", []string{"127.0.0.1:26379"}, "", []string{"RedisSentinelMaster"}},
		{"master without addresses", nil, "dts", []string{"RedisSentinelAddrs"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c Check
			c.RedisSentinel(tc.addrs, tc.master)
			if got := Fields(c.Err()); !slices.Equal(got, tc.want) {
				t.Errorf("bad fields %v (%v), want %v", got, c.Err(), tc.want)
			}
		})
	}
}
