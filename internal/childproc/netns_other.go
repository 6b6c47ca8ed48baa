//go:build !linux || !(amd64 || arm64)

package childproc

import "errors"

func setNetns(string) error { return errors.ErrUnsupported }
