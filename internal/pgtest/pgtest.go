// Package pgtest gives tests a real PostgreSQL: one throwaway server per test
// binary, started from the system binaries, and one freshly migrated database
// per test.
//
// Why it is shaped this way: mocks of PostgreSQL hide exactly the behaviour the
// scheduler depends on (row locks, SKIP LOCKED, transactional state changes),
// and one server per test is far too slow. So the first call to NewDatabase
// (or URL) starts a single server in a temporary directory (on /dev/shm
// when it has room: tempBase) on a free 127.0.0.1 port with durability
// switched off (fsync, synchronous_commit and full_page_writes are off),
// creates the database template_dts and applies store.Migrate to it once.
// Every test then gets its own database cloned from that template (CREATE
// DATABASE … TEMPLATE, about 15 ms on tmpfs), so tests that use it can call
// t.Parallel and never see each other's rows.
//
// Usage, in a package whose tests need PostgreSQL:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		t.Parallel()
//		pool, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
//		...
//	}
//
// A test binary has only one TestMain, so a package that needs both
// PostgreSQL and Redis calls the two Cleanup functions itself:
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		pgtest.Cleanup()
//		redistest.Cleanup()
//		os.Exit(code)
//	}
//
// What must stay true:
//   - The server never outlives the test binary. Cleanup stops it (SIGQUIT,
//     then SIGKILL) and removes the directory; if the binary dies without
//     running Cleanup (panic, -timeout, kill -9) the kernel kills the
//     postmaster (Pdeathsig), its backends exit on postmaster death, and the
//     next test binary that starts a server removes the leftover directory.
//   - As root, initdb and postgres run as the OS user "postgres" (PostgreSQL
//     refuses to run as root); as any other user they run as that user.
//   - CREATE DATABASE calls are serialised: PostgreSQL refuses to copy a
//     template that another CREATE DATABASE is reading.
//   - Only _test.go files import this package.
//
// While the server runs, one goroutine,
// github.com/dtsched/dts/internal/childproc.(*Process).supervise, waits for the
// postmaster (goleak: ignore it with IgnoreAnyFunction); after Cleanup, none
// is left.
//
// StartPair (pair.go) starts a primary and a streaming standby of a test's
// own, which it may kill, freeze, cut off (in a network namespace) and
// promote, for failover tests.
//
// StartNode (node.go) starts a server of a test's own on the address and
// in the network namespace the test gives, e.g. a host of a netns.Network.
//
// StartPgBouncer (pgbouncer.go) puts a pgbouncer in transaction mode in
// front of one test's database, for tests of what must work through a
// pooler.
//
// Every cluster (the shared server, a Pair's primary, a Node) starts as a
// copy of one initdb made once per set of binaries and kept in the user's
// cache directory (initdb.go): initdb itself takes seconds.
//
// The binaries are found with $PG_BINDIR, then `pg_config --bindir`, then the
// newest /usr/lib/postgresql/*/bin, then $PATH.
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/childproc"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/dtsched/dts/internal/store"
)

// TemplateDatabase is the migrated database every test database is cloned
// from. Nothing may stay connected to it, so it is created with
// ALLOW_CONNECTIONS false once migrated.
const TemplateDatabase = "template_dts"

const (
	dirPrefix     = "dts-pgtest-"
	ownerFile     = "owner.pid"
	netnsFileName = "netns" // a Pair node's network namespace, if it has one
	startTimeout  = 60 * time.Second
	stopTimeout   = 10 * time.Second
)

var (
	mu       sync.Mutex // guards srv, startErr, cleaned
	srv      *server
	startErr error
	cleaned  bool

	dbSeq atomic.Int64
)

// server is the one PostgreSQL of this test binary.
type server struct {
	dir     string // temporary directory: data/, socket, log; removed by stop
	port    int
	proc    *childproc.Process // the postmaster; nil when not running
	logPath string

	adminMu sync.Mutex // serialises statements on admin
	admin   *pgx.Conn  // connected to the "postgres" database

	// strategy ends CREATE DATABASE: " STRATEGY FILE_COPY" on PostgreSQL
	// 15 and later, whose default, WAL_LOG, copies the template through
	// shared buffers into the WAL (8 MB a database); FILE_COPY copies its
	// files at the cost of two checkpoints, cheap with fsync off, and was
	// the only way before 15. Tests' CREATE and DROP DATABASE took 2-3
	// times as long with WAL_LOG, serialised.
	strategy string
}

