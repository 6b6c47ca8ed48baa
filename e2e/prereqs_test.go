package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestPrereqs runs deploy/local/prereqs.sh, the one list of what `make up`,
// `make test` and CI install, on a machine made to lack things: a PATH, a
// PostgreSQL directory and an sbin directory (DTS_SBIN, where Debian puts
// pgbouncer, ip and iptables) that hold only what the case provides. The real
// install runs in CI on a clean machine (.ci/run); here the dry run and the
// refusal without root are checked.
func TestPrereqs(t *testing.T) {
	t.Parallel()
	script := filepath.Join(repoRoot(t), "deploy", "local", "prereqs.sh")
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}

	var runEnv func(t *testing.T, path, pgLib, sbin string, env []string, args ...string) (string, error)
	// fakeBin makes a PATH directory holding executables with these names.
	fakeBin := func(t *testing.T, names ...string) string {
		dir := t.TempDir()
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	// fakePG makes a directory laid out as Debian's /usr/lib/postgresql.
	fakePG := func(t *testing.T) string {
		dir := t.TempDir()
		bin := filepath.Join(dir, "16", "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"initdb", "pg_ctl"} {
			if err := os.WriteFile(filepath.Join(bin, n), nil, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	run := func(t *testing.T, path, pgLib, sbin string, args ...string) (string, error) {
		return runEnv(t, path, pgLib, sbin, nil, args...)
	}
	runEnv = func(t *testing.T, path, pgLib, sbin string, env []string, args ...string) (string, error) {
		cmd := exec.Command(bash, append([]string{script}, args...)...)
		cmd.Env = append([]string{"PATH=" + path, "DTS_PG_LIB=" + pgLib, "DTS_SBIN=" + sbin,
			"DTS_PYTHON=" + filepath.Join(path, "python3")}, env...) // a python3 in the case's PATH has redis
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	all := []string{"redis-server", "redis-sentinel", "prometheus", "promtool", "pgbouncer", "curl", "gcc", "pgrep", "chromium", "ip", "iptables", "python3", "node", "npm", "make"}
	allButPgbouncer := []string{"redis-server", "redis-sentinel", "prometheus", "promtool", "curl", "gcc", "pgrep", "chromium", "ip", "iptables", "python3", "node", "npm", "make"}
	for _, tc := range []struct {
		name, profile string
		have          []string
		pg            bool
		sbin          []string // in DTS_SBIN, off PATH
		missing       string   // the exact list it must name; "" for none
	}{
		{"test, nothing installed", "test", nil, false, nil, "postgresql redis-server prometheus curl redis-sentinel pgbouncer gcc procps chromium iproute2 iptables python3-redis nodejs npm"},
		{"ci, nothing installed", "ci", nil, false, nil, "postgresql redis-server prometheus curl redis-sentinel pgbouncer gcc procps chromium iproute2 iptables python3-redis nodejs npm make"},
		{"up, nothing installed", "up", nil, false, nil, "postgresql redis-server prometheus curl"},
		{"up with external stores", "up-external", nil, false, nil, "prometheus curl"},
		{"test, only promtool missing", "test", []string{"redis-server", "redis-sentinel", "prometheus", "pgbouncer", "curl", "gcc", "pgrep", "chromium", "ip", "iptables", "python3", "node", "npm"}, true, nil, "prometheus"},
		{"ci, only pgbouncer missing", "ci", allButPgbouncer, true, nil, "pgbouncer"},
		{"up, only postgresql missing", "up", []string{"redis-server", "prometheus", "curl"}, false, nil, "postgresql"},
		{"ci, everything there", "ci", all, true, nil, ""},
		{"ci, pgbouncer in sbin only", "ci", allButPgbouncer, true, []string{"pgbouncer"}, ""},
		{"test, iptables in sbin only", "test", slices.DeleteFunc(slices.Clone(all), func(n string) bool { return n == "iptables" }), true, []string{"iptables"}, ""},
		{"test, only the SDKs' tools missing", "test", all[:len(all)-4], true, nil, "python3-redis nodejs npm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pgLib := t.TempDir()
			if tc.pg {
				pgLib = fakePG(t)
			}
			out, err := run(t, fakeBin(t, tc.have...), pgLib, fakeBin(t, tc.sbin...), "--dry-run", tc.profile)
			if err != nil {
				t.Fatalf("prereqs.sh --dry-run %s: %v\n%s", tc.profile, err, out)
			}
			if tc.missing == "" {
				if !strings.Contains(out, "all present") {
					t.Errorf("with everything installed it says:\n%s", out)
				}
				return
			}
			if want := "missing " + tc.missing + "\n"; !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
			if want := "apt-get install -y --no-install-recommends " + tc.missing + "\n"; !strings.Contains(out, want) {
				t.Errorf("the dry run does not show the install command %q:\n%s", want, out)
			}
		})
	}

	t.Run("up with Python workers needs python3-redis", func(t *testing.T) {
		have := fakeBin(t, "redis-server", "prometheus", "curl")
		out, err := runEnv(t, have, fakePG(t), t.TempDir(), []string{"PY_WORKERS=1"}, "--dry-run", "up")
		if err != nil || !strings.Contains(out, "missing python3-redis\n") {
			t.Errorf("PY_WORKERS=1 make up without python3-redis: %v\n%s", err, out)
		}
		out, err = runEnv(t, have, fakePG(t), t.TempDir(), []string{"PY_WORKERS=0"}, "--dry-run", "up")
		if err != nil || !strings.Contains(out, "all present") {
			t.Errorf("make up without Python workers asks for more: %v\n%s", err, out)
		}
	})

	t.Run("not root: stops with the command to run", func(t *testing.T) {
		// As root, run the script as nobody (fed on stdin: nobody may not
		// be able to read this checkout), with a PATH directory nobody can
		// read (t.TempDir's parent is private).
		dir, err := os.MkdirTemp("", "dts-prereqs-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "apt-get"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		var cmd *exec.Cmd
		if os.Geteuid() == 0 {
			runuser, err := exec.LookPath("runuser")
			if err != nil {
				t.Fatal("running as root needs runuser (util-linux) to test the non-root path")
			}
			cmd = exec.Command(runuser, "-u", "nobody", "--", bash, "-s", "--", "up")
			f, err := os.Open(script)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cmd.Stdin = f
		} else {
			cmd = exec.Command(bash, script, "up")
		}
		cmd.Env = []string{"PATH=" + dir, "DTS_PG_LIB=" + dir, "DTS_SBIN=" + dir}
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("without root it went on:\n%s", out)
		}
		want := "sudo sh -c 'apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql redis-server prometheus curl'"
		if !strings.Contains(string(out), want) {
			t.Errorf("it does not print the exact command %q:\n%s", want, out)
		}
	})
}
