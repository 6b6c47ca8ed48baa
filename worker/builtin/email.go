package builtin

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/mail"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	gomail "github.com/wneessen/go-mail"

	"github.com/dtsched/dts/worker"
)

// SMTPTLS modes.
const (
	SMTPTLSNone     = "none"     // plain text; AUTH only to a loopback server
	SMTPTLSStartTLS = "starttls" // plain connect, then STARTTLS, which the server must offer
	SMTPTLSImplicit = "implicit" // TLS from the first byte (SMTPS)
)

// maxEmailRecipients bounds to + cc + bcc of one email job: most SMTP
// servers refuse more than 100 RCPT TO in one transaction.
const maxEmailRecipients = 100

// reservedEmailHeaders are written by email itself; a payload header of one
// of these names is refused.
var reservedEmailHeaders = []string{"From", "Sender", "To", "Cc", "Bcc", "Subject", "Message-Id", "Date",
	"Mime-Version", "Content-Type", "Content-Transfer-Encoding", "Return-Path", "X-Job-Id"}

// emailPayload is the payload of an email job.
type emailPayload struct {
	To      addrList          `json:"to"`
	Cc      addrList          `json:"cc"`
	Bcc     addrList          `json:"bcc"`
	Subject string            `json:"subject"`
	Text    string            `json:"text"`
	HTML    string            `json:"html"`
	Headers map[string]string `json:"headers"`
}

// addrList is one address as a JSON string, or several as an array.
type addrList []string

func (a *addrList) UnmarshalJSON(b []byte) error {
	if b = bytes.TrimSpace(b); len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*a = addrList{s}
		return nil
	}
	var l []string
	if err := json.Unmarshal(b, &l); err != nil {
		return errors.New("must be an address or an array of addresses")
	}
	*a = l
	return nil
}

// email sends one message through the configured SMTP server. Its
// Message-ID is derived from the job id (<dts-job-ID@from-domain>), so every
// attempt of a job sends the same id and a receiver or a person can tell a
// retried delivery from a second message. A 5xx answer at any step (AUTH,
// MAIL FROM, any RCPT TO, DATA) fails the job permanently, as does a payload
// email cannot use; a 4xx answer, a refused or broken connection and a TLS
// failure are retried. No recipient gets the message unless every one is
// accepted. Result: {"message_id": "<...>", "recipients": n}.
func (h *handlers) email(ctx context.Context, job *worker.Job) (any, error) {
	if invalid(job) {
		return nil, ErrInvalidJob
	}
	if h.emailErr != nil {
		return nil, worker.Permanent(fmt.Errorf("email: bad SMTP configuration: %w", h.emailErr))
	}
	msg, n, err := h.newEmail(job)
	if err != nil {
		return nil, worker.Permanent(fmt.Errorf("email: %w", err))
	}
	id := msg.GetMessageID()
	if err := h.sendEmail(ctx, msg); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("email: %w", context.Cause(ctx))
		}
		err = fmt.Errorf("email %s via %s: %w", id, h.smtpAddr(), err)
		if code := smtpCode(err); code >= 500 && code <= 599 {
			return nil, worker.Permanent(err)
		}
		return nil, err
	}
	return map[string]any{"message_id": id, "recipients": n}, nil
}

// emailMessageID is the Message-ID of every attempt of job id, without the
// angle brackets.
func emailMessageID(jobID, domain string) string {
	return "dts-job-" + jobID + "@" + domain
}

