package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestCronLeaderKilledAtTick: a schedule fires every second with a standby
// coordinator running; the leader is killed (SIGKILL) right at a tick.
// Every tick from the first to well after the take-over is exactly one
// job: none lost in the change of leader (the standby enqueues the late
// ones within SCHEDULE_GRACE), none enqueued twice (the epoch fence and the
// unique key of schedule and tick).
func TestCronLeaderKilledAtTick(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c1 := c.startCoordinator("c1")
	c.eventually(10*time.Second, "c1 to lead", func() bool { return c.health(c1)["role"] == "leader" })
	c2 := c.startCoordinator("c2")
	c.startSubmitter()

	code, sc := c.do("POST", c.submitter+"/schedules", map[string]any{"name": "every-second", "cron": "* * * * * *",
		"overlap": "allow", "catch_up": "none", "job": map[string]any{"name": "noop"}})
	if code != http.StatusCreated {
		t.Fatalf("create schedule: %d %v", code, sc)
	}
	id := sc["schedule_id"].(string)
	first, err := time.Parse(time.RFC3339, sc["next_fire_at"].(string))
	if err != nil {
		t.Fatal(err)
	}

	ctx := ctxT(t, 2*time.Minute)
	conn, err := pgx.Connect(ctx, c.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	perTick := func() map[time.Time]int {
		rows, err := conn.Query(ctx, `SELECT schedule_tick, count(*) FROM jobs WHERE schedule_id = $1 GROUP BY 1`, id)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
			tick time.Time
			n    int
		}, error) {
			var v struct {
				tick time.Time
				n    int
			}
			return v, r.Scan(&v.tick, &v.n)
		})
		if err != nil {
			t.Fatal(err)
		}
		m := map[time.Time]int{}
		for _, v := range out {
			m[v.tick.UTC()] = v.n
		}
		return m
	}
	c.eventually(10*time.Second, "two ticks enqueued", func() bool { return len(perTick()) >= 2 })

	// Kill the leader just after a whole second, while it enqueues that
	// tick (it wakes at the tick, on the same host's clock). A sleep: the
	// fault is timed by that clock, and the enqueue it must interrupt
	// gives no signal before it commits.
	now := time.Now()
	killTick := now.Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(killTick.Add(2 * time.Millisecond)))
	c1.kill(t)
	killed := time.Now()
	c.eventually(10*time.Second, "c2 to take over", func() bool { return c.health(c2)["role"] == "leader" })
	t.Logf("leader killed %v after the tick %v; c2 led %v later", killed.Sub(killTick), killTick.Format(time.TimeOnly), time.Since(killed))

	last := time.Now().UTC().Truncate(time.Second).Add(3 * time.Second)
	c.eventually(15*time.Second, "ticks enqueued after the take-over", func() bool { return perTick()[last] == 1 })
	ticks := perTick()
	for tick := first.UTC(); !tick.After(last); tick = tick.Add(time.Second) {
		if n := ticks[tick]; n != 1 {
			t.Errorf("tick %v: %d jobs, want 1", tick.Format(time.TimeOnly), n)
		}
	}
	var byOld bool
	if err := conn.QueryRow(ctx, `SELECT created_at < $3 FROM jobs WHERE schedule_id = $1 AND schedule_tick = $2`,
		id, killTick, killed).Scan(&byOld); err != nil {
		t.Fatalf("the job of the tick the leader was killed at: %v", err)
	}
	t.Logf("the killed tick's job was enqueued by the %s leader", map[bool]string{true: "old", false: "new"}[byOld])
	// The API shows the ticks.
	code, got := c.do("GET", c.submitter+"/schedules/"+id, nil)
	if code != http.StatusOK || got["last_fire_at"] == nil || got["next_fire_at"] == nil {
		t.Errorf("GET schedule: %d %v", code, got)
	}
}
