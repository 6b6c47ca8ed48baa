package ui_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The console sits on the submitter's service, in its own types: it never
// reaches PostgreSQL or Redis itself, not even through a type.
func TestConsoleImportsNoStore(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/dtsched/dts/internal/store", "github.com/dtsched/dts/internal/queue",
			"github.com/jackc/pgx", "github.com/redis/go-redis"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("submitter/ui depends on %s", dep)
			}
		}
	}
}
