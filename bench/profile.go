package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// profiler takes a CPU profile of every process that serves one (the
// cluster's services and workers when Config.ProfileDir is set) over one
// window, each written to ProfileDir/<window>-<process>.pprof, and the
// process's allocation profile as the window opens and as it closes
// (<window>-<process>.allocs-start and .allocs-end: go tool pprof
// -sample_index=alloc_space -diff_base START END shows what the window
// allocated).
type profiler struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
}

// profile starts the profiles of window, each d long (whole seconds, at
// least one); wait returns once they are written. Without ProfileDir it
// does nothing.
func (c *cluster) profile(ctx context.Context, window string, d time.Duration) *profiler {
	pr := &profiler{}
	if c.cfg.ProfileDir == "" {
		return pr
	}
	secs := max(1, int(math.Round(d.Seconds())))
	c.mu.Lock()
	ps := append(append([]*proc(nil), c.services...), c.workers...)
	c.mu.Unlock()
	for _, p := range ps {
		if p.pprofAddr == "" {
			continue
		}
		base := filepath.Join(c.cfg.ProfileDir, window+"-"+p.Name)
		url := "http://" + p.pprofAddr + "/debug/pprof/"
		pr.wg.Add(1)
		go func() {
			defer pr.wg.Done()
			err := fetchProfile(ctx, url+"allocs", base+".allocs-start")
			if err == nil {
				err = fetchProfile(ctx, fmt.Sprintf("%sprofile?seconds=%d", url, secs), base+".pprof")
			}
			if err == nil {
				err = fetchProfile(ctx, url+"allocs", base+".allocs-end")
			}
			if err != nil {
				pr.mu.Lock()
				pr.errs = append(pr.errs, fmt.Errorf("profile %s: %w", p.Name, err))
				pr.mu.Unlock()
			}
		}()
	}
	return pr
}

// wait waits for the profiles and returns the first failure, if any.
func (pr *profiler) wait() error {
	pr.wg.Wait()
	if len(pr.errs) > 0 {
		return pr.errs[0]
	}
	return nil
}

func fetchProfile(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
