package baseline

import (
	"slices"
	"testing"
	"time"

	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// smallestMeeting finds the smallest count that meets from any guess, and
// the limit when none does.
func TestSmallestMeeting(t *testing.T) {
	for _, tc := range []struct{ need, guess, limit, want int32 }{
		{need: 5, guess: 0, limit: 40, want: 5},
		{need: 5, guess: 5, limit: 40, want: 5},
		{need: 5, guess: 17, limit: 40, want: 5},
		{need: 0, guess: 9, limit: 40, want: 0},
		{need: 39, guess: 2, limit: 40, want: 39},
		{need: 50, guess: 2, limit: 40, want: 40},
	} {
		tried := 0
		got := smallestMeeting(tc.guess, tc.limit, func(n int32) bool { tried++; return n >= tc.need })
		if got != tc.want || tried > 16 {
			t.Errorf("need %d from %d: %d after %d trials, want %d", tc.need, tc.guess, got, tried, tc.want)
		}
	}
}

// A count that dips and comes back within a start-up keeps its workers;
// one that stays down longer lets them go.
func TestKeepThroughDips(t *testing.T) {
	got := keepThroughDips([]int32{4, 2, 4, 4, 1, 1, 1, 1, 3}, 2*time.Minute)
	want := []int32{4, 4, 4, 4, 1, 1, 1, 1, 3}
	// At 4 the count falls to 1 and comes back to 3 only after four
	// intervals, beyond the 2-minute start-up.
	if !slices.Equal(got, want) {
		t.Errorf("kept %v, want %v", got, want)
	}
	got = keepThroughDips([]int32{4, 1, 1, 3}, 2*time.Minute)
	if want := []int32{4, 3, 3, 3}; !slices.Equal(got, want) {
		t.Errorf("kept %v, want %v: the 3 needed again within 2 minutes stay", got, want)
	}
}

// The intervals whose arrivals miss the SLO are found from the outcomes
// of the whole replay, and each of them and the one after it get an
// eighth more workers, at least one, once.
func TestRepairMissedIntervals(t *testing.T) {
	tr := workload.Trace{}
	var outcomes []sim.Outcome
	// Interval 0: 20 requests within 2 s; interval 1: 20, two of them (10 %)
	// at 5 s; interval 3: 20, one (5 %) at 5 s, which p95 allows.
	for k, late := range map[int]int{0: 0, 1: 2, 3: 1} {
		for i := range 20 {
			tr.Requests = append(tr.Requests, workload.Served{Arrival: time.Duration(k)*OracleSLOInterval + time.Duration(i)*time.Second})
			ttft := time.Second
			if i < late {
				ttft = 5 * time.Second
			}
			outcomes = append(outcomes, sim.Outcome{Started: true, Wait: ttft / 2, TTFT: ttft, E2E: ttft + time.Second})
		}
	}
	// A map's order is random: sort the requests by arrival, as a trace
	// is, and the outcomes with them.
	tr.Requests, outcomes = sortedAlike(tr.Requests, outcomes)
	missed := missedIntervals(tr, outcomes, 5, sim.SLOTargets{TTFT: 2 * time.Second, Percentile: 95})
	if !slices.Equal(missed, []int{1}) {
		t.Fatalf("missed %v, want [1]", missed)
	}
	got := raiseMissed([]int32{16, 16, 3, 1, 1}, []int{1, 2})
	if want := []int32{16, 18, 4, 2, 1}; !slices.Equal(got, want) {
		t.Errorf("raised %v, want %v", got, want)
	}
}

// sortedAlike sorts requests by arrival and outcomes with them.
func sortedAlike(reqs []workload.Served, outcomes []sim.Outcome) ([]workload.Served, []sim.Outcome) {
	idx := make([]int, len(reqs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return int(reqs[a].Arrival - reqs[b].Arrival) })
	r, o := make([]workload.Served, len(reqs)), make([]sim.Outcome, len(reqs))
	for i, j := range idx {
		r[i], o[i] = reqs[j], outcomes[j]
	}
	return r, o
}
