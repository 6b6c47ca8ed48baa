package store

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// Every embedded migration matches its line in migrations/checksums.txt,
// and every line has its file: an edit to a released migration fails the
// tests, though the tests' databases are fresh and Migrate would apply the
// edited file to them without complaint.
func TestMigrationChecksumsRecorded(t *testing.T) {
	t.Parallel()
	f, err := os.Open("migrations/checksums.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[string]string{} // file → checksum
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sum, file, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != 64 {
			t.Fatalf("migrations/checksums.txt:%d: %q is not a sha256sum line (<hex>  <file>)", n, line)
		}
		if _, dup := listed[file]; dup {
			t.Errorf("migrations/checksums.txt:%d: %s is listed twice", n, file)
		}
		listed[file] = sum
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	ms, err := migrations(migrationFS)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		sum, ok := listed[m.file]
		switch {
		case !ok:
			t.Errorf("migration %s is not in migrations/checksums.txt; a new migration appends its line:\n"+
				"\tcd internal/store/migrations && sha256sum %s >> checksums.txt", m.file, m.file)
		case sum != m.checksum:
			t.Errorf("migration %s was edited after its release (sha256 %s, checksums.txt has %s): "+
				"databases that applied it would refuse to start; restore it and add a new migration instead", m.file, m.checksum, sum)
		}
		delete(listed, m.file)
	}
	for file := range listed {
		t.Errorf("migrations/checksums.txt lists %s, which does not exist: released migrations are never removed", file)
	}
}
