package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// sdkModules are the modules a user's program needs to build against the
// worker library and the client, by directory in this repository. Each must
// be fetchable at the version the others require, with no replace.
var sdkModules = map[string]string{
	"github.com/dtsched/dts/internal": "internal",
	"github.com/dtsched/dts/worker":   "worker",
	"github.com/dtsched/dts/client":   "client",
}

// sdkUserMain is the whole of a user's program: a worker with one handler,
// and a client that submits a job to it and waits for the result.
const sdkUserMain = `package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/dtsched/dts/client"
	"github.com/dtsched/dts/worker"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "sdkuser:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	w, err := worker.New(ctx, worker.Config{ID: "sdk-user", RedisURL: os.Getenv("REDIS_URL"),
		HeartbeatInterval: 200 * time.Millisecond, ShutdownGrace: time.Second}, nil)
	if err != nil {
		return err
	}
	w.Handle("greet", func(ctx context.Context, job *worker.Job) (any, error) {
		return map[string]string{"greeting": "hello, " + job.PayloadString()}, nil
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx, nil) }()

	c, err := client.New(client.Config{BaseURL: os.Getenv("DTS_URL")})
	if err != nil {
		return err
	}
	sub, err := c.Submit(ctx, "greet", "world", client.MaxRetries(0), client.Timeout(10*time.Second))
	if err != nil {
		return err
	}
	var job *client.Job
	job, err = c.Wait(ctx, sub.JobID)
	if err != nil {
		return err
	}
	fmt.Printf("job %s %s by %s: %s\n", job.JobID, job.Status, *job.WorkerID, job.Result)

	_, err = c.Get(ctx, "999999999")
	var apiErr *client.Error
	fmt.Printf("unknown job: not_found=%v status=%d\n", errors.Is(err, client.ErrNotFound), func() int {
		if errors.As(err, &apiErr) {
			return apiErr.Status
		}
		return 0
	}())

	stop()
	return <-done
}
`

