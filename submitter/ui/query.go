package ui

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
)

// search is what the Jobs search box asks for: a list (P), or one job by
// id or by idempotency key, which must also match P's filters.
type search struct {
	P   store.JobListParams
	ID  int64
	Key string
}

// one says whether the search looks up one job (id: or key:).
func (s search) one() bool { return s.ID > 0 || s.Key != "" }

// parseQuery reads the Jobs search box: space-separated qualifiers
// state: (or status:), name:, queue:, id: and key: (an idempotency key),
// each at most once; a value with spaces is written in double quotes
// (name:"send email"). A word without a qualifier is a name. Checking the
// values is the service's (the API's rules); id must be a job id.
func parseQuery(s string) (se search, err error) {
	p, id, key, err := parseTerms(s)
	return search{P: p, ID: id, Key: key}, err
}

func parseTerms(s string) (p store.JobListParams, id int64, idemKey string, err error) {
	if len(s) > maxQueryLen {
		return p, 0, "", fmt.Errorf("the search is longer than %d bytes", maxQueryLen)
	}
	seen := map[string]bool{}
	rest := strings.TrimSpace(s)
	for rest != "" {
		var key, val string
		key, val, rest, err = nextTerm(rest)
		if err != nil {
			return p, 0, "", err
		}
		if key == "status" {
			key = "state"
		}
		if seen[key] {
			return p, 0, "", fmt.Errorf("%s: given twice", key)
		}
		seen[key] = true
		switch key {
		case "state":
			p.State = job.State(val)
			if !p.State.Valid() {
				return p, 0, "", fmt.Errorf("state: must be one of %s", states())
			}
		case "name":
			p.Name = val
		case "queue":
			p.Queue = val
		case "id":
			if id, err = parseID(val); err != nil {
				return p, 0, "", errors.New("id: must be a job id (digits)")
			}
		case "key":
			idemKey = val
		default:
			return p, 0, "", fmt.Errorf("unknown qualifier %q (use state, name, queue, id or key)", truncate(key, 40))
		}
	}
	return p, id, idemKey, nil
}

// nextTerm splits the first term off s (trimmed on the left): its
// qualifier ("name" for a bare word), its value (unquoted) and the rest.
func nextTerm(s string) (key, val, rest string, err error) {
	key = "name"
	if i := strings.IndexFunc(s, func(r rune) bool { return r == ':' || unicode.IsSpace(r) || r == '"' }); i > 0 && s[i] == ':' {
		key, s = strings.ToLower(s[:i]), s[i+1:]
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
