// Package e2e holds end-to-end tests: they build the real submitter,
// coordinator and worker binaries, run them against a real PostgreSQL and
// Redis started by the test harness, and drive them over HTTP, including
// crashes (SIGKILL), pauses (SIGSTOP), graceful stops and a Redis flush.
package e2e