// TestSDKFromAnOutsideModule builds a program the way a user would: in its
// own module outside this repository, fetching the worker library and the
// client through a module proxy (a file-based one holding this tree's
// internal, worker and client modules at the version their go.mod files
// require; third-party modules come from the local module cache), with no
// replace and no go.work. The program runs a handler against a real
// cluster, submits a job with the client and prints the result.
func TestSDKFromAnOutsideModule(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the SDK and its dependencies afresh: about a minute on a cold build cache")
	}
	t.Parallel()
	root := repoRoot(t)
	version := sdkVersion(t, root)

	proxy := t.TempDir()
	for path, dir := range sdkModules {
		publishModule(t, proxy, path, version, filepath.Join(root, dir))
	}
	realCache := strings.TrimSpace(goOutput(t, root, nil, "env", "GOMODCACHE"))

	user, modCache := t.TempDir(), filepath.Join(t.TempDir(), "modcache")
	writeFile(t, filepath.Join(user, "go.mod"), "module example.com/sdkuser\n\ngo 1.26.8\n")
	writeFile(t, filepath.Join(user, "main.go"), sdkUserMain)
	env := []string{
		"GOPROXY=file://" + filepath.ToSlash(proxy) + ",file://" + filepath.ToSlash(filepath.Join(realCache, "cache", "download")),
		"GOFLAGS=-mod=mod -modcacherw",
		"GOMODCACHE=" + modCache, // never put this tree's test versions in the real cache
		"GOSUMDB=off", "GONOSUMDB=", "GOPRIVATE=", "GOWORK=off", "GOTOOLCHAIN=local",
	}
	goOutput(t, user, env, "get", "github.com/dtsched/dts/worker@"+version, "github.com/dtsched/dts/client@"+version)
	goOutput(t, user, env, "build", "-trimpath", "-o", "sdkuser", ".")

	// internal's go.mod lists pgx and chi for the servers; the user's build
	// reads those go.mod files but neither downloads nor compiles them.
	for _, dep := range []string{"github.com/jackc", "github.com/go-chi", "github.com/golang-jwt"} {
		if _, err := os.Stat(filepath.Join(modCache, filepath.FromSlash(dep))); err == nil {
			t.Errorf("building the SDK extracted %s into the module cache", dep)
		}
	}
	mf := parseModFile(t, filepath.Join(user, "go.mod"))
	for _, r := range mf.Require {
		if _, ours := sdkModules[r.Mod.Path]; ours && r.Mod.Version != version {
			t.Errorf("the user's go.mod requires %s, want %s", r.Mod, version)
		}
	}

	c := newCluster(t)
	c.startSubmitter()
	c.startCoordinator("c1")
	ctx := ctxT(t, 40*time.Second)
	cmd := exec.CommandContext(ctx, filepath.Join(user, "sdkuser"))
	cmd.Env = []string{"REDIS_URL=" + c.redis.URL(), "DTS_URL=" + c.submitter, "PATH=" + os.Getenv("PATH")}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("sdkuser: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		` completed by sdk-user: {"greeting":"hello, world"}`,
		"unknown job: not_found=true status=404",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// sdkVersion returns the version at which the worker and the client require
// internal, and checks that no module a user fetches has a replace: Go
// ignores a replace in a dependency, so one would only hide a requirement
// that cannot be met.
func sdkVersion(t *testing.T, root string) string {
	t.Helper()
	version := ""
	for path, dir := range sdkModules {
		mf := parseModFile(t, filepath.Join(root, dir, "go.mod"))
		if mf.Module.Mod.Path != path {
			t.Fatalf("%s/go.mod is module %s, want %s", dir, mf.Module.Mod.Path, path)
		}
		if len(mf.Replace) > 0 {
			t.Errorf("%s/go.mod has a replace (%v): a user's build ignores it", dir, mf.Replace[0].Old)
		}
		for _, r := range mf.Require {
			if _, ours := sdkModules[r.Mod.Path]; !ours {
				continue
			}
			if version == "" {
				version = r.Mod.Version
			}
			if r.Mod.Version != version {
				t.Errorf("%s/go.mod requires %s; the SDK modules must share one version, %s", dir, r.Mod, version)
			}
		}
	}
	if version == "" {
		t.Fatal("neither worker nor client requires internal")
	}
	return version
}

// publishModule writes the module in dir to a GOPROXY directory as
// path@version: the list, .info, .mod and .zip files of the module proxy
// protocol (go help goproxy). x/mod/zip makes the zip exactly as the go
// command checks it (the path@version/ prefix, nested modules and VCS
// directories left out, the size limits).
func publishModule(t *testing.T, proxy, path, version, dir string) {
	t.Helper()
	esc, err := module.EscapePath(path)
	if err != nil {
		t.Fatal(err)
	}
	vdir := filepath.Join(proxy, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := json.Marshal(map[string]any{"Version": version, "Time": time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(vdir, "list"), version+"\n")
	writeFile(t, filepath.Join(vdir, version+".info"), string(info))
	writeFile(t, filepath.Join(vdir, version+".mod"), string(gomod))
	f, err := os.Create(filepath.Join(vdir, version+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := modzip.CreateFromDir(f, module.Version{Path: path, Version: version}, dir); err != nil {
		t.Fatalf("zip %s: %v", path, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func parseModFile(t *testing.T, path string) *modfile.File {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	mf, err := modfile.Parse(path, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	return mf
}

// goOutput runs the go command in dir with env added to the test's own
// environment and returns its standard output.
func goOutput(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	t.Logf("go %s: %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	return stdout.String()
}

// outsideModuleEnv is the environment of the README's block for a user's
// module outside this tree: DTS the checkout, HOME home, and this
// machine's module and build caches (a new HOME would otherwise mean cold
// ones). Modules come from the local module cache first and from the
// configured proxy after it: go mod tidy also wants the modules that
// dependencies' own tests import, which no build of this tree downloads,
// so a machine whose cache only ever built the tree lacks them.
func outsideModuleEnv(t *testing.T, root, home string) []string {
	t.Helper()
	goEnv := strings.Fields(goOutput(t, root, nil, "env", "GOMODCACHE", "GOCACHE", "GOPROXY"))
	return []string{"DTS=" + root, "HOME=" + home, "GOMODCACHE=" + goEnv[0], "GOCACHE=" + goEnv[1],
		"GOPROXY=file://" + filepath.ToSlash(filepath.Join(goEnv[0], "cache", "download")) + "," + goEnv[2],
		"GOFLAGS=-modcacherw", "GOSUMDB=off", "GOTOOLCHAIN=local", "GOWORK="}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(fmt.Errorf("write %s: %w", path, err))
	}
}

// TestReadmeOutsideModule follows the README's words for using the worker
// library and the client from another module before they are published: it
// runs the shell block the README marks, in a new module holding a user's
// program, with DTS the checkout and HOME a temporary directory, then checks
// that the program and dtsctl were built. Modules come from the local
// module cache only.
func TestReadmeOutsideModule(t *testing.T) {
	if testing.Short() {
		t.Skip("links a worker program and dtsctl: several seconds on a warm build cache")
	}
	t.Parallel()
	root := repoRoot(t)
	block := readmeBlock(t, filepath.Join(root, "README.md"), "<!-- outside-module:")
	// HOME is new, so the caches are named (outsideModuleEnv): a cold build
	// cache would take a minute.
	user, home := t.TempDir(), t.TempDir()
	env := outsideModuleEnv(t, root, home)
	writeFile(t, filepath.Join(user, "go.mod"), "module example.com/mine\n\ngo 1.26.8\n")
	writeFile(t, filepath.Join(user, "main.go"), sdkUserMain)
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", block+"\ngo build -o mine .\n")
	cmd.Dir = user
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's block failed: %v\n%s\nblock:\n%s", err, out, block)
	}
	for _, bin := range []string{filepath.Join(user, "mine"), filepath.Join(home, "go", "bin", "dtsctl")} {
		if _, err := os.Stat(bin); err != nil {
			t.Errorf("the README's block did not build %s: %v", bin, err)
		}
	}
	out, err := exec.Command(filepath.Join(home, "go", "bin", "dtsctl"), "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "dtsctl") {
		t.Errorf("dtsctl --help: %v\n%s", err, out)
	}
}

func readmeText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readmeBlock returns the fenced code block that follows the line starting
// with marker.
func readmeBlock(t *testing.T, path, marker string) string {
	t.Helper()
	text := readmeText(t, path)
	i := strings.Index(text, "\n"+marker)
	if i < 0 {
		t.Fatalf("%s has no line starting %q", path, marker)
	}
	rest := text[i+1:]
	start := strings.Index(rest, "```")
	if start < 0 {
		t.Fatalf("no code block after %q", marker)
	}
	rest = rest[start:]
	rest = rest[strings.Index(rest, "\n")+1:]
	end := strings.Index(rest, "```")
	if end < 0 {
		t.Fatalf("the code block after %q does not end", marker)
	}
	return rest[:end]
}