// newEmail builds the message a job describes and counts its recipients.
// Every error it returns is the payload's fault.
func (h *handlers) newEmail(job *worker.Job) (*gomail.Msg, int, error) {
	var p emailPayload
	dec := json.NewDecoder(strings.NewReader(job.PayloadString()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, 0, fmt.Errorf(`payload must be {"to": ..., "cc": ..., "bcc": ..., "subject": ..., "text": ..., "html": ..., "headers": {...}}: %w`, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, 0, errors.New("payload has data after its JSON object")
	}
	if len(p.To) == 0 {
		return nil, 0, errors.New("payload has no to")
	}
	if n := len(p.To) + len(p.Cc) + len(p.Bcc); n > maxEmailRecipients {
		return nil, 0, fmt.Errorf("%d recipients, more than %d", n, maxEmailRecipients)
	}
	if p.Text == "" && p.HTML == "" {
		return nil, 0, errors.New("payload has neither text nor html")
	}
	if hasLineBreak(p.Subject) {
		return nil, 0, errors.New("subject contains a line break")
	}
	msg := gomail.NewMsg()
	if err := msg.From(h.cfg.SMTPFrom); err != nil {
		return nil, 0, err // Validate has parsed it already
	}
	for _, f := range []struct {
		field string
		list  addrList
		set   func(...string) error
	}{{"to", p.To, msg.To}, {"cc", p.Cc, msg.Cc}, {"bcc", p.Bcc, msg.Bcc}} {
		for _, a := range f.list {
			if hasLineBreak(a) {
				return nil, 0, fmt.Errorf("%s: %q contains a line break", f.field, a)
			}
			if _, err := mail.ParseAddress(a); err != nil {
				return nil, 0, fmt.Errorf("%s: %q: %w", f.field, a, err)
			}
		}
		if len(f.list) > 0 {
			if err := f.set(f.list...); err != nil {
				return nil, 0, fmt.Errorf("%s: %w", f.field, err)
			}
		}
	}
	for k, v := range p.Headers {
		if !isToken(k) {
			return nil, 0, fmt.Errorf("invalid header name %q", k)
		}
		ck := textproto.CanonicalMIMEHeaderKey(k)
		for _, r := range reservedEmailHeaders {
			if ck == r {
				return nil, 0, fmt.Errorf("header %s is set by the email job itself", k)
			}
		}
		if hasControl(v) {
			return nil, 0, fmt.Errorf("header %s: value contains a line break or control character", k)
		}
		msg.SetGenHeader(gomail.Header(ck), v)
	}
	msg.Subject(p.Subject)
	msg.SetMessageIDWithValue(emailMessageID(job.ID, h.emailDomain))
	msg.SetDate()
	msg.SetGenHeader("X-Job-ID", job.ID)
	switch {
	case p.Text != "" && p.HTML != "":
		msg.SetBodyString(gomail.TypeTextPlain, p.Text)
		msg.AddAlternativeString(gomail.TypeTextHTML, p.HTML)
	case p.Text != "":
		msg.SetBodyString(gomail.TypeTextPlain, p.Text)
	default:
		msg.SetBodyString(gomail.TypeTextHTML, p.HTML)
	}
	return msg, len(p.To) + len(p.Cc) + len(p.Bcc), nil
}

// sendEmail connects, sends msg and quits. Canceling ctx closes the
// connection, so it returns promptly at any step.
func (h *handlers) sendEmail(ctx context.Context, msg *gomail.Msg) error {
	tlsCfg := &tls.Config{ServerName: h.cfg.SMTPHost, RootCAs: h.cfg.SMTPRootCAs, MinVersion: tls.VersionTLS12}
	var stops []func() bool
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	dial := func(dctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := (&net.Dialer{}).DialContext(dctx, network, addr)
		if err != nil {
			return nil, err
		}
		stops = append(stops, context.AfterFunc(ctx, func() { _ = raw.Close() }))
		var c net.Conn = idleConn{Conn: raw, timeout: h.cfg.SMTPTimeout}
		if h.cfg.SMTPTLS == SMTPTLSImplicit {
			// Returned as a *tls.Conn, so go-mail sees the session as
			// encrypted and may offer a password.
			tc := tls.Client(c, tlsCfg)
			if err := tc.HandshakeContext(dctx); err != nil {
				_ = raw.Close()
				return nil, err
			}
			c = tc
		}
		return c, nil
	}
	opts := []gomail.Option{gomail.WithTimeout(h.cfg.SMTPTimeout), gomail.WithTLSConfig(tlsCfg),
		gomail.WithDialContextFunc(dial)}
	auth := gomail.SMTPAuthAutoDiscover // the strongest the server offers over TLS
	switch h.cfg.SMTPTLS {
	case SMTPTLSNone:
		opts = append(opts, gomail.WithTLSPolicy(gomail.NoTLS))
		auth = gomail.SMTPAuthPlain // to a loopback server only (Validate)
	case SMTPTLSStartTLS:
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSMandatory))
	case SMTPTLSImplicit:
		// The dialer did the TLS; no STARTTLS is offered on it.
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSOpportunistic))
	}
	opts = append(opts, gomail.WithPort(h.cfg.SMTPPort))
	if h.cfg.SMTPUsername != "" {
		opts = append(opts, gomail.WithSMTPAuth(auth), gomail.WithUsername(h.cfg.SMTPUsername),
			gomail.WithPassword(h.cfg.SMTPPassword))
	}
	c, err := gomail.NewClient(h.cfg.SMTPHost, opts...)
	if err != nil {
		return err
	}
	return c.DialAndSendWithContext(ctx, msg)
}