// IgnoreAsyncCancel is the goleak option for the goroutine pgx starts to
// cancel on the server a query whose context ended
// (pgconn.(*PgConn).asyncClose): it dials the server with a bound of its own
// (15 s), so after a test that froze (Pause) or cut off a server it may
// still be dialling when the tests end. Pass it to Main in packages whose
// tests do that.
var IgnoreAsyncCancel = goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgconn.(*PgConn).asyncClose.func1")

// Main is a TestMain for packages that need only PostgreSQL: it runs the
// tests, stops the server if one was started, and exits with the tests'
// status; if they passed but left a goroutine running (goleak, ignoring
// what opts name), it prints it and exits 1. The check comes after Cleanup,
// so the server's supervising goroutine needs no ignore.
func Main(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	Cleanup()
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left after the tests passed: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Cleanup stops the server started by NewDatabase or URL, if any, and removes
// its directory. It is idempotent; after it, NewDatabase fails the test.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	cleaned = true
	if srv != nil {
		srv.stop()
		srv = nil
	}
}

// NewDatabase creates a database for this test only, cloned from the migrated
// template, and returns its URL (postgres://postgres@127.0.0.1:PORT/NAME
// ?sslmode=disable). The database is dropped WITH (FORCE) when the test and
// its subtests finish; close pools first or let the drop end their sessions.
// It starts the server on first use and fails the test if it cannot.
func NewDatabase(t testing.TB) string {
	t.Helper()
	s, err := get()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	name := databaseName(t.Name(), dbSeq.Add(1))
	ident := pgx.Identifier{name}.Sanitize()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.createDatabase(ctx, ident); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.adminExec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			t.Logf("pgtest: drop database %s: %v", name, err)
		}
	})
	return s.url(name)
}

// URL returns the URL of database dbname on the shared server, starting the
// server if needed. It panics if the server cannot start; tests should prefer
// NewDatabase, which fails the test instead.
func URL(dbname string) string {
	s, err := get()
	if err != nil {
		panic("pgtest: " + err.Error())
	}
	return s.url(dbname)
}

func (s *server) url(dbname string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, dbname)
}

// adminExec runs one statement on the admin connection. Statements are
// serialised, which is also what CREATE DATABASE … TEMPLATE needs:
// PostgreSQL refuses to copy a template another CREATE DATABASE is reading.
func (s *server) adminExec(ctx context.Context, sql string) error {
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	if s.admin == nil {
		return errors.New("server stopped")
	}
	_, err := s.admin.Exec(ctx, sql)
	return err
}

func (s *server) createDatabase(ctx context.Context, ident string) error {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		err = s.adminExec(ctx, "CREATE DATABASE "+ident+" TEMPLATE "+TemplateDatabase+s.strategy)
		var pgErr *pgconn.PgError
		// 55006 object_in_use: something is still connected to the template.
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// databaseName is "t<seq>_<test name>", lower case, at most 63 bytes, so a
// leftover database can be traced to its test.
func databaseName(testName string, seq int64) string {
	name := fmt.Sprintf("t%d_%s", seq, nonIdent.ReplaceAllString(strings.ToLower(testName), "_"))
	if len(name) > 63 {
		name = name[:63]
	}
	return strings.TrimRight(name, "_")
}

// get returns the running server, starting it on first use.
func get() (*server, error) {
	mu.Lock()
	defer mu.Unlock()
	if cleaned {
		return nil, errors.New("server already stopped by Cleanup")
	}
	if srv == nil && startErr == nil {
		srv, startErr = start()
	}
	return srv, startErr
}

func start() (s *server, err error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		if cred, err = postgresCredential(); err != nil {
			return nil, err
		}
	}
	base := tempBase(cred)
	removeStale(base, dirPrefix)

	dir, err := os.MkdirTemp(base, dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("make temp dir: %w", err)
	}
	s = &server{dir: dir, logPath: filepath.Join(dir, "postgres.log")}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return s, fmt.Errorf("write owner file: %w", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return s, fmt.Errorf("chown %s to postgres: %w", dir, err)
		}
	}

	dataDir := filepath.Join(dir, "data")
	if err := initCluster(bin, dir, dataDir, cred); err != nil {
		return s, err
	}

	// The port is free when chosen but may be taken before postgres binds
	// it (other test binaries do the same); then try another.
	for attempt := 1; ; attempt++ {
		port, err := childproc.FreePort()
		if err != nil {
			return s, err
		}
		err = s.run(bin, dataDir, port, cred)
		if err == nil {
			break
		}
		if !errors.Is(err, errPortTaken) || attempt == 5 {
			return s, err
		}
	}

	version := s.admin.PgConn().ParameterStatus("server_version") // "15.18 (Debian ...)"
	if major, err := strconv.Atoi(strings.SplitN(version, ".", 2)[0]); err == nil && major >= 15 {
		s.strategy = " STRATEGY FILE_COPY"
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := s.prepareTemplate(ctx); err != nil {
		return s, err
	}
	return s, nil
}

