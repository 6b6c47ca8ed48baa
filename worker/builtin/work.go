package builtin

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/dtsched/dts/worker"
)

// cpuIntensive hashes for about CPUWork. Result: {"hashes": n}.
func (h *handlers) cpuIntensive(ctx context.Context, job *worker.Job) (any, error) {
	if invalid(job) {
		return nil, ErrInvalidJob
	}
	n, err := hashFor(ctx, h.cfg.CPUWork, job)
	if err != nil {
		return nil, err
	}
	return map[string]any{"hashes": n}, nil
}

// ioIntensive writes, reads back and deletes a file of 1,000–9,999 lines.
// Result: {"lines": n, "bytes": b}.
func (h *handlers) ioIntensive(ctx context.Context, job *worker.Job) (any, error) {
	if invalid(job) {
		return nil, ErrInvalidJob
	}
	lines, size, err := fileWork(ctx, h.cfg.IODir, job)
	if err != nil {
		return nil, err
	}
	return map[string]any{"lines": lines, "bytes": size}, nil
}

// mixedWorkload hashes for half of CPUWork, then does io_intensive's work.
// Result: {"hashes": n, "lines": l, "bytes": b}.
func (h *handlers) mixedWorkload(ctx context.Context, job *worker.Job) (any, error) {
	if invalid(job) {
		return nil, ErrInvalidJob
	}
	n, err := hashFor(ctx, h.cfg.CPUWork/2, job)
	if err != nil {
		return nil, err
	}
	lines, size, err := fileWork(ctx, h.cfg.IODir, job)
	if err != nil {
		return nil, err
	}
	return map[string]any{"hashes": n, "lines": lines, "bytes": size}, nil
}

// hashBatch is how many hashes run between two looks at ctx and the clock:
// well under a millisecond of work.
const hashBatch = 1000

// hashFor chains SHA-256 over a 32-byte digest, seeded from the job, until d
// has elapsed, and returns how many hashes it computed.
func hashFor(ctx context.Context, d time.Duration, job *worker.Job) (int, error) {
	sum := sha256.Sum256(append([]byte(job.ID+"\x00"), job.Payload...))
	start := time.Now()
	n := 0
	for {
		for range hashBatch {
			sum = sha256.Sum256(sum[:])
		}
		n += hashBatch
		if err := ctx.Err(); err != nil {
			return n, err
		}
		if time.Since(start) >= d {
			return n, nil
		}
	}
}

// ioCheckEvery is how many lines are written between two looks at ctx.
const ioCheckEvery = 512

// fileWork writes a temporary file of 1,000–9,999 lines named after the job
// (os.CreateTemp makes the name unique, so concurrent attempts of the same
// job cannot collide), reads it back counting lines and bytes, and removes it
// whatever happens.
func fileWork(ctx context.Context, dir string, job *worker.Job) (lines, size int64, err error) {
	f, err := os.CreateTemp(dir, "dts-io-"+fileSafe(job.ID)+"-*.txt")
	if err != nil {
		return 0, 0, fmt.Errorf("io_intensive: create temp file: %w", err)
	}
	name := f.Name()
	defer func() {
		f.Close() // a second Close only returns an error, which is irrelevant here
		if rerr := os.Remove(name); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) && err == nil {
			err = fmt.Errorf("io_intensive: remove %s: %w", name, rerr)
		}
	}()

	want := 1000 + rand.IntN(9000)
	w := bufio.NewWriterSize(f, 64<<10)
	line := make([]byte, 0, 128)
	for i := range want {
		if i%ioCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return 0, 0, err
			}
		}
		line = append(line[:0], "job "...)
		line = append(line, job.ID...)
		line = append(line, " line "...)
		line = strconv.AppendInt(line, int64(i+1), 10)
		line = append(line, " simulated io work 0123456789abcdefghijklmnopqrstuvwxyz\n"...)
		if _, err := w.Write(line); err != nil {
			return 0, 0, fmt.Errorf("io_intensive: write %s: %w", name, err)
		}
	}
	if err := w.Flush(); err != nil {
		return 0, 0, fmt.Errorf("io_intensive: write %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return 0, 0, fmt.Errorf("io_intensive: close %s: %w", name, err)
	}

	r, err := os.Open(name)
	if err != nil {
		return 0, 0, fmt.Errorf("io_intensive: reopen: %w", err)
	}
	f = r // the deferred Close now closes the reader
	buf := make([]byte, 32<<10)
	for {
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		n, rerr := r.Read(buf)
		lines += int64(bytes.Count(buf[:n], []byte{'\n'}))
		size += int64(n)
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return 0, 0, fmt.Errorf("io_intensive: read %s: %w", name, rerr)
		}
	}
	if lines != int64(want) {
		return 0, 0, fmt.Errorf("io_intensive: read back %d lines, wrote %d", lines, want)
	}
	return lines, size, nil
}

// fileSafe turns a job id into a short string usable in a file name.
func fileSafe(id string) string {
	const limit = 40
	b := make([]byte, 0, min(len(id), limit))
	for i := 0; i < len(id) && len(b) < limit; i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			b = append(b, c)
		default:
			b = append(b, '_')
		}
	}
	return string(b)
}
