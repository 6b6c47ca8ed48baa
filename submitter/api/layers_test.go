package api_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The JSON API goes through the application (package app) for everything
// it reads and changes: it imports neither the store nor the queue, nor
// their drivers. (Its dependencies include them, through app.)
func TestAPIImportsNoStore(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := strings.Fields(string(out))
	if len(imports) == 0 {
		t.Fatal("go list named no imports")
	}
	for _, imp := range imports {
		for _, banned := range []string{"github.com/dtsched/dts/internal/store", "github.com/dtsched/dts/internal/queue",
			"github.com/jackc/pgx", "github.com/redis/go-redis"} {
			if strings.HasPrefix(imp, banned) {
				t.Errorf("submitter/api imports %s", imp)
			}
		}
	}
}
