package baseline

import (
	"slices"
	"testing"
	"time"

	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// An interval's count is what the intervals a lag earlier needed, the
// most of a lookback before that, with the headroom on top; the first
// count stands for those not yet known.
func TestLagged(t *testing.T) {
	counts := []int32{2, 4, 1, 1, 6, 1, 1}
	for _, tt := range []struct {
		name     string
		lag      int
		lookback int
		headroom float64
		want     []int32
	}{
		{"known at once", 0, 0, 0, []int32{2, 4, 1, 1, 6, 1, 1}},
		{"a start-up of two intervals late", 2, 0, 0, []int32{2, 2, 2, 4, 1, 1, 6}},
		{"the most of two intervals before", 2, 2, 0, []int32{2, 2, 2, 4, 4, 4, 6}},
		{"a lookback longer than the trace so far", 1, 10, 0, []int32{2, 2, 4, 4, 4, 6, 6}},
		{"a headroom rounded up", 2, 0, 0.5, []int32{3, 3, 3, 6, 2, 2, 9}},
		{"a headroom that makes a whole count", 0, 0, 0.25, []int32{3, 5, 2, 2, 8, 2, 2}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Lagged(counts, tt.lag, tt.lookback, tt.headroom); !slices.Equal(got, tt.want) {
				t.Errorf("Lagged(%v, %d, %d, %v) = %v, want %v", counts, tt.lag, tt.lookback, tt.headroom, got, tt.want)
			}
		})
	}
}

// The search's headrooms run from none upwards in even steps, as its
// bisection takes them to.
func TestOracleLagHeadrooms(t *testing.T) {
	h := OracleLagHeadrooms
	if h[0] != 0 || !slices.IsSorted(h) || h[len(h)-1] < 2 {
		t.Errorf("headrooms %v: want 0 first, ascending, to at least 2", h)
	}
}

// oracle-lag has the workers an interval needs Ready as it begins, each
// created its own start-up before; oracle-lag-drawn asks for them as the
// interval a lag before it begins, each starting then. At a start-up of
// exactly the lag both hold the same Ready workers, the lagged schedule's,
// and scale down with it; oracle-lag-drawn's are on their way for the
// lag before.
func TestOracleLagDrawnStarts(t *testing.T) {
	counts := []int32{1, 1, 4, 4, 1, 1, 1, 1}
	for _, tc := range []struct {
		drawn        bool
		ready, total []int
	}{
		{false, []int{1, 1, 1, 1, 4, 4, 1, 1}, []int{1, 1, 1, 1, 4, 4, 1, 1}},
		{true, []int{1, 1, 1, 1, 4, 4, 1, 1}, []int{1, 1, 4, 4, 4, 4, 1, 1}},
	} {
		p := sim.NewPool(workload.Trace{}, t0, 1, 2*time.Minute)
		s := &schedule{counts: Lagged(counts, 2, 0, 0), every: time.Minute, ahead: true}
		if tc.drawn {
			s.ahead, s.asked = false, Lagged(counts, 0, 0, 0)
		}
		s.Start(p)
		var ready, total []int
		for k := range counts {
			sim.PlayUntil(p, s, t0.Add(time.Duration(k)*time.Minute), func(f func(*sim.Pool)) { f(p) })
			s.Step(p)
			n := 0
			for _, w := range p.Workers() {
				if w.Ready(p.Now()) && !w.Draining {
					n++
				}
			}
			ready, total = append(ready, n), append(total, len(p.Workers()))
		}
		if !slices.Equal(ready, tc.ready) || !slices.Equal(total, tc.total) {
			t.Errorf("drawn %v: Ready %v of %v a minute, want %v of %v", tc.drawn, ready, total, tc.ready, tc.total)
		}
	}
}
