//go:build race

package job

// raceEnabled: under the race detector sync.Pool drops some of what is put
// back (on purpose, to find misuse), so code that reuses pooled buffers,
// as encoding/json's scanner does, allocates now and then.
const raceEnabled = true
