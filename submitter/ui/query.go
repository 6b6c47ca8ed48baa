package ui

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/dtsched/dts/internal/job"
)

// search is what the Jobs search box asks for: a list (P), or one job by
// id or by idempotency key, which must also match P's filters. Scan, when
// it tests anything (payload:, payload.<path>:, worker:, error:), keeps the
// listed jobs that pass, found by a search in steps (store.JobSearch).
// P.Fingerprint (fingerprint:) keeps the dead jobs whose error has it:
// with name:, a group of the Dead letters page.
type search struct {
	P    ListParams
	ID   int64
	Key  string
	Scan Scan
}

// one says whether the search looks up one job (id: or key:).
func (s search) one() bool { return s.ID > 0 || s.Key != "" }

// parseQuery reads the Jobs search box: space-separated qualifiers
// state: (or status:), name:, queue:, id:, key: (an idempotency key),
// fingerprint: (a dead job's error fingerprint), payload: (text the
// payload's JSON holds), payload.<path>: (the payload's value at a path of
// keys and indexes separated by dots, payload.user.id:42), worker: (the
// job's worker) and error: (text its last error holds, in any case), each
// at most once (one payload path); a value with spaces is written in
// double quotes (name:"send email"). A word without a qualifier is a name.
// Qualifiers are read in any case, a payload path as written. Checking
// the values is the service's (the API's rules); id must be a job id.
func parseQuery(s string) (se search, err error) {
	err = parseTerms(s, &se)
	switch {
	case err != nil:
	case !se.Scan.Empty() && se.one():
		err = errors.New("a search by payload, worker or error does not go with id or key")
	case se.P.Fingerprint != "" && se.one():
		err = errors.New("fingerprint: lists a dead-letter group; it does not go with id or key")
	}
	return se, err
}

func parseTerms(s string, se *search) (err error) {
	p := &se.P
	if len(s) > maxQueryLen {
		return fmt.Errorf("the search is longer than %d bytes", maxQueryLen)
	}
	seen := map[string]bool{}
	rest := strings.TrimSpace(s)
	for rest != "" {
		var key, val string
		key, val, rest, err = nextTerm(rest)
		if err != nil {
			return err
		}
		if key == "status" {
			key = "state"
		}
		path, isPath := strings.CutPrefix(key, "payload.")
		once := key
		if isPath {
			once = "payload.<path>"
		}
		if seen[once] {
			return fmt.Errorf("%s: given twice", once)
		}
		seen[once] = true
		if isPath {
			se.Scan.Path, se.Scan.PathValue = strings.Split(path, "."), val
			continue
		}
		switch key {
		case "state":
			p.State = job.State(val)
			if !p.State.Valid() {
				return fmt.Errorf("state: must be one of %s", states())
			}
		case "name":
			p.Name = val
		case "queue":
			p.Queue = val
		case "id":
			if se.ID, err = parseID(val); err != nil {
				return errors.New("id: must be a job id (digits)")
			}
		case "key":
			se.Key = val
		case "payload":
			se.Scan.Text = val
		case "worker":
			se.Scan.Worker = val
		case "error":
			se.Scan.Error = val
		case "fingerprint":
			p.Fingerprint = val
		default:
			return fmt.Errorf("unknown qualifier %q (use state, name, queue, id, key, fingerprint, payload, payload.<path>, worker or error)", truncate(key, 40))
		}
	}
	return nil
}

// nextTerm splits the first term off s (trimmed on the left): its
// qualifier ("name" for a bare word), its value (unquoted) and the rest.
func nextTerm(s string) (key, val, rest string, err error) {
	key = "name"
	if i := strings.IndexFunc(s, func(r rune) bool { return r == ':' || unicode.IsSpace(r) || r == '"' }); i > 0 && s[i] == ':' {
		key, s = s[:i], s[i+1:]
		if dot := strings.IndexByte(key, '.'); dot >= 0 { // a payload path keeps its case
			key = strings.ToLower(key[:dot]) + key[dot:]
		} else {
			key = strings.ToLower(key)
		}
	}
	if strings.HasPrefix(s, `"`) {
		end := 1
		for end < len(s) && s[end] != '"' {
			if s[end] == '\\' {
				end++
			}
			end++
		}
		if end >= len(s) {
			return "", "", "", fmt.Errorf("%s: unclosed quote", key)
		}
		val, err = strconv.Unquote(s[:end+1])
		if err != nil {
			return "", "", "", fmt.Errorf("%s: bad quoted value", key)
		}
		return key, val, strings.TrimLeftFunc(s[end+1:], unicode.IsSpace), nil
	}
	end := strings.IndexFunc(s, unicode.IsSpace)
	if end < 0 {
		end = len(s)
	}
	val = s[:end]
	if val == "" {
		return "", "", "", fmt.Errorf("%s: no value", key)
	}
	return key, val, strings.TrimLeftFunc(s[end:], unicode.IsSpace), nil
}

func states() string {
	names := make([]string, len(job.States))
	for i, st := range job.States {
		names[i] = string(st)
	}
	return strings.Join(names, ", ")
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
