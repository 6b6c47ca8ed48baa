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
