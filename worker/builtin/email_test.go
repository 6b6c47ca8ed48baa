package builtin

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/mail"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/dtsched/dts/worker"
)

// These tests send through a real SMTP server (github.com/emersion/go-smtp)
// listening on 127.0.0.1, which records what it receives and answers what
// the test tells it to.

// received is one message as the sink saw it.
type received struct {
	From string
	To   []string // envelope recipients
	Data []byte
	TLS  bool   // the session was encrypted when DATA came
	User string // who logged in; "" without AUTH
}

// sinkOptions shape a sink.
type sinkOptions struct {
	tls      string // SMTPTLSNone (no STARTTLS offered), SMTPTLSStartTLS (offered) or SMTPTLSImplicit
	user     string // when set, AUTH PLAIN is required with user/pass
	pass     string
	mailCode int              // when set, MAIL FROM is answered with this code
	rcpt     map[string]int   // recipient → reply code (an error) for RCPT TO
	dataCode int              // when set, the end of DATA is answered with this code
	onRcpt   func(to string)  // called at RCPT TO, before answering (may block)
	cert     *tls.Certificate // default: the shared self-signed one
	messages chan received    // set by startSink
	addr     *net.TCPAddr     // set by startSink
	mu       *sync.Mutex      // set by startSink
	conns    *int             // sessions opened; set by startSink
}

// startSink starts an SMTP server on 127.0.0.1 and returns it with its
// messages channel and address filled in.
func startSink(t *testing.T, o sinkOptions) *sinkOptions {
	t.Helper()
	o.messages = make(chan received, 16)
	o.mu = &sync.Mutex{}
	o.conns = new(int)
	if o.cert == nil {
		c := testCert(t).cert
		o.cert = &c
	}
	s := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		o.mu.Lock()
		*o.conns++
		o.mu.Unlock()
		return &sinkSession{o: &o, conn: c}, nil
	}))
	s.Domain = "sink.test"
	s.ReadTimeout, s.WriteTimeout = 10*time.Second, 10*time.Second
	s.AllowInsecureAuth = o.tls == SMTPTLSNone
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg := &tls.Config{Certificates: []tls.Certificate{*o.cert}, MinVersion: tls.VersionTLS12}
	switch o.tls {
	case SMTPTLSStartTLS:
		s.TLSConfig = tlsCfg
	case SMTPTLSImplicit:
		ln = tls.NewListener(ln, tlsCfg)
	}
	o.addr = ln.Addr().(*net.TCPAddr)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ln) }()
	// The listener is closed here too: a Close that runs before Serve
	// has registered it (a test that never dials the sink ends at once)
	// closes nothing, and Serve then accepts for ever.
	t.Cleanup(func() { _ = s.Close(); _ = ln.Close(); <-done })
	return &o
}

func (o *sinkOptions) sessions() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return *o.conns
}

// next returns the next message the sink received, failing the test after 5s.
func (o *sinkOptions) next(t *testing.T) received {
	t.Helper()
	select {
	case m := <-o.messages:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("the SMTP sink received no message within 5s")
		return received{}
	}
}

// none fails the test if the sink holds a message.
func (o *sinkOptions) none(t *testing.T) {
	t.Helper()
	select {
	case m := <-o.messages:
		t.Errorf("the SMTP sink received a message: from %s to %v", m.From, m.To)
	default:
	}
}

type sinkSession struct {
	o    *sinkOptions
	conn *smtp.Conn
	user string
	from string
	to   []string
}

func smtpErr(code int) error {
	return &smtp.SMTPError{Code: code, EnhancedCode: smtp.EnhancedCode{code / 100, 0, 0}, Message: "told to by the test"}
}

func (s *sinkSession) AuthMechanisms() []string {
	if s.o.user == "" {
		return nil
	}
	return []string{sasl.Plain}
}

func (s *sinkSession) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if user != s.o.user || pass != s.o.pass {
			return smtp.ErrAuthFailed
		}
		s.user = user
		return nil
	}), nil
}

func (s *sinkSession) Mail(from string, _ *smtp.MailOptions) error {
	if s.o.user != "" && s.user == "" {
		return smtp.ErrAuthRequired
	}
	if s.o.mailCode != 0 {
		return smtpErr(s.o.mailCode)
	}
	s.from = from
	return nil
}

func (s *sinkSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	if s.o.onRcpt != nil {
		s.o.onRcpt(to)
	}
	if code := s.o.rcpt[to]; code != 0 {
		return smtpErr(code)
	}
	s.to = append(s.to, to)
	return nil
}

