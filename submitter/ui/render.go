package ui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"slices"
	"strconv"
	"time"
)

// pageNames are the templates/<name>.html files, each rendered inside
// templates/layout.html.
var pageNames = []string{"overview", "jobs", "job", "dlq", "requeue", "queues", "login", "error"}

var funcs = template.FuncMap{
	"short": truncate,
	"when": func(v any) string {
		var t time.Time
		switch v := v.(type) {
		case time.Time:
			t = v
		case *time.Time:
			if v != nil {
				t = *v
			}
		}
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
	},
	"ago": func(t time.Time) string { return t.UTC().Format("15:04:05 UTC") },
	// rel is a time as a human duration from now ("3m 20s ago", "in 2h
	// 5m"); pages put the exact time (when) in its title.
	"rel": func(v any) string {
		t, ok := timeOf(v)
		if !ok {
			return "—"
		}
		d := time.Since(t)
		if d < 0 {
			return "in " + age(-d)
		}
		return age(d) + " ago"
	},
	// secs is a wait in seconds as a human duration ("3m 20s", "2h 0m").
	"secs": func(v any) string {
		switch v := v.(type) {
		case float64:
			return age(time.Duration(v * float64(time.Second)))
		case int:
			return age(time.Duration(v) * time.Second)
		case int64:
			return age(time.Duration(v) * time.Second)
		}
		return "—"
	},
	// actionWords says what an operator action of the audit log did, for
	// the timeline.
	"actionWords": func() map[string]string { return actionWords },
	// since is at as an offset from from ("+1.25 s"); the Job page's
	// times are offsets from the submission.
	"since": func(from time.Time, at any) string {
		t, ok := timeOf(at)
		if !ok {
			return "—"
		}
		d := t.Sub(from)
		if d < 0 {
			return "−" + span(-d)
		}
		return "+" + span(d)
	},
	// between is how long from a to b.
	"between": func(a time.Time, b any) string {
		t, ok := timeOf(b)
		if !ok {
			return "—"
		}
		return span(max(t.Sub(a), 0))
	},
	"ms": func(ms *int64) string {
		if ms == nil {
			return "—"
		}
		return span(time.Duration(*ms) * time.Millisecond)
	},
	"deref": func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	},
	"quoteq":       func(key, val string) string { return key + ":" + fmt.Sprintf("%q", val) },
	"htmxFile":     func() string { return HTMXFile },
	"searchBudget": func() string { return strconv.FormatFloat(SearchBudget.Seconds(), 'f', -1, 64) + " s" },
	"sseFile":      func() string { return HTMXSSEFile },
	"has":          func(list []string, s string) bool { return slices.Contains(list, s) },
	"dict": func(kv ...any) map[string]any {
		m := make(map[string]any, len(kv)/2)
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	},
}

// actionWords name the audit log's job actions on the Job page's timeline.
var actionWords = map[string]string{"job.requeue": "Requeued", "job.cancel": "Cancel requested", "job.run_now": "Made due now (run now)"}

// timeOf is the time of a time.Time or a non-nil *time.Time.
func timeOf(v any) (time.Time, bool) {
	switch v := v.(type) {
	case time.Time:
		return v, !v.IsZero()
	case *time.Time:
		if v != nil {
			return *v, !v.IsZero()
		}
	}
	return time.Time{}, false
}

// span writes a duration (not negative) short and readable: "850 ms",
// "1.25 s", "4 m 05 s", "2 h 03 m", "3 d 04 h".
func span(d time.Duration) string {
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	case d < time.Minute:
		return strconv.FormatFloat(float64(d.Milliseconds())/1000, 'f', -1, 64) + " s"
	case d < time.Hour:
		return fmt.Sprintf("%d m %02d s", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		return fmt.Sprintf("%d h %02d m", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%d d %02d h", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

func parseTemplates() (map[string]*template.Template, error) {
	base, err := template.New("").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/charts.html", "templates/bulkform.html")
	if err != nil {
		return nil, fmt.Errorf("parse layout: %w", err)
	}
	out := map[string]*template.Template{}
	for _, name := range append(pageNames, opsPages...) {
		t, err := template.Must(base.Clone()).ParseFS(templateFS, "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("parse page %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// jsonBody is a payload or result as the Job page shows it.
type jsonBody struct {
	Size    int
	Text    string // indented, or compact when too deep; "" when Large
	Large   bool   // over maxInlineBytes: offered as a download instead
	Compact bool   // nested deeper than maxPrettyDepth: shown as stored
}

func showJSON(raw json.RawMessage) jsonBody {
	if len(raw) == 0 {
		raw = json.RawMessage("null")
	}
	b := jsonBody{Size: len(raw)}
	switch {
	case len(raw) > maxInlineBytes:
		b.Large = true
	case depth(raw) > maxPrettyDepth:
		b.Compact, b.Text = true, string(raw)
	default:
		var out bytes.Buffer
		if err := json.Indent(&out, raw, "", "  "); err != nil {
			b.Text = string(raw)
		} else {
			b.Text = out.String()
		}
	}
	return b
}

// depth is how deep arrays and objects nest in raw (valid JSON).
func depth(raw []byte) int {
	d, most, inStr, esc := 0, 0, false, false
	for _, c := range raw {
		switch {
		case esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '[' || c == '{':
			d++
			most = max(most, d)
		case c == ']' || c == '}':
			d--
		}
	}
	return most
}