// idleConn fails a read or a write that waits longer than timeout. go-mail
// sets no deadline on the server's greeting, so a server that accepts the
// connection and says nothing held the attempt (and its slot) for ever
// when the job had no timeout of its own (TestEmailSilentServer).
type idleConn struct {
	net.Conn
	timeout time.Duration
}

func (c idleConn) Read(b []byte) (int, error) {
	if err := c.SetReadDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c idleConn) Write(b []byte) (int, error) {
	if err := c.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

func (h *handlers) smtpAddr() string {
	return net.JoinHostPort(h.cfg.SMTPHost, strconv.Itoa(h.cfg.SMTPPort))
}

// smtpCode returns the SMTP reply code err carries, or 0 when it carries
// none (a connection or TLS error).
func smtpCode(err error) int {
	var se *gomail.SendError
	if errors.As(err, &se) {
		return se.ErrorCode()
	}
	var te *textproto.Error
	if errors.As(err, &te) {
		return te.Code
	}
	return 0
}

// checkSMTP validates the SMTP fields of c (after WithDefaults) and returns
// the domain of SMTPFrom, which Message-IDs use.
func checkSMTP(c Config) (domain string, err error) {
	if c.SMTPHost == "" {
		if c.SMTPFrom != "" || c.SMTPUsername != "" || c.SMTPPassword != "" {
			return "", errors.New("SMTPFrom, SMTPUsername or SMTPPassword set without SMTPHost")
		}
		return "", nil
	}
	switch c.SMTPTLS {
	case SMTPTLSNone, SMTPTLSStartTLS, SMTPTLSImplicit:
	default:
		return "", fmt.Errorf("SMTPTLS %q: must be none, starttls or implicit", c.SMTPTLS)
	}
	if c.SMTPPort < 1 || c.SMTPPort > 65535 {
		return "", fmt.Errorf("SMTPPort %d: out of range", c.SMTPPort)
	}
	if c.SMTPFrom == "" {
		return "", errors.New("SMTPFrom: required with SMTPHost")
	}
	a, err := mail.ParseAddress(c.SMTPFrom)
	if err != nil {
		return "", fmt.Errorf("SMTPFrom %q: %w", c.SMTPFrom, err)
	}
	_, domain, _ = strings.Cut(a.Address, "@")
	if c.SMTPPassword != "" && c.SMTPUsername == "" {
		return "", errors.New("SMTPPassword set without SMTPUsername")
	}
	if c.SMTPUsername != "" && c.SMTPTLS == SMTPTLSNone && !isLoopbackHost(c.SMTPHost) {
		return "", fmt.Errorf("SMTPUsername with SMTPTLS none: a password would cross the network in clear to %s; use starttls or implicit", c.SMTPHost)
	}
	return domain, nil
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func hasLineBreak(s string) bool { return strings.ContainsAny(s, "\r\n") }

// hasControl reports whether s holds a control character other than tab.
func hasControl(s string) bool {
	for _, r := range s {
		if (r < 0x20 && r != '\t') || r == 0x7f {
			return true
		}
	}
	return false
}
