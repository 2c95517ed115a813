package queueing

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"testing"
)

// freeAt is a min-heap of the times the slots come free.
type freeAt []float64

func (h freeAt) Len() int           { return len(h) }
func (h freeAt) Less(i, j int) bool { return h[i] < h[j] }
func (h freeAt) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *freeAt) Push(x any)        { *h = append(*h, x.(float64)) }
func (h *freeAt) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// simulateTail runs n requests through one first-come-first-served queue
// in front of c slots and returns the share that waited longer than t.
// Arrivals are Poisson at rate, or, with ca2 > 1, a balanced two-phase
// hyperexponential of that squared coefficient of variation; service times
// are exponential with mean s.
func simulateTail(r *rand.Rand, c int, rate, s, ca2, t float64, n int) float64 {
	next := func() float64 { return r.ExpFloat64() / rate }
	if ca2 > 1 {
		p := 0.5 * (1 + math.Sqrt((ca2-1)/(ca2+1)))
		next = func() float64 {
			if r.Float64() < p {
				return r.ExpFloat64() / (2 * p * rate)
			}
			return r.ExpFloat64() / (2 * (1 - p) * rate)
		}
	}
	slots := make(freeAt, c)
	var now float64
	late := 0
	for i := range n {
		now += next()
		start := max(now, slots[0])
		if i >= n/10 && start-now > t { // the first tenth warms the queue up
			late++
		}
		slots[0] = start + r.ExpFloat64()*s
		heap.Fix(&slots, 0)
	}
	return float64(late) / float64(n-n/10)
}

// TestTasksAgainstSimulation runs the count Tasks chooses, and one task
// fewer, through a simulated queue: the model's tail is within a quarter
// of the simulated one (under M/M/c it is Erlang C's exactly), and the
// chosen count meets the SLO where one task fewer does not. With Ca² = 4
// the unscaled Erlang C would have chosen 8 tasks, whose simulated tail is
// 0.09, not 0.05.
func TestTasksAgainstSimulation(t *testing.T) {
	slo := SLO{Wait: 1, Percentile: 95}
	for _, tc := range []struct {
		name string
		m    Model
		rate float64
	}{
		{"M/M/c", Model{ServiceTime: 10, Slots: 8, Ca2: 1, Cs2: 1}, 5},
		{"bursty arrivals", Model{ServiceTime: 10, Slots: 8, Ca2: 4, Cs2: 1}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, met := tc.m.Tasks(tc.rate, slo, 1000)
			if !met {
				t.Fatal("not met")
			}
			r := rand.New(rand.NewPCG(7, 11))
			for _, tasks := range []int32{n, n - 1} {
				got := simulateTail(r, int(tasks)*int(tc.m.Slots), tc.rate, tc.m.ServiceTime, tc.m.Ca2, slo.Wait, 400000)
				want := tc.m.Tail(tasks, tc.rate, slo.Wait)
				t.Logf("%d tasks: simulated P(wait > %gs) = %.4f, model %.4f", tasks, slo.Wait, got, want)
				if math.Abs(got-want) > 0.25*want+0.003 {
					t.Errorf("%d tasks: simulated tail %.4f, the model gives %.4f", tasks, got, want)
				}
				if meets := got <= 0.05; meets != (tasks == n) {
					t.Errorf("%d tasks: simulated tail %.4f, the chosen count is %d", tasks, got, n)
				}
			}
		})
	}
}
