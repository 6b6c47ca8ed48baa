package testkit_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinks: every relative link in the README and docs/ names a file
// that exists and, when it has a #fragment, a heading of that file (as
// GitHub makes anchors of headings). A section deleted or renamed while
// another page still points at it fails here.
func TestDocLinks(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	pages := []string{filepath.Join(root, "README.md")}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, more...)
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		a := headingAnchors(string(b))
		anchors[path] = a
		return a
	}
	checked := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, link := range relativeLinks(string(b)) {
			target, fragment, _ := strings.Cut(link, "#")
			path := page
			if target != "" {
				path = filepath.Join(filepath.Dir(page), target)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: link %q: %v", page, link, err)
					continue
				}
			}
			checked++
			if fragment == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			if !anchorsOf(path)[fragment] {
				t.Errorf("%s: link %q: %s has no heading with that anchor", page, link, path)
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked %d links; the pattern no longer finds the docs' links", checked)
	}
}

var linkPattern = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// relativeLinks returns the targets of the markdown links outside code
// blocks that are neither absolute URLs nor mail addresses.
func relativeLinks(doc string) []string {
	var out []string
	fenced := false
	for line := range strings.Lines(doc) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range linkPattern.FindAllStringSubmatch(line, -1) {
			if l := m[1]; !strings.Contains(l, "://") && !strings.HasPrefix(l, "mailto:") {
				out = append(out, l)
			}
		}
	}
	return out
}

// headingAnchors returns the anchors GitHub gives the headings of doc:
// lower case, punctuation dropped, spaces turned into hyphens, and -1, -2
// after repeats.
func headingAnchors(doc string) map[string]bool {
	out := map[string]bool{}
	fenced := false
	for line := range strings.Lines(doc) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		anchor := b.String()
		for i := 1; out[anchor]; i++ {
			anchor = b.String() + "-" + strconv.Itoa(i)
		}
		out[anchor] = true
	}
	return out
}
