package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sdkDocProgram returns the program of docs/sdk.md's section heading (its
// first fenced block of lang), pointed at c instead of make up's ports.
func sdkDocProgram(t *testing.T, c *cluster, heading, lang string) string {
	t.Helper()
	doc := readmeText(t, filepath.Join(repoRoot(t), "docs", "sdk.md"))
	i := strings.Index(doc, "\n## "+heading+"\n")
	if i < 0 {
		t.Fatalf("docs/sdk.md has no section %q", heading)
	}
	section := doc[i+1:]
	if j := strings.Index(section[3:], "\n## "); j >= 0 {
		section = section[:j+3]
	}
	start := strings.Index(section, "```"+lang+"\n")
	if start < 0 {
		t.Fatalf("section %q of docs/sdk.md has no %s block", heading, lang)
	}
	body := section[start+len("```"+lang+"\n"):]
	body = body[:strings.Index(body, "\n```")+1]
	return strings.NewReplacer("http://127.0.0.1:8000", c.submitter,
		"redis://127.0.0.1:6379/0", c.redis.URL()).Replace(body)
}

// runSDKDocProgram runs a docs/sdk.md program and checks that it printed
// its job completed with the handler's result.
func runSDKDocProgram(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out.String())
	}
	if !strings.Contains(out.String(), "completed") || !strings.Contains(out.String(), "https://example.com/a.png") {
		t.Errorf("%s %v did not print its completed job:\n%s", name, args, out.String())
	}
}

// TestSDKDocGo builds docs/sdk.md's Go program in a module of its own, as
// the README says, and runs it against a cluster.
func TestSDKDocGo(t *testing.T) {
	if testing.Short() {
		t.Skip("links a program against the SDK: seconds on a warm build cache")
	}
	t.Parallel()
	c := newCluster(t)
	c.startSubmitter()
	c.startCoordinator("c1")
	root := repoRoot(t)
	user := t.TempDir()
	writeFile(t, filepath.Join(user, "go.mod"), "module example.com/docprog\n\ngo 1.26.8\n")
	writeFile(t, filepath.Join(user, "main.go"), sdkDocProgram(t, c, "Go", "go"))
	block := readmeBlock(t, filepath.Join(root, "README.md"), "<!-- outside-module:")
	block = block[:strings.Index(block, "# dtsctl")] // the modules only
	env := outsideModuleEnv(t, root, t.TempDir())
	build := exec.Command("bash", "-euo", "pipefail", "-c", block+"\ngo build -o docprog .\n")
	build.Dir, build.Env = user, append(os.Environ(), env...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	runSDKDocProgram(t, user, nil, filepath.Join(user, "docprog"))
}

// TestSDKDocPython runs docs/sdk.md's Python program against a cluster.
func TestSDKDocPython(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startSubmitter()
	c.startCoordinator("c1")
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "main.py"), sdkDocProgram(t, c, "Python", "python"))
	runSDKDocProgram(t, dir, []string{"PYTHONPATH=" + filepath.Join(repoRoot(t), "sdk", "python", "src")},
		pythonBin(), "main.py")
}
