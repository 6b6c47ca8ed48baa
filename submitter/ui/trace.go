package ui

import (
	"net/url"
	"strings"
)

// traceLink is a traced job's trace on its page: its id, and its link
// when Config.TraceURL is set.
type traceLink struct {
	ID, URL string
}

// traceLink is the trace of a job with trace id id; nil for none.
func (c *Console) traceLink(id string) *traceLink {
	if id == "" {
		return nil
	}
	l := &traceLink{ID: id}
	if c.cfg.TraceURL != "" {
		l.URL = strings.ReplaceAll(c.cfg.TraceURL, "{trace_id}", url.PathEscape(id))
	}
	return l
}