var errPortTaken = errors.New("port taken")

// run starts the postmaster on port and waits until it accepts connections.
func (s *server) run(bin, dataDir string, port int, cred *syscall.Credential) error {
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	defer logFile.Close()
	cmd := exec.Command(filepath.Join(bin, "postgres"),
		"-D", dataDir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "port="+strconv.Itoa(port),
		"-c", "unix_socket_directories="+s.dir,
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=300",
		"-c", "shared_buffers=64MB",
		"-c", "autovacuum=off",
		"-c", "wal_level=minimal",
		"-c", "max_wal_senders=0",
		"-c", "max_wal_size=1GB",
		"-c", "checkpoint_timeout=1h",
		// Segments in the data directory, which stop removes: the
		// default (posix) leaves them in /dev/shm when the server is
		// killed, as the failover tests and stop's last resort do.
		"-c", "dynamic_shared_memory_type=mmap",
	)
	cmd.Dir = s.dir
	cmd.Env = childEnv()
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	proc, err := childproc.Start(cmd)
	if err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	s.proc, s.port = proc, port

	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, s.url("postgres"))
		cancel()
		if err == nil {
			s.admin = conn
			return nil
		}
		select {
		case <-proc.Exited():
			log := s.logTail()
			s.proc = nil
			if strings.Contains(log, "could not bind") || strings.Contains(log, "could not create any TCP/IP sockets") {
				return fmt.Errorf("%w: %d", errPortTaken, port)
			}
			return fmt.Errorf("postgres exited during start-up: %s\n%s", cmd.ProcessState, log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres not ready after %s: %v\n%s", startTimeout, err, s.logTail())
		}
	}
}

// prepareTemplate creates and migrates template_dts, then closes every
// connection to it so it can be cloned.
func (s *server) prepareTemplate(ctx context.Context) error {
	if err := s.adminExec(ctx, "CREATE DATABASE "+TemplateDatabase); err != nil {
		return fmt.Errorf("create %s: %w", TemplateDatabase, err)
	}
	pool, err := pgxpool.New(ctx, s.url(TemplateDatabase))
	if err != nil {
		return fmt.Errorf("connect %s: %w", TemplateDatabase, err)
	}
	err = store.Migrate(ctx, pool)
	pool.Close()
	if err != nil {
		return fmt.Errorf("migrate %s: %w", TemplateDatabase, err)
	}
	if err := s.adminExec(ctx, "ALTER DATABASE "+TemplateDatabase+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"); err != nil {
		return fmt.Errorf("seal %s: %w", TemplateDatabase, err)
	}
	return nil
}

// stop shuts the postmaster down immediately (SIGQUIT; SIGKILL to its process
// group if it lingers) and removes the directory. Safe on a half-started
// server.
func (s *server) stop() {
	s.adminMu.Lock()
	if s.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = s.admin.Close(ctx)
		cancel()
		s.admin = nil
	}
	s.adminMu.Unlock()
	if s.proc != nil {
		pid := s.proc.Cmd.Process.Pid
		_ = syscall.Kill(pid, syscall.SIGQUIT)
		select {
		case <-s.proc.Exited():
		case <-time.After(stopTimeout):
			// Backends share the postmaster's process group.
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			<-s.proc.Exited()
		}
		s.proc = nil
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
		s.dir = ""
	}
}

