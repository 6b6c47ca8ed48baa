package command

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// listing is what a read prints, in each format: whole is the API's
// answer (-o json), items its elements (-o jsonl, one per line), ids what
// -q prints, and header and row the table.
type listing[T any] struct {
	whole  any
	items  []T
	id     func(T) string
	header []string
	row    func(T) []string
}

func emit[T any](a *app, l listing[T]) error {
	w := a.env.Stdout
	switch {
	case a.quiet:
		for _, it := range l.items {
			fmt.Fprintln(w, l.id(it))
		}
		return nil
	case a.output == "json":
		return writeJSON(w, l.whole)
	case a.output == "jsonl":
		enc := json.NewEncoder(w)
		for _, it := range l.items {
			if err := enc.Encode(it); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(l.header, "\t"))
	for _, it := range l.items {
		fmt.Fprintln(tw, strings.Join(l.row(it), "\t"))
	}
	return tw.Flush()
}

// emitOne prints one object: JSON as the API gave it, or a table of
// fields (key, value) one per line.
// warn shows the warnings of an API answer (a submission of a job name
// no worker handles) on stderr, where they do not mix with the output a
// script reads.
func (a *app) warn(warnings []string) {
	for _, w := range warnings {
		fmt.Fprintf(a.env.Stderr, "dtsctl: warning: %s\n", w)
	}
}

func emitOne(a *app, v any, id string, fields [][2]string) error {
	w := a.env.Stdout
	switch {
	case a.quiet:
		_, err := fmt.Fprintln(w, id)
		return err
	case a.output == "json":
		return writeJSON(w, v)
	case a.output == "jsonl":
		return json.NewEncoder(w).Encode(v)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, f := range fields {
		fmt.Fprintf(tw, "%s:\t%s\n", f[0], f[1])
	}
	return tw.Flush()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func fmtOptTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return fmtTime(*t)
}

func fmtOpt(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

func itoa[N int | int64](n N) string { return strconv.FormatInt(int64(n), 10) }

// clip shortens s to n runes for a table cell, on one line.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
