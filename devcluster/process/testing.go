package process

import (
	"context"
	"testing"
	"time"
)

// MustStart is g.Start failing t on error.
func MustStart(t testing.TB, g *Group, s Spec) *Process {
	t.Helper()
	p, err := g.Start(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// MustBeHealthy is p.WaitHealthy within d, failing t on error.
func MustBeHealthy(t testing.TB, p *Process, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := p.WaitHealthy(ctx, nil); err != nil {
		t.Fatal(err)
	}
}