func (s *sinkSession) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if s.o.dataCode != 0 {
		return smtpErr(s.o.dataCode)
	}
	_, isTLS := s.conn.TLSConnectionState()
	s.o.messages <- received{From: s.from, To: slices.Clone(s.to), Data: data, TLS: isTLS, User: s.user}
	return nil
}

func (s *sinkSession) Reset()        { s.from, s.to = "", nil }
func (s *sinkSession) Logout() error { return nil }

// selfSigned is a certificate for 127.0.0.1 and the pool that trusts it.
type selfSigned struct {
	cert tls.Certificate
	pool *x509.CertPool
}

var (
	certOnce sync.Once
	certVal  selfSigned
	certErr  error
)

// testCert returns a self-signed certificate for 127.0.0.1, made once per
// test binary.
func testCert(t *testing.T) selfSigned {
	t.Helper()
	certOnce.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			certErr = err
			return
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sink.test"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			IsCA: true, BasicConstraintsValid: true}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			certErr = err
			return
		}
		leaf, err := x509.ParseCertificate(der)
		if err != nil {
			certErr = err
			return
		}
		certVal.cert = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
		certVal.pool = x509.NewCertPool()
		certVal.pool.AddCert(leaf)
	})
	if certErr != nil {
		t.Fatal(certErr)
	}
	return certVal
}

// emailConfig is a Config sending to sink as the client would for mode.
func emailConfig(t *testing.T, sink *sinkOptions, mode string) Config {
	t.Helper()
	return Config{SMTPHost: "127.0.0.1", SMTPPort: sink.addr.Port, SMTPTLS: mode, SMTPFrom: "Shop <noreply@shop.example>",
		SMTPUsername: sink.user, SMTPPassword: sink.pass, SMTPRootCAs: testCert(t).pool, SMTPTimeout: 10 * time.Second}
}

// sendEmail runs the email handler of cfg on one job.
func runEmail(t *testing.T, cfg Config, jobID, payload string) (any, error) {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	j := newJob(NameEmail, payload)
	j.ID = jobID
	return register(t, cfg).handler(t, NameEmail)(t.Context(), j)
}

const fullEmail = `{"to":["Ann <ann@example.com>","bob@example.com"],"cc":"cat@example.com","bcc":["dan@example.com"],
	"subject":"Your order","text":"plain body","html":"<p>html body</p>","headers":{"Reply-To":"help@shop.example","X-Order":"42"}}`

func TestEmailSendsEveryPart(t *testing.T) {
	t.Parallel()
	sink := startSink(t, sinkOptions{tls: SMTPTLSNone})
	res, err := runEmail(t, emailConfig(t, sink, SMTPTLSNone), "42", fullEmail)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"message_id": "<dts-job-42@shop.example>", "recipients": 4}
	if got, ok := res.(map[string]any); !ok || got["message_id"] != want["message_id"] || got["recipients"] != want["recipients"] {
		t.Errorf("result = %v, want %v", res, want)
	}
	m := sink.next(t)
	if m.From != "noreply@shop.example" {
		t.Errorf("MAIL FROM %q", m.From)
	}
	if want := []string{"ann@example.com", "bob@example.com", "cat@example.com", "dan@example.com"}; !slices.Equal(m.To, want) {
		t.Errorf("RCPT TO %v, want %v", m.To, want)
	}
	msg, err := mail.ReadMessage(bytes.NewReader(m.Data))
	if err != nil {
		t.Fatalf("the message does not parse: %v\n%s", err, m.Data)
	}
	for k, v := range map[string]string{
		"Message-Id": "<dts-job-42@shop.example>", "Subject": "Your order", "From": `"Shop" <noreply@shop.example>`,
		"Cc": "<cat@example.com>", "Reply-To": "help@shop.example", "X-Order": "42", "X-Job-Id": "42", "Bcc": "",
	} {
		if got := msg.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if to := msg.Header.Get("To"); !strings.Contains(to, "ann@example.com") || !strings.Contains(to, "bob@example.com") {
		t.Errorf("To = %q", to)
	}
	if _, err := msg.Header.Date(); err != nil {
		t.Errorf("Date: %v", err)
	}
	body, _ := io.ReadAll(msg.Body)
	for _, s := range []string{"plain body", "<p>html body</p>", "multipart/alternative", "text/plain", "text/html"} {
		if !bytes.Contains(m.Data, []byte(s)) {
			t.Errorf("the message lacks %q:\n%s", s, body)
		}
	}
	if bytes.Contains(m.Data, []byte("dan@example.com")) {
		t.Error("the Bcc recipient shows in the message")
	}
}