// logTail returns the end of the server log, for error messages.
func (s *server) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(bytes.TrimSpace(b))
}

// binDir finds the directory holding initdb and postgres.
func binDir() (string, error) {
	ok := func(dir string) bool {
		for _, name := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	if dir := os.Getenv("PG_BINDIR"); dir != "" {
		if ok(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("PG_BINDIR=%s holds no initdb and postgres", dir)
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); ok(dir) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, dir := range dirs {
		if ok(dir) {
			return dir, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if dir := filepath.Dir(p); ok(dir) {
			return dir, nil
		}
	}
	return "", errors.New("PostgreSQL server binaries (initdb, postgres) not found: install them " +
		"(Debian: apt-get install -y postgresql) or set PG_BINDIR")
}

func versionOf(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

// postgresCredential is the OS user postgres runs as when tests run as root.
func postgresCredential() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, PostgreSQL must run as the OS user \"postgres\", "+
			"which does not exist (installing the Debian postgresql package creates it): %w", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// tempBase is where the server directory goes: ramDisk when there is one
// with room, else os.TempDir, unless postgres (when we are root) cannot
// reach it, then /tmp.
//
// Why a RAM disk: every test's CREATE DATABASE creates some 300 files and
// its DROP deletes them, and on ext4 creating a file after many deletes
// makes the inode allocator scan the recently deleted ones: 110–135 ms of
// kernel time per CREATE DATABASE on ext4 against 10–13 ms on tmpfs, most
// of the store package's tests' CPU. Nothing here needs to survive a
// crash (fsync is off anyway).
func tempBase(cred *syscall.Credential) string {
	if ramDiskRoom(ramDisk) >= ramDiskMinFree {
		return ramDisk
	}
	base := os.TempDir()
	if cred == nil {
		return base
	}
	for dir := base; ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return "/tmp"
		}
		if dir == filepath.Dir(dir) {
			return base
		}
	}
}

// ramDisk is the tmpfs Linux mounts for POSIX shared memory, world-writable
// with the sticky bit like /tmp.
const ramDisk = "/dev/shm"

// ramDiskMinFree is the room ramDisk must have for the servers to use it:
// a test binary's databases take some hundreds of MB at most (the console's
// tests fill a million jobs), and two test binaries run at once. A machine
// with less (a container's 64 MB /dev/shm) uses os.TempDir.
const ramDiskMinFree = 4 << 30

// ramDiskRoom returns the bytes free on dir if it is a writable tmpfs, else 0.
func ramDiskRoom(dir string) uint64 {
	const tmpfsMagic = 0x01021994
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil || fs.Type != tmpfsMagic {
		return 0
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm()&0o003 != 0o003 {
		return 0
	}
	return fs.Bavail * uint64(fs.Bsize)
}

// removeStale deletes the directories named prefix* left by test binaries
// that died without Cleanup, killing a postmaster that somehow survived its
// owner.
func removeStale(base, prefix string) {
	dirs, _ := filepath.Glob(filepath.Join(base, prefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // being created right now, or not ours
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || childproc.Alive(owner) {
			continue
		}
		if pm, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.SplitN(string(pm), "\n", 2)[0]); err == nil && pid > 0 {
				if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil &&
					bytes.Contains(cmdline, []byte(dir)) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		// Backends left stopped by a Pair's Pause never see their
		// postmaster die; they run in the data directory.
		for _, pid := range runningIn(filepath.Join(dir, "data")) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if ns, err := os.ReadFile(filepath.Join(dir, netnsFileName)); err == nil && len(ns) > 0 {
			_ = exec.Command("ip", "netns", "del", string(ns)).Run()
		}
		_ = os.RemoveAll(dir)
	}
}

// runningIn lists the processes whose working directory is dir.
func runningIn(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd")); err == nil && cwd == dir {
			pids = append(pids, pid)
		}
	}
	return pids
}

// childEnv is the environment for initdb and postgres: ours without the
// libpq variables that could point them elsewhere, in the C locale.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}
