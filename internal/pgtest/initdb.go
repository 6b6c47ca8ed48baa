package pgtest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/dtsched/dts/internal/childproc"
)

// initdbArgs are the options of every cluster this package makes: no
// fsync (a test's data need not survive a crash), local trust, superuser
// postgres, UTF-8 in the C locale.
var initdbArgs = []string{"--no-sync", "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C"}

// initPrefix begins the names of the kept clusters (keptClusterDir).
const initPrefix = "initdb-"

// initCluster makes dataDir (which must not exist) a new database cluster
// owned by cred, as `initdb initdbArgs -D dataDir` run as cred makes one.
//
// Why it is shaped this way: initdb takes 1.5-2 s on a busy 2-core
// machine, and every test binary that uses PostgreSQL runs it at least
// once (the failover tests once per primary). What it writes depends only
// on the binaries, the options and the user, so the first run's cluster is
// kept, never started, in the user's cache directory (as Go keeps its
// build cache; a temporary directory may be cleaned file by file under
// it) named after those, and later calls copy it (cp -a, a tenth of a
// second).
//
// What must stay true: a kept cluster is complete before anyone can read
// it (each caller copies into a directory of its own, then renames the
// copy into place), and its name changes with anything initdb's output
// depends on: the initdb binary (its path, size and modification time, so
// an upgrade misses), the options and the user. A kept cluster without
// its control file is replaced, never copied. Without a usable cache
// directory it runs initdb every time.
func initCluster(bin, workDir, dataDir string, cred *syscall.Credential) error {
	kept, err := keptClusterDir(bin, cred)
	if err != nil {
		kept = ""
	} else if _, err := os.Stat(filepath.Join(kept, "global", "pg_control")); err == nil {
		if err := exec.Command("cp", "-a", kept, dataDir).Run(); err == nil {
			return nil
		}
		_ = os.RemoveAll(dataDir) // a partial copy: make the cluster afresh
	}
	cmd := exec.Command(filepath.Join(bin, "initdb"), append(append([]string{}, initdbArgs...), "-D", dataDir)...)
	cmd.Dir = workDir
	cmd.Env = childEnv()
	// No Pdeathsig here: it fires when the forking OS thread exits, which Go
	// does at will; initdb is short-lived and ends on its own.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb (%s): %w\n%s", bin, err, out)
	}
	if kept != "" {
		keepCluster(dataDir, kept)
	}
	return nil
}

// keptClusterDir is where the cluster initdb in bin makes for cred is kept.
func keptClusterDir(bin string, cred *syscall.Credential) (string, error) {
	fi, err := os.Stat(filepath.Join(bin, "initdb"))
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%d\n%d\n%s\n", filepath.Join(bin, "initdb"), fi.Size(), fi.ModTime().UnixNano(), strings.Join(initdbArgs, " "))
	if cred != nil {
		fmt.Fprintf(h, "%d:%d\n", cred.Uid, cred.Gid)
	} else {
		fmt.Fprintf(h, "%d:%d\n", os.Geteuid(), os.Getegid())
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "dts-pgtest")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return filepath.Join(dir, initPrefix+hex.EncodeToString(h.Sum(nil))[:16]), nil
}

// keepCluster copies the fresh, never started cluster in dataDir to kept,
// unless another caller got there first. Failing only costs later callers
// an initdb of their own, so errors are dropped.
func keepCluster(dataDir, kept string) {
	base := filepath.Dir(kept)
	removeStaleKept(base)
	if _, err := os.Stat(filepath.Join(kept, "global", "pg_control")); err != nil {
		_ = os.RemoveAll(kept) // damaged, or not there
	}
	// A directory of this call's own, named after this process so that
	// removeStaleKept can tell when it is abandoned.
	tmp, err := os.MkdirTemp(base, initPrefix+"tmp-"+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return
	}
	defer os.RemoveAll(tmp)
	copied := filepath.Join(tmp, "data")
	if err := exec.Command("cp", "-a", dataDir, copied).Run(); err != nil {
		return
	}
	_ = os.Rename(copied, kept) // fails if kept exists: another caller's is as good
}

// removeStaleKept deletes the half-made copies of test binaries that died
// while copying.
func removeStaleKept(base string) {
	tmps, _ := filepath.Glob(filepath.Join(base, initPrefix+"tmp-*"))
	for _, tmp := range tmps {
		pid, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(tmp), initPrefix+"tmp-"), "-")
		if n, err := strconv.Atoi(pid); err == nil && !childproc.Alive(n) {
			_ = os.RemoveAll(tmp)
		}
	}
}
