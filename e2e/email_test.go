package e2e

import (
	"bytes"
	"io"
	"net"
	"net/mail"
	"strconv"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
)

// TestUnknownNameWaitsAndEmailSends runs the real binaries: a job whose
// name no worker handles (a typo, or email on a worker without SMTP_HOST)
// stays pending and shows in GET /stats and the coordinator's metric, while
// other jobs run past it; once a worker with SMTP_HOST starts, the email
// job is sent through a real SMTP server, with its job id in Message-ID,
// and the typo still waits.
func TestUnknownNameWaitsAndEmailSends(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	coord := c.startCoordinator("c1")
	c.startSubmitter()
	c.startWorker("w1") // no SMTP_HOST: does not handle email

	typo := c.submit(map[string]any{"name": "emial", "payload": map[string]any{"to": "ann@example.com", "text": "hi"}})
	email := c.submit(map[string]any{"name": "email", "payload": map[string]any{"to": "ann@example.com", "subject": "Order 42", "text": "Shipped."}})
	c.waitStatus(c.submit(map[string]any{"name": "noop"}), "completed", 30*time.Second)

	unknown := func() map[string]any {
		code, st := c.do("GET", c.submitter+"/stats", nil)
		if code != 200 {
			t.Fatalf("GET /stats = %d %v", code, st)
		}
		u, _ := st["unknown_names"].(map[string]any)
		return u
	}
	c.eventually(10*time.Second, "unknown_names {emial: 1, email: 1}", func() bool {
		u := unknown()
		return len(u) == 2 && u["emial"] == 1.0 && u["email"] == 1.0
	})
	if n := c.metric(coord.url, "dts_jobs_unhandled", `name="emial"`); n != 1 {
		t.Errorf(`dts_jobs_unhandled{name="emial"} = %v, want 1`, n)
	}
	// A job submitted after them runs; they still wait, never attempted.
	c.waitStatus(c.submit(map[string]any{"name": "noop"}), "completed", 30*time.Second)
	for _, id := range []string{typo, email} {
		if j := c.job(id); j["status"] != "pending" || j["attempts"] != 0.0 {
			t.Errorf("job %s = %v, want pending with 0 attempts", id, j)
		}
	}

	// A worker that can send mail takes the email job, and only it.
	sink := startSMTPSink(t)
	c.startWorker("w2", "SMTP_HOST=127.0.0.1", "SMTP_PORT="+strconv.Itoa(sink.port), "SMTP_TLS=none",
		"SMTP_FROM=Shop <noreply@shop.example>")
	j := c.waitStatus(email, "completed", 30*time.Second)
	if j["worker_id"] != "w2" {
		t.Errorf("email ran on %v, want w2", j["worker_id"])
	}
	var m []byte
	select {
	case m = <-sink.messages:
	case <-time.After(10 * time.Second):
		t.Fatal("the SMTP server received nothing")
	}
	msg, err := mail.ReadMessage(bytes.NewReader(m))
	if err != nil {
		t.Fatalf("the message does not parse: %v\n%s", err, m)
	}
	if got, want := msg.Header.Get("Message-Id"), "<dts-job-"+email+"@shop.example>"; got != want {
		t.Errorf("Message-ID %q, want %q", got, want)
	}
	if got := msg.Header.Get("Subject"); got != "Order 42" {
		t.Errorf("Subject %q", got)
	}
	c.eventually(10*time.Second, "unknown_names {emial: 1}", func() bool {
		u := unknown()
		return len(u) == 1 && u["emial"] == 1.0
	})
	if j := c.job(typo); j["status"] != "pending" {
		t.Errorf("the typo job is %v, want pending", j["status"])
	}
}

// smtpSink is a real SMTP server on 127.0.0.1 that keeps every message.
type smtpSink struct {
	port     int
	messages chan []byte
}

func startSMTPSink(t *testing.T) *smtpSink {
	t.Helper()
	s := &smtpSink{messages: make(chan []byte, 8)}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &sinkSession{s: s}, nil }))
	srv.Domain = "sink.test"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.port = ln.Addr().(*net.TCPAddr).Port
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return s
}

type sinkSession struct{ s *smtpSink }

func (*sinkSession) Mail(string, *smtp.MailOptions) error { return nil }
func (*sinkSession) Rcpt(string, *smtp.RcptOptions) error { return nil }
func (*sinkSession) Reset()                               {}
func (*sinkSession) Logout() error                        { return nil }
func (x *sinkSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err == nil {
		x.s.messages <- b
	}
	return err
}
