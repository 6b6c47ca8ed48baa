package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// redisConn is the little of the Redis protocol (RESP2) the bench needs:
// INFO to describe the server and find its pid, SCAN and UNLINK to remove
// the bench's keys at the end. The services own every other Redis access
// (package queue); the bench stays a client of their APIs.
type redisConn struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialRedis(ctx context.Context, rawURL string) (*redisConn, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("parse redis url: %w", err)
	}
	if u.Scheme != "redis" {
		return nil, fmt.Errorf("redis url: scheme %q not supported by the bench (want redis://)", u.Scheme)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "6379")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, fmt.Errorf("connect to redis %s: %w", host, err)
	}
	c := &redisConn{conn: conn, r: bufio.NewReader(conn)}
	if pw, ok := u.User.Password(); ok {
		args := []string{"AUTH", pw}
		if name := u.User.Username(); name != "" {
			args = []string{"AUTH", name, pw}
		}
		if _, err := c.do(args...); err != nil {
			conn.Close()
			return nil, fmt.Errorf("redis auth: %w", err)
		}
	}
	if db := strings.Trim(u.Path, "/"); db != "" && db != "0" {
		if _, err := c.do("SELECT", db); err != nil {
			conn.Close()
			return nil, fmt.Errorf("redis select %s: %w", db, err)
		}
	}
	return c, nil
}

func (c *redisConn) close() { c.conn.Close() }

// do sends one command and reads its reply: a string, an int64, nil, or a
// []any of those.
func (c *redisConn) do(args ...string) (any, error) {
	_ = c.conn.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.conn.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	return c.read()
}

func (c *redisConn) read() (any, error) {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("redis: empty reply line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, errors.New("redis: " + line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = c.read(); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("redis: unexpected reply %q", line)
}

// info returns the fields of INFO section.
func (c *redisConn) info(section string) (map[string]string, error) {
	v, err := c.do("INFO", section)
	if err != nil {
		return nil, err
	}
	s, _ := v.(string)
	out := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out, nil
}

// deletePrefix removes every key that starts with prefix and returns how
// many it removed. prefix must not be empty.
func (c *redisConn) deletePrefix(prefix string) (int, error) {
	if prefix == "" {
		return 0, errors.New("refusing to delete keys with an empty prefix")
	}
	pattern := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`).Replace(prefix) + "*"
	cursor, deleted := "0", 0
	for {
		v, err := c.do("SCAN", cursor, "MATCH", pattern, "COUNT", "1000")
		if err != nil {
			return deleted, err
		}
		reply, _ := v.([]any)
		if len(reply) != 2 {
			return deleted, fmt.Errorf("redis: unexpected SCAN reply %v", v)
		}
		cursor, _ = reply[0].(string)
		keys, _ := reply[1].([]any)
		if len(keys) > 0 {
			args := []string{"UNLINK"}
			for _, k := range keys {
				s, _ := k.(string)
				args = append(args, s)
			}
			if _, err := c.do(args...); err != nil {
				return deleted, err
			}
			deleted += len(keys)
		}
		if cursor == "0" {
			return deleted, nil
		}
	}
}
