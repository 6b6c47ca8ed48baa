package store

import "syscall"

// tcpUserTimeout is TCP_USER_TIMEOUT of linux/tcp.h, which package syscall
// does not name.
const tcpUserTimeout = 0x12

func setTCPUserTimeout(fd uintptr, ms int) error {
	return syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, ms)
}