// TestEmailRetryKeepsMessageID checks that every attempt of one job sends
// the same Message-ID, and another job another one.
func TestEmailRetryKeepsMessageID(t *testing.T) {
	t.Parallel()
	sink := startSink(t, sinkOptions{tls: SMTPTLSNone})
	cfg := emailConfig(t, sink, SMTPTLSNone)
	ids := map[string]string{}
	for _, id := range []string{"7", "7", "8"} {
		if _, err := runEmail(t, cfg, id, `{"to":"a@example.com","text":"x"}`); err != nil {
			t.Fatal(err)
		}
		msg, err := mail.ReadMessage(bytes.NewReader(sink.next(t).Data))
		if err != nil {
			t.Fatal(err)
		}
		got := msg.Header.Get("Message-Id")
		if prev, ok := ids[id]; ok && prev != got {
			t.Errorf("job %s: Message-ID %s then %s", id, prev, got)
		}
		ids[id] = got
	}
	if ids["7"] == ids["8"] || ids["7"] != "<dts-job-7@shop.example>" {
		t.Errorf("Message-IDs %v", ids)
	}
}

func TestEmailTLSAndAuth(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{SMTPTLSNone, SMTPTLSStartTLS, SMTPTLSImplicit} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			sink := startSink(t, sinkOptions{tls: mode, user: "mailer", pass: "s3cret"})
			if _, err := runEmail(t, emailConfig(t, sink, mode), "1", `{"to":"a@example.com","text":"x"}`); err != nil {
				t.Fatal(err)
			}
			m := sink.next(t)
			if m.User != "mailer" {
				t.Errorf("logged in as %q, want mailer", m.User)
			}
			if want := mode != SMTPTLSNone; m.TLS != want {
				t.Errorf("TLS = %v, want %v", m.TLS, want)
			}
		})
	}
}

// TestEmailFailures checks which failures are permanent: 5xx answers and
// bad payloads are; 4xx answers, refused connections and TLS problems are not.
func TestEmailFailures(t *testing.T) {
	t.Parallel()
	closedPort := refusingPort(t)

	tests := []struct {
		name      string
		sink      sinkOptions
		mode      string // the client's
		tweak     func(*Config)
		payload   string
		permanent bool
		contains  string
	}{
		{name: "rcpt 550", sink: sinkOptions{tls: SMTPTLSNone, rcpt: map[string]int{"gone@example.com": 550}},
			payload: `{"to":"gone@example.com","text":"x"}`, permanent: true, contains: "550"},
		{name: "one of two rcpt 550: nobody gets it", sink: sinkOptions{tls: SMTPTLSNone, rcpt: map[string]int{"gone@example.com": 550}},
			payload: `{"to":["ok@example.com","gone@example.com"],"text":"x"}`, permanent: true, contains: "550"},
		{name: "rcpt 451", sink: sinkOptions{tls: SMTPTLSNone, rcpt: map[string]int{"busy@example.com": 451}},
			payload: `{"to":"busy@example.com","text":"x"}`, permanent: false, contains: "451"},
		{name: "mail 421", sink: sinkOptions{tls: SMTPTLSNone, mailCode: 421}, payload: `{"to":"a@example.com","text":"x"}`, contains: "421"},
		{name: "mail 553", sink: sinkOptions{tls: SMTPTLSNone, mailCode: 553}, payload: `{"to":"a@example.com","text":"x"}`, permanent: true},
		{name: "data 554", sink: sinkOptions{tls: SMTPTLSNone, dataCode: 554}, payload: `{"to":"a@example.com","text":"x"}`, permanent: true, contains: "554"},
		{name: "data 452", sink: sinkOptions{tls: SMTPTLSNone, dataCode: 452}, payload: `{"to":"a@example.com","text":"x"}`, contains: "452"},
		{name: "auth 535", sink: sinkOptions{tls: SMTPTLSStartTLS, user: "mailer", pass: "right"}, mode: SMTPTLSStartTLS,
			tweak: func(c *Config) { c.SMTPPassword = "wrong" }, payload: `{"to":"a@example.com","text":"x"}`, permanent: true, contains: "535"},
		{name: "connection refused", sink: sinkOptions{tls: SMTPTLSNone}, tweak: func(c *Config) { c.SMTPPort = closedPort },
			payload: `{"to":"a@example.com","text":"x"}`, contains: "refused"},
		{name: "starttls not offered", sink: sinkOptions{tls: SMTPTLSNone}, mode: SMTPTLSStartTLS,
			payload: `{"to":"a@example.com","text":"x"}`, contains: "STARTTLS"},
		{name: "untrusted certificate", sink: sinkOptions{tls: SMTPTLSImplicit}, mode: SMTPTLSImplicit,
			tweak: func(c *Config) { c.SMTPRootCAs = x509.NewCertPool() }, payload: `{"to":"a@example.com","text":"x"}`, contains: "certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sink := startSink(t, tt.sink)
			mode := tt.mode
			if mode == "" {
				mode = SMTPTLSNone
			}
			cfg := emailConfig(t, sink, mode)
			if tt.tweak != nil {
				tt.tweak(&cfg)
			}
			_, err := runEmail(t, cfg, "9", tt.payload)
			if err == nil {
				t.Fatal("sent, want an error")
			}
			if worker.IsPermanent(err) != tt.permanent {
				t.Errorf("permanent = %v, want %v: %v", worker.IsPermanent(err), tt.permanent, err)
			}
			if !strings.Contains(err.Error(), tt.contains) {
				t.Errorf("error %q does not contain %q", err, tt.contains)
			}
			sink.none(t)
		})
	}
}

