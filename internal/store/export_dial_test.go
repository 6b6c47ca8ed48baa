package store

import (
	"errors"
	"net"
	"syscall"
)

// SocketOf returns the socket under a pool connection, for the external
// tests of the network settings.
func SocketOf(c net.Conn) (syscall.RawConn, error) {
	if gc, ok := c.(*guardedConn); ok {
		c = gc.Conn
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, errors.New("not a socket")
	}
	return sc.SyscallConn()
}
