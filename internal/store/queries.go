package store

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strings"
	"unicode"
)

// The package's SQL lives in queries/<file>.sql, one file per Go file that
// runs statements (queries/claim.sql for claim.go), as named blocks:
//
//	-- name: JobClaimBatch
//	-- Optional comment lines, not sent to the server.
//	SELECT ... FROM dts_claim_jobs($1, $2, $3, $4, $5)
//
// A block runs in the function of the same name: q("JobClaimBatch") in
// JobClaimBatch, or with a suffix when a function runs several statements
// (q("StatsGetDue") in StatsGet; a helper counts by its name with the
// first letter upper-cased, so failLeased runs FailLeasedLock and
// FailLeasedUpdate). A block whose name starts with a lower-case letter is
// a fragment, not a statement: text shared by several blocks that must
// stay identical (jobColumns, which scanJob reads in order; startedAt, the
// clamp of a reported handler start). Another block includes it as
// {{jobColumns}}; the loader expands it once, at init, so every statement
// is complete text by the time it runs. TestQueryBlocksMatchFunctions
// checks both directions: every statement block is run by exactly one q
// call, in its function and its file, and no Query, QueryRow or Exec of the
// package is given SQL from anywhere else.
//
// Why an embedded loader and not sqlc: the store hand-writes its scans
// (scanJob, collectPage's byte budget, pgx.CollectRows closures), passes
// typed arrays to unnest and relies on pgx's own encoding (json.RawMessage
// to jsonb, *time.Time to NULL), and runs statements through pgx.BeginFunc
// transactions and a querier shared by pool and transaction; sqlc would
// generate a second set of row types and methods to adapt to all of that.
// A loader keeps the Go code as it was, with nothing generated to keep in
// step and no code-generation step in the build; a block's text is exactly
// what PostgreSQL receives.

//go:embed queries/*.sql
var queryFS embed.FS

// queries holds every block of queries/*.sql by name, fragments expanded.
var queries = mustParseQueries(queryFS, "queries")

// query is one named block of a queries file.
type query struct {
	file string // base name of the file that holds it, e.g. "claim.sql"
	line int    // line of its "-- name:" comment
	text string // the SQL, fragments expanded
}

// q returns the SQL of the statement block name. An unknown name is a bug
// that TestQueryBlocksMatchFunctions catches; q panics on it.
func q(name string) string {
	b, ok := queries[name]
	if !ok || isFragment(name) {
		panic("store: no query block named " + name + " in queries/*.sql")
	}
	return b.text
}

// mustParseQueries is parseQueries for package initialisation: a
// malformed queries file stops every binary and test at start-up.
func mustParseQueries(fsys fs.FS, dir string) map[string]query {
	qs, err := parseQueries(fsys, dir)
	if err != nil {
		panic("store: " + err.Error())
	}
	return qs
}

var (
	nameLine    = regexp.MustCompile(`^--\s*name:(.*)$`)
	validName   = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*$`)
	fragmentRef = regexp.MustCompile(`\{\{([^{}]*)\}\}`)
)

// isFragment reports whether a block name is a fragment's (lower-case
// first letter) rather than a statement's.
func isFragment(name string) bool {
	return name != "" && unicode.IsLower(rune(name[0]))
}

// parseQueries reads every dir/*.sql of fsys. A block starts at a line
// "-- name: Name" and runs to the next one; its leading and trailing blank
// and comment-only lines are dropped, the rest is kept as written. Before
// the first block a file may hold only blank and comment lines. It fails on
// a block without a name or with a name that is not an identifier, a name
// used twice (in one file or two), a block with no SQL, a reference to an
// unknown fragment or to a statement, and a fragment that includes another.
func parseQueries(fsys fs.FS, dir string) (map[string]query, error) {
	files, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, fmt.Errorf("list query files: %w", err)
	}
	out := map[string]query{}
	for _, file := range files {
		data, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", file, err)
		}
		base := path.Base(file)
		var (
			name  string
			start int
			body  []string
		)
		flush := func() error {
			if name == "" {
				return nil
			}
			text := trimBlock(body)
			if text == "" {
				return fmt.Errorf("%s:%d: block %s has no SQL", base, start, name)
			}
			out[name] = query{file: base, line: start, text: text}
			return nil
		}
		for i, line := range strings.Split(string(data), "\n") {
			if m := nameLine.FindStringSubmatch(line); m != nil {
				if err := flush(); err != nil {
					return nil, err
				}
				name, start, body = strings.TrimSpace(m[1]), i+1, nil
				if !validName.MatchString(name) {
					return nil, fmt.Errorf("%s:%d: block name %q is not an identifier", base, start, name)
				}
				if prev, dup := out[name]; dup {
					return nil, fmt.Errorf("%s:%d: block %s is already defined at %s:%d", base, start, name, prev.file, prev.line)
				}
				continue
			}
			if name == "" {
				if !isComment(line) {
					return nil, fmt.Errorf("%s:%d: SQL before the first \"-- name:\" line", base, i+1)
				}
				continue
			}
			body = append(body, line)
		}
		if err := flush(); err != nil {
			return nil, err
		}
	}
	for name, b := range out {
		var bad error
		b.text = fragmentRef.ReplaceAllStringFunc(b.text, func(ref string) string {
			frag := strings.TrimSpace(ref[2 : len(ref)-2])
			f, ok := out[frag]
			switch {
			case isFragment(name):
				bad = fmt.Errorf("%s:%d: fragment %s includes %s; fragments cannot include others", b.file, b.line, name, ref)
			case !ok:
				bad = fmt.Errorf("%s:%d: block %s includes unknown fragment %s", b.file, b.line, name, ref)
			case !isFragment(frag):
				bad = fmt.Errorf("%s:%d: block %s includes %s, a statement, not a fragment", b.file, b.line, name, ref)
			}
			return f.text
		})
		if bad != nil {
			return nil, bad
		}
		out[name] = b
	}
	return out, nil
}

// trimBlock joins a block's lines without its leading and trailing blank
// and comment-only lines.
func trimBlock(lines []string) string {
	for len(lines) > 0 && isComment(lines[0]) {
		lines = lines[1:]
	}
	for len(lines) > 0 && isComment(lines[len(lines)-1]) {
		lines = lines[:len(lines)-1]
	}
	return strings.Join(lines, "\n")
}

// isComment reports whether line is blank or a "--" comment.
func isComment(line string) bool {
	t := strings.TrimSpace(line)
	return t == "" || strings.HasPrefix(t, "--")
}
