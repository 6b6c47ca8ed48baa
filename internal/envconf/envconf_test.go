package envconf

import (
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

func TestEnvParsesAndCollectsErrors(t *testing.T) {
	t.Setenv("EC_STR", "x")
	t.Setenv("EC_EMPTY", "")
	t.Setenv("EC_INT", "42")
	t.Setenv("EC_BADINT", "4x")
	t.Setenv("EC_DUR", "250ms")
	t.Setenv("EC_BADDUR", "5")
	t.Setenv("EC_BOOL", "true")
	t.Setenv("EC_FLOAT", "0.25")
	var e Env
	if got := e.String("EC_STR", "d"); got != "x" {
		t.Errorf("String = %q", got)
	}
	if got := e.String("EC_EMPTY", "d"); got != "d" {
		t.Errorf("String of an empty variable = %q, want the default", got)
	}
	if got := e.Int("EC_INT", 1); got != 42 {
		t.Errorf("Int = %d", got)
	}
	if got := e.Int("EC_BADINT", 7); got != 7 {
		t.Errorf("Int of a bad value = %d, want the default", got)
	}
	if got := e.Duration("EC_DUR", time.Second); got != 250*time.Millisecond {
		t.Errorf("Duration = %v", got)
	}
	e.Duration("EC_BADDUR", time.Second)
	if got := e.Bool("EC_BOOL", false); !got {
		t.Error("Bool = false")
	}
	if got := e.Float("EC_FLOAT", 1); got != 0.25 {
		t.Errorf("Float = %v", got)
	}
	if got := e.Int("EC_UNSET_FOR_SURE", 9); got != 9 {
		t.Errorf("Int of an unset variable = %d", got)
	}
	err := e.Err()
	if err == nil || !strings.Contains(err.Error(), "EC_BADINT") || !strings.Contains(err.Error(), "EC_BADDUR") {
		t.Fatalf("Err = %v, want both bad variables named", err)
	}
}

func TestNewLoggerRejectsUnknownLevel(t *testing.T) {
	if _, err := NewLogger("loud"); err == nil {
		t.Fatal("NewLogger(loud) succeeded")
	}
	if _, err := NewLogger(""); err != nil {
		t.Fatal(err)
	}
}

// TestSetGOGC: the binaries' target applies unless GOGC is set, and GOGC
// wins when it is.
func TestSetGOGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	t.Setenv("GOGC", "")
	if got := SetGOGC(ServiceGOGC); got != ServiceGOGC {
		t.Errorf("SetGOGC with GOGC unset = %d, want %d", got, ServiceGOGC)
	}
	if got := debug.SetGCPercent(-1); got != ServiceGOGC {
		t.Errorf("collector target = %d, want %d", got, ServiceGOGC)
	}
	debug.SetGCPercent(150) // as the runtime would have read GOGC=150
	t.Setenv("GOGC", "150")
	if got := SetGOGC(ServiceGOGC); got != 150 {
		t.Errorf("SetGOGC with GOGC=150 = %d, want 150", got)
	}
	if got := debug.SetGCPercent(-1); got != 150 {
		t.Errorf("collector target = %d, want GOGC's 150", got)
	}
}

func TestHostPorts(t *testing.T) {
	t.Parallel()
	got, err := HostPorts("REDIS_SENTINEL_ADDRS", " 127.0.0.1:26379, s2:26380,,")
	if err != nil || len(got) != 2 || got[0] != "127.0.0.1:26379" || got[1] != "s2:26380" {
		t.Errorf("HostPorts = %q, %v", got, err)
	}
	if got, err := HostPorts("REDIS_SENTINEL_ADDRS", ""); got != nil || err != nil {
		t.Errorf("HostPorts of empty = %q, %v; want nil, nil", got, err)
	}
	for _, bad := range []string{"127.0.0.1", "127.0.0.1:26379,s2", "s1:port", "s1:70000"} {
		_, err := HostPorts("REDIS_SENTINEL_ADDRS", bad)
		if err == nil || !strings.HasPrefix(err.Error(), "REDIS_SENTINEL_ADDRS=") {
			t.Errorf("HostPorts(%q) = %v, want an error naming REDIS_SENTINEL_ADDRS", bad, err)
		}
	}
}
