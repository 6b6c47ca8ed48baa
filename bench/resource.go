package bench

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ResourceUse is one process's (or group of processes') use of the machine
// over a measured window, read from /proc.
type ResourceUse struct {
	Name string `json:"name"`
	// Processes is the number of processes counted (PostgreSQL: backends
	// of the bench database plus the server's own processes).
	Processes int `json:"processes"`
	// CPUSeconds is utime+stime spent inside the window.
	CPUSeconds float64 `json:"cpu_seconds"`
	// CPUPercent is CPUSeconds over the window's length: 100 = one core.
	CPUPercent float64 `json:"cpu_percent"`
	// CPUPer100k is CPUSeconds per 100,000 jobs of the window, when the
	// window has a job count.
	CPUPer100k float64 `json:"cpu_seconds_per_100k_jobs,omitempty"`
	// PeakRSSMB is the largest VmRSS sampled in the window, in MiB; 0 for
	// groups, whose shared memory would be counted once per process.
	PeakRSSMB float64 `json:"peak_rss_mb,omitempty"`
}

// Usage is what a sampler measured over one window.
type Usage struct {
	Seconds float64       `json:"seconds"`
	Jobs    int64         `json:"jobs,omitempty"`
	Procs   []ResourceUse `json:"processes"`
	// MachineBusyPercent is the share of all cores busy (any process), from
	// /proc/stat: 100 = every core busy the whole window.
	MachineBusyPercent float64 `json:"machine_busy_percent"`
	// OtherCPUSeconds is the machine's busy CPU time not accounted to any
	// listed process (the kernel, other programs on the machine).
	OtherCPUSeconds float64 `json:"other_cpu_seconds"`
}

// sampler samples the RSS and CPU time of named processes every interval
// and reports their use over the window between start and stop. A name is
// one process (a service) or a group whose pids change (PostgreSQL
// backends), refreshed from a callback.
type sampler struct {
	interval time.Duration

	mu       sync.Mutex
	entries  []*entry
	groups   map[string]func() []int
	started  time.Time
	machine0 cpuTimes
	stopCh   chan struct{}
	done     chan struct{}
}

type entry struct {
	name    string
	group   bool
	base    map[int]int64 // pid -> CPU ticks at window start (or when first seen)
	last    map[int]int64 // pid -> latest CPU ticks
	peakRSS int64         // KiB
}

func newSampler(interval time.Duration) *sampler {
	return &sampler{interval: interval, groups: map[string]func() []int{}}
}

func (s *sampler) entry(name string, group bool) *entry {
	for _, e := range s.entries {
		if e.name == name {
			return e
		}
	}
	e := &entry{name: name, group: group, base: map[int]int64{}, last: map[int]int64{}}
	s.entries = append(s.entries, e)
	return e
}

// add tracks pid under name. fresh means the process starts inside the
// window, so all of its CPU time counts; otherwise only what it spends
// from now on.
func (s *sampler) add(name string, pid int, fresh bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entry(name, false)
	s.track(e, pid, fresh)
}

func (s *sampler) track(e *entry, pid int, fresh bool) {
	if _, ok := e.base[pid]; ok {
		return
	}
	var base int64
	if r, err := readProc(pid); err == nil {
		e.last[pid] = r.cpuTicks
		if !fresh {
			base = r.cpuTicks
		}
	} else {
		return // gone, or not on this machine
	}
	e.base[pid] = base
}

// addGroup tracks the pids pids returns under name, asking again every
// few samples; pids first seen after start count from zero.
func (s *sampler) addGroup(name string, pids func() []int) {
	s.mu.Lock()
	s.groups[name] = pids
	s.entry(name, true)
	s.mu.Unlock()
	s.refreshGroup(name, false)
}

func (s *sampler) refreshGroup(name string, fresh bool) {
	s.mu.Lock()
	f := s.groups[name]
	s.mu.Unlock()
	pids := f() // may query PostgreSQL: not under the lock
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entry(name, true)
	for _, pid := range pids {
		s.track(e, pid, fresh)
	}
}

// start opens the window: CPU counts from now.
func (s *sampler) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started = time.Now()
	s.machine0, _ = readCPUTimes()
	s.stopCh, s.done = make(chan struct{}), make(chan struct{})
	s.sampleLocked()
	go s.loop()
}

