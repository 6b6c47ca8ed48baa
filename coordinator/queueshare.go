package coordinator

import (
	"github.com/dtsched/dts/internal/store"
	"github.com/dtsched/dts/internal/wire"
)

// queueSettings is the leader's copy of the queues table: the queues that
// are paused or capped. The dispatcher reloads it every poll interval;
// while it is empty and no worker names its queues, every claim is the
// plain one (dts_claim_jobs), exactly as before queues existed. The claim
// by queue reads the table again in its own transaction, so a stale copy
// can only delay a pause by one reload, never break a cap.
type queueSettings struct {
	loaded bool
	paused map[string]bool
	capped map[string]int
}

func newQueueSettings(rows []store.QueueSetting) queueSettings {
	s := queueSettings{loaded: true, paused: map[string]bool{}, capped: map[string]int{}}
	for _, r := range rows {
		if r.Paused {
			s.paused[r.Name] = true
		}
		if r.Concurrency > 0 {
			s.capped[r.Name] = r.Concurrency
		}
	}
	return s
}

// plain reports whether a claim for every queue may ignore queues: the
// settings are known and nothing is paused or capped. Until they are
// known (the first load failed), claims honour queues, to be safe.
func (s queueSettings) plain() bool { return s.loaded && len(s.paused) == 0 && len(s.capped) == 0 }

// shareSplitter divides a group's slots among the queues its workers serve,
// by smooth weighted round robin: for each slot, every queue that may run
// gains its weight in credit, and the one with the most credit (the first
// listed on a tie) takes the slot and gives back the total weight. Credit
// carries over from one round to the next, so a queue of weight 1 among
// weights 6 and 3 gets one slot in ten even when rounds offer one slot at
// a time: no queue with a weight above 0 starves. A queue of weight 0
// gets no share, only what the others leave (the claim's second pass).
type shareSplitter struct {
	credit map[string]int
}

// split returns the queues to claim from (those not known to be paused)
// and each one's share of n slots.
func (sp *shareSplitter) split(qs []wire.QueueWeight, paused map[string]bool, n int) (names []string, shares []int32) {
	if sp.credit == nil {
		sp.credit = map[string]int{}
	}
	// The credits in a slice for the round, not the map: the loop below
	// runs once per slot and queue, where a map lookup each made the split
	// the dispatcher's largest cost with many queues (BenchmarkShareSplit1000).
	total := 0
	var weights, credit []int
	for _, q := range qs {
		if paused[q.Name] {
			continue
		}
		names = append(names, q.Name)
		shares = append(shares, 0)
		weights = append(weights, q.Weight)
		credit = append(credit, sp.credit[q.Name])
		total += q.Weight
	}
	if total == 0 {
		return names, shares
	}
	for range n {
		best := -1
		for i, w := range weights {
			if w > 0 {
				credit[i] += w
				if best < 0 || credit[i] > credit[best] {
					best = i
				}
			}
		}
		shares[best]++
		credit[best] -= total
	}
	for i, name := range names {
		if weights[i] > 0 {
			sp.credit[name] = credit[i]
		}
	}
	return names, shares
}
