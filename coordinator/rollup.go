package coordinator

import (
	"context"
	"time"
)

// RollupRetention is how long the per-minute rollup behind the console's
// charts is kept (store.RollupCleanup, run with the retention cleaner).
const RollupRetention = 7 * 24 * time.Hour

// rollupDelay is how long after a minute ends its rollup is written: the
// results applied in its last moments have committed by then.
const rollupDelay = 5 * time.Second

// rollup writes the rollup of the newest minute that ended at least
// rollupDelay before now, unless it was written already (last is the
// minute after the one last written). It returns the new last. A minute
// this leader missed (it was not leading, or PostgreSQL was away) stays a
// gap in the charts: its queue depth cannot be known afterwards.
func (m *maintainer) rollup(ctx context.Context, now, last time.Time) time.Time {
	end := now.Add(-rollupDelay).Truncate(time.Minute)
	if !end.After(last) {
		return last
	}
	if _, err := m.store.RollupWrite(ctx, m.l.epoch, end.Add(-time.Minute)); err != nil {
		m.storeError(ctx, storeOpRollup, err)
		return last
	}
	return end
}

// cleanRollup deletes the rollup rows past RollupRetention.
func (m *maintainer) cleanRollup(ctx context.Context) {
	if _, err := m.store.RollupCleanup(ctx, m.l.epoch, RollupRetention); err != nil {
		m.storeError(ctx, storeOpRollup, err)
	}
}