// TestEmailBadPayload checks that a payload email cannot use fails
// permanently without a connection to the server.
func TestEmailBadPayload(t *testing.T) {
	t.Parallel()
	sink := startSink(t, sinkOptions{tls: SMTPTLSNone})
	cfg := emailConfig(t, sink, SMTPTLSNone)
	many := make([]string, maxEmailRecipients+1)
	for i := range many {
		many[i] = `"u` + strconv.Itoa(i) + `@example.com"`
	}
	for name, payload := range map[string]string{
		"not an object":            `"hello"`,
		"no to":                    `{"subject":"s","text":"x"}`,
		"empty to":                 `{"to":[],"text":"x"}`,
		"to a number":              `{"to":5,"text":"x"}`,
		"bad address":              `{"to":"not an address","text":"x"}`,
		"two addresses in one":     `{"to":"a@example.com, b@example.com","text":"x"}`,
		"bad cc":                   `{"to":"a@example.com","cc":["@"],"text":"x"}`,
		"address with a newline":   `{"to":"a@example.com\r\nBcc: x@evil.example","text":"x"}`,
		"subject with a newline":   `{"to":"a@example.com","subject":"hi\r\nBcc: x@evil.example","text":"x"}`,
		"header with a newline":    `{"to":"a@example.com","text":"x","headers":{"X-A":"1\r\nBcc: x@evil.example"}}`,
		"header name with a colon": `{"to":"a@example.com","text":"x","headers":{"X-A: b":"1"}}`,
		"reserved header":          `{"to":"a@example.com","text":"x","headers":{"message-id":"<x@y>"}}`,
		"unknown field":            `{"to":"a@example.com","text":"x","from":"ceo@shop.example"}`,
		"no body":                  `{"to":"a@example.com","subject":"s"}`,
		"too many recipients":      `{"to":[` + strings.Join(many, ",") + `],"text":"x"}`,
		"trailing data":            `{"to":"a@example.com","text":"x"} {}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := runEmail(t, cfg, "3", payload)
			if !worker.IsPermanent(err) {
				t.Errorf("err = %v, want a permanent error", err)
			}
		})
	}
	t.Cleanup(func() {
		if n := sink.sessions(); n != 0 {
			t.Errorf("%d SMTP sessions opened for bad payloads, want 0", n)
		}
	})
}

// TestEmailPayloadAsString checks that the payload may be a JSON string
// holding the object, as webhook's may.
func TestEmailPayloadAsString(t *testing.T) {
	t.Parallel()
	sink := startSink(t, sinkOptions{tls: SMTPTLSNone})
	if _, err := runEmail(t, emailConfig(t, sink, SMTPTLSNone), "5", jsonString(`{"to":"a@example.com","html":"<b>x</b>"}`)); err != nil {
		t.Fatal(err)
	}
	if m := sink.next(t); !bytes.Contains(m.Data, []byte("text/html")) {
		t.Errorf("no html part:\n%s", m.Data)
	}
}

// TestEmailCancel checks that canceling the attempt closes a connection
// whose server does not answer, at once, whatever SMTPTimeout says.
func TestEmailCancel(t *testing.T) {
	t.Parallel()
	inRcpt := make(chan struct{}, 1)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	sink := startSink(t, sinkOptions{tls: SMTPTLSNone, onRcpt: func(string) {
		inRcpt <- struct{}{}
		<-release
	}})
	cfg := emailConfig(t, sink, SMTPTLSNone)
	cfg.SMTPTimeout = time.Hour
	h := register(t, cfg).handler(t, NameEmail)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := h(ctx, newJob(NameEmail, `{"to":"a@example.com","text":"x"}`))
		done <- err
	}()
	<-inRcpt
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || worker.IsPermanent(err) {
			t.Errorf("err = %v, want a retryable context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("email did not return within 2s of cancellation")
	}
}

func TestEmailNotRegisteredWithoutHost(t *testing.T) {
	t.Parallel()
	if slices.Contains(register(t, Config{}).names, NameEmail) {
		t.Error("email registered without SMTPHost")
	}
	if !slices.Contains(register(t, Config{SMTPHost: "127.0.0.1", SMTPFrom: "a@example.com"}).names, NameEmail) {
		t.Error("email not registered with SMTPHost")
	}
}

func TestValidateSMTP(t *testing.T) {
	t.Parallel()
	ok := Config{SMTPHost: "smtp.example.com", SMTPFrom: "a@example.com"}
	tests := []struct {
		name  string
		tweak func(*Config)
		want  string // "" for valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"no host, nothing else", func(c *Config) { *c = Config{} }, ""},
		{"from without host", func(c *Config) { c.SMTPHost = "" }, "without SMTPHost"},
		{"no from", func(c *Config) { c.SMTPFrom = "" }, "SMTPFrom"},
		{"bad from", func(c *Config) { c.SMTPFrom = "nobody" }, "SMTPFrom"},
		{"bad tls", func(c *Config) { c.SMTPTLS = "ssl" }, "SMTPTLS"},
		{"bad port", func(c *Config) { c.SMTPPort = 70000 }, "SMTPPort"},
		{"password without user", func(c *Config) { c.SMTPPassword = "x" }, "SMTPUsername"},
		{"auth in clear to a remote host", func(c *Config) { c.SMTPTLS, c.SMTPUsername = SMTPTLSNone, "u" }, "in clear"},
		{"auth in clear to loopback", func(c *Config) { c.SMTPHost, c.SMTPTLS, c.SMTPUsername = "127.0.0.1", SMTPTLSNone, "u" }, ""},
		{"auth with starttls", func(c *Config) { c.SMTPUsername, c.SMTPPassword = "u", "p" }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := ok
			tt.tweak(&c)
			err := c.Validate()
			if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
	for mode, port := range map[string]int{SMTPTLSNone: 25, SMTPTLSStartTLS: 587, SMTPTLSImplicit: 465, "": 587} {
		if got := (Config{SMTPTLS: mode}).WithDefaults().SMTPPort; got != port {
			t.Errorf("default port for %q = %d, want %d", mode, got, port)
		}
	}
}

// TestEmailSilentServer: a server that accepts the connection and never
// says a word fails the attempt after SMTPTimeout, even when the attempt
// itself has no deadline (a job without timeout_seconds), instead of
// holding the slot for ever.
func TestEmailSilentServer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // kept open, silent
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	cfg := Config{SMTPHost: "127.0.0.1", SMTPPort: ln.Addr().(*net.TCPAddr).Port, SMTPFrom: "shop@shop.example",
		SMTPTLS: SMTPTLSNone, SMTPTimeout: 500 * time.Millisecond}
	h := register(t, cfg).handler(t, NameEmail)
	done := make(chan error, 1)
	go func() {
		_, err := h(context.Background(), newJob(NameEmail, `{"to":"a@example.com","text":"x"}`))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || worker.IsPermanent(err) {
			t.Errorf("err = %v, want a retryable error", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the email handler still waits for a silent server 20 s in (SMTPTimeout 500 ms)")
	}
}

// refusingPort returns a loopback port where connections are refused: a
// socket bound to it but not listening, held until the test ends, so no
// other test or process can start listening there meanwhile (a port
// closed after use can be taken again at once, and a test then waited on
// a server that was not its own).
func refusingPort(t *testing.T) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return sa.(*syscall.SockaddrInet4).Port
}
