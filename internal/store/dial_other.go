//go:build !linux

package store

// setTCPUserTimeout does nothing where TCP_USER_TIMEOUT is not known; the
// keepalive and the hang guard still apply.
func setTCPUserTimeout(uintptr, int) error { return nil }
