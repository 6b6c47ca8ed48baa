// Package config is how the services' Config types report bad settings, so
// that the coordinator, the submitter and the worker fail the same way: a
// Config's validate method checks every field, adds one FieldError per bad
// field to a Check, and returns Check.Err, which joins them all. One start-up
// then names every mistake instead of the first one only.
//
// What must stay true: a message starts with "config: " and the Go name of
// the field (as written in the Config type, dotted for a nested field), so
// that an operator can find the setting in docs/operations.md.
package config

import (
	"errors"
	"fmt"
	"net"
	"strconv"
)

// FieldError is one bad field of a Config.
type FieldError struct {
	Field   string // Go name of the field: "LeaseDuration", "Backoff.Base"
	Problem string // what is wrong, for people: "is required", "(1s) must be at least ..."
}

func (e *FieldError) Error() string { return "config: " + e.Field + " " + e.Problem }

// Check collects the bad fields of one Config. The zero value is ready.
type Check struct {
	errs []error
}

// Bad records that field is bad; format and args say why, following the
// field's name: c.Bad("RedisURL", "is required") reads "config: RedisURL is
// required".
func (c *Check) Bad(field, format string, args ...any) {
	c.errs = append(c.errs, &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)})
}

// RedisSentinel checks the Redis Sentinel fields that every service's
// Config has under the same names: RedisSentinelAddrs (each host:port) and
// RedisSentinelMaster, which go together.
func (c *Check) RedisSentinel(addrs []string, master string) {
	for _, a := range addrs {
		if err := HostPort(a); err != nil {
			c.Bad("RedisSentinelAddrs", "%v", err)
		}
	}
	switch {
	case len(addrs) > 0 && master == "":
		c.Bad("RedisSentinelMaster", "is required with RedisSentinelAddrs")
	case len(addrs) == 0 && master != "":
		c.Bad("RedisSentinelAddrs", "is required with RedisSentinelMaster")
	}
}

// HostPort checks that addr is host:port with a port from 1 to 65535.
func HostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if host == "" {
		return fmt.Errorf("%q has no host", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: port %q is not 1 to 65535", addr, port)
	}
	return nil
}

// Err returns every bad field joined (errors.Join), or nil.
func (c *Check) Err() error { return errors.Join(c.errs...) }

// Fields returns the names of the bad fields err reports, in order: the
// FieldErrors in err and in whatever it wraps or joins.
func Fields(err error) []string {
	var names []string
	var walk func(error)
	walk = func(err error) {
		if fe, ok := err.(*FieldError); ok {
			names = append(names, fe.Field)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			if e := u.Unwrap(); e != nil {
				walk(e)
			}
		}
	}
	if err != nil {
		walk(err)
	}
	return names
}