func (s *sampler) loop() {
	defer close(s.done)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-s.stopCh:
			return
		case <-t.C:
		}
		if n%8 == 0 { // every 2 s at the default interval
			s.mu.Lock()
			names := make([]string, 0, len(s.groups))
			for name := range s.groups {
				names = append(names, name)
			}
			s.mu.Unlock()
			for _, name := range names {
				s.refreshGroup(name, true)
			}
		}
		s.mu.Lock()
		s.sampleLocked()
		s.mu.Unlock()
	}
}

func (s *sampler) sampleLocked() {
	for _, e := range s.entries {
		var rss int64
		for pid := range e.base {
			r, err := readProc(pid)
			if err != nil {
				continue // exited: keep its last reading
			}
			e.last[pid] = r.cpuTicks
			rss += r.rssKB
		}
		if rss > e.peakRSS {
			e.peakRSS = rss
		}
	}
}

// stop closes the window and reports it; jobs (if > 0) is the number of
// jobs the window processed, for the per-100k figures.
func (s *sampler) stop(jobs int64) Usage {
	close(s.stopCh)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sampleLocked()
	wall := time.Since(s.started).Seconds()
	tick := float64(clockTicks())
	u := Usage{Seconds: wall, Jobs: jobs}
	var accounted float64
	for _, e := range s.entries {
		var ticks int64
		for pid, base := range e.base {
			ticks += e.last[pid] - base
		}
		r := ResourceUse{Name: e.name, Processes: len(e.base), CPUSeconds: float64(ticks) / tick}
		if wall > 0 {
			r.CPUPercent = 100 * r.CPUSeconds / wall
		}
		if jobs > 0 {
			r.CPUPer100k = r.CPUSeconds * 100_000 / float64(jobs)
		}
		if !e.group {
			r.PeakRSSMB = float64(e.peakRSS) / 1024
		}
		accounted += r.CPUSeconds
		u.Procs = append(u.Procs, r)
	}
	if m1, err := readCPUTimes(); err == nil && m1.total > s.machine0.total {
		busy := float64(m1.busy-s.machine0.busy) / tick
		u.MachineBusyPercent = 100 * float64(m1.busy-s.machine0.busy) / float64(m1.total-s.machine0.total)
		u.OtherCPUSeconds = max(0, busy-accounted)
	}
	return u
}

// procReading is one look at /proc/PID.
type procReading struct {
	rssKB    int64
	cpuTicks int64 // utime + stime
}

func readProc(pid int) (procReading, error) {
	var r procReading
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return r, err
	}
	// "pid (comm) state ppid ...": fields after the last ')' start at
	// field 3 (state); utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return r, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return r, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	if f[0] == "Z" {
		return r, fmt.Errorf("/proc/%d: zombie", pid)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	r.cpuTicks = ut + st
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return r, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			r.rssKB, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			break
		}
	}
	return r, nil
}

// cpuTimes is the machine's CPU time from the first line of /proc/stat.
type cpuTimes struct{ busy, total int64 }

func readCPUTimes() (cpuTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var t cpuTimes
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i >= 8 { // guest time is already in user
			break
		}
		t.total += n
		if i != 3 && i != 4 { // idle, iowait
			t.busy += n
		}
	}
	return t, nil
}

var (
	clkTckOnce sync.Once
	clkTck     int64
)

// clockTicks is the kernel's USER_HZ (the unit of /proc/PID/stat times),
// read from the auxiliary vector (AT_CLKTCK); 100 if that fails.
func clockTicks() int64 {
	clkTckOnce.Do(func() {
		clkTck = 100
		b, err := os.ReadFile("/proc/self/auxv")
		if err != nil || runtime.GOARCH == "386" || runtime.GOARCH == "arm" {
			return
		}
		const atClkTck = 17
		for i := 0; i+16 <= len(b); i += 16 {
			if binary.NativeEndian.Uint64(b[i:]) == atClkTck {
				if v := int64(binary.NativeEndian.Uint64(b[i+8:])); v > 0 {
					clkTck = v
				}
				return
			}
		}
	})
	return clkTck
}

// sortUse orders a usage's processes by CPU time, largest first.
func sortUse(u *Usage) {
	slices.SortStableFunc(u.Procs, func(a, b ResourceUse) int {
		switch {
		case a.CPUSeconds > b.CPUSeconds:
			return -1
		case a.CPUSeconds < b.CPUSeconds:
			return 1
		}
		return 0
	})
}
