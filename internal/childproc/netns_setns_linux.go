//go:build linux && (amd64 || arm64)

package childproc

import (
	"fmt"
	"os"
	"syscall"
)

// setNetns moves the calling thread into the network namespace of file.
func setNetns(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("open network namespace: %w", err)
	}
	defer f.Close()
	if _, _, errno := syscall.RawSyscall(sysSetns, f.Fd(), syscall.CLONE_NEWNET, 0); errno != 0 {
		return fmt.Errorf("enter network namespace %s: %w", file, errno)
	}
	return nil
}
