package ui

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/dtsched/dts/internal/httpx"
	"github.com/dtsched/dts/internal/wire"
)

func (f *fakeService) QueueSetPaused(_ context.Context, name string, paused bool) (wire.QueueInfo, error) {
	if name == "nope" {
		return wire.QueueInfo{}, httpx.InvalidField("name", "bad queue name")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.queueSet == nil {
		f.queueSet = map[string]bool{}
	}
	f.queueSet[name] = paused
	act := "resume "
	if paused {
		act = "pause "
	}
	f.queueActs = append(f.queueActs, act+name)
	return wire.QueueInfo{Name: name, Paused: paused}, nil
}

// hostilePath is the hostile queue name as a path segment of a form's
// action.
var hostilePath = url.PathEscape(hostile)

func TestQueuesPage(t *testing.T) {
	t.Parallel()
	c, _ := newConsole(t, true)
	for _, tc := range []struct {
		name, token   string
		headers       []string
		want, wantNot []string
	}{
		{name: "admin", token: "admin",
			want: []string{`<a href="./queues" aria-current="page">Queues</a>`, `data-queue="reports"`, "&lt;script&gt;",
				`action="./queues/reports/resume"`, `action="./queues/mail/pause"`, `action="./queues/` + hostilePath + `/pause"`,
				`href="./jobs?q=queue%3Areports"`, "612 s", "12.5 %", "0.0 %", "—", ">paused<", ">none<", `hx-trigger="sse:stats"`,
				`sse-connect="./live"`}},
		{name: "read only", token: "read", want: []string{`data-queue="mail"`, "12.5 %"},
			wantNot: []string{"/pause\"", "/resume\"", `method="post" action="./queues`, "Pause stops"}},
		{name: "fragment", token: "read", headers: []string{"HX-Request", "true"},
			want: []string{`<div id="queues-live"`}, wantNot: []string{"<html"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := checkPage(t, tc.name, serve(c, "GET", "/queues", tc.token, nil, tc.headers...), http.StatusOK)
			for _, s := range tc.want {
				if !strings.Contains(body, s) {
					t.Errorf("lacks %q\n%.6000s", s, body)
				}
			}
			for _, s := range tc.wantNot {
				if strings.Contains(body, s) {
					t.Errorf("has %q", s)
				}
			}
		})
	}
}

// TestQueuesActions: read's forged POSTs and cross-origin ones get 403 and
// change nothing; admin's pause and resume reach the service with the
// name as it was (hostile, with "/" in it), redirect back, and the page it
// lands on already shows the change (the snapshot is invalidated).
func TestQueuesActions(t *testing.T) {
	t.Parallel()
	c, f := newConsole(t, true)
	// A first page view fills the snapshot with "mail" not paused.
	if body := serve(c, "GET", "/queues", "admin", nil).Body.String(); !strings.Contains(body, `action="./queues/mail/pause"`) {
		t.Fatalf("mail should show Pause:\n%.3000s", body)
	}
	for _, target := range []string{"/queues/mail/pause", "/queues/reports/resume", "/queues/" + hostilePath + "/pause"} {
		checkPage(t, "forged "+target, serve(c, "POST", target, "read", url.Values{}), http.StatusForbidden)
		checkPage(t, "cross-origin "+target, serve(c, "POST", target, "admin", url.Values{}, "Origin", "http://evil.example"), http.StatusForbidden)
		checkPage(t, "no login "+target, serve(c, "POST", target, "", url.Values{}), http.StatusUnauthorized)
	}
	if len(f.queueActs) != 0 {
		t.Fatalf("refused POSTs acted: %v", f.queueActs)
	}
	for target, want := range map[string]string{
		"/queues/mail/pause":                 "../../queues?done=pause",
		"/queues/reports/resume":             "../../queues?done=resume",
		"/queues/" + hostilePath + "/pause":  "../../queues?done=pause",
		"/queues/" + hostilePath + "/resume": "../../queues?done=resume",
	} {
		w := serve(c, "POST", target, "admin", url.Values{})
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != want {
			t.Errorf("POST %s: %d %q, want %q", target, w.Code, w.Header().Get("Location"), want)
		}
	}
	acts := strings.Join(f.queueActs, "|")
	for _, want := range []string{"pause mail", "resume reports", "pause " + hostile, "resume " + hostile} {
		if !strings.Contains(acts, want) {
			t.Errorf("acts %q lack %q", acts, want)
		}
	}
	body := checkPage(t, "after pause", serve(c, "GET", "/queues?done=pause", "admin", nil), http.StatusOK)
	for _, s := range []string{"Queue paused", `action="./queues/mail/resume"`, `action="./queues/reports/pause"`} {
		if !strings.Contains(body, s) {
			t.Errorf("after the actions the page lacks %q\n%.6000s", s, body)
		}
	}
	checkPage(t, "bad name", serve(c, "POST", "/queues/nope/pause", "admin", url.Values{}), http.StatusBadRequest)
	checkPage(t, "bad action", serve(c, "POST", "/queues/mail/explode", "admin", url.Values{}), http.StatusNotFound)
	checkPage(t, "unknown flash", serve(c, "GET", "/queues?done="+url.QueryEscape(hostile), "admin", nil), http.StatusOK)
}
