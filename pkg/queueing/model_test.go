package queueing

import (
	"math"
	"testing"
)

var mmc = Model{ServiceTime: 1, Slots: 1, Ca2: 1, Cs2: 1}

// TestTasksMatchUtilizationTable checks the figures the SLO policy is
// argued from: for P(wait > S/2) ≤ 5 % under M/M/c, the utilization that
// meets the objective is 0.33 at an offered load of 1, 0.71 at 10, 0.91 at
// 50 and 0.95 at 100.
func TestTasksMatchUtilizationTable(t *testing.T) {
	slo := SLO{Wait: 0.5, Percentile: 95}
	for _, tc := range []struct {
		load float64
		want int32
		use  float64
	}{{1, 3, 0.33}, {10, 14, 0.71}, {50, 55, 0.91}, {100, 105, 0.95}} {
		got, met := mmc.Tasks(tc.load, slo, 1000)
		if got != tc.want || !met {
			t.Errorf("load %g: %d tasks (met %v), want %d", tc.load, got, met, tc.want)
		}
		if use := tc.load / float64(got); math.Abs(use-tc.use) > 0.005 {
			t.Errorf("load %g: utilization %.3f, want %.2f", tc.load, use, tc.use)
		}
	}
}

func TestTail(t *testing.T) {
	for _, tc := range []struct {
		name  string
		m     Model
		tasks int32
		rate  float64
		wait  float64
		want  float64
	}{
		// M/M/1 at ρ = 0.5: P(W > t) = ρ·e^−(1−ρ)t/S.
		{"M/M/1", mmc, 1, 0.5, 2, 0.5 * math.Exp(-1)},
		{"M/M/1 at t = 0 is Erlang C", mmc, 1, 0.5, 0, 0.5},
		// M/M/2 at a = 1: C = 1/3, decay (c − a)/S = 1.
		{"M/M/2", mmc, 2, 1, 1, math.Exp(-1) / 3},
		// Two slots per task are the same queue as two tasks of one.
		{"slots pool", Model{ServiceTime: 1, Slots: 2, Ca2: 1, Cs2: 1}, 1, 1, 1, math.Exp(-1) / 3},
		// Ca² = 3 doubles the stretch v, halving the decay, and C is
		// taken at 1 + 1/√2 servers: between C(1, 1) = 1 and C(2, 1) = 1/3.
		{"bursty", Model{ServiceTime: 1, Slots: 1, Ca2: 3, Cs2: 1}, 2, 1, 1,
			((1 - 1/math.Sqrt2) + 1/math.Sqrt2/3) * math.Exp(-0.5)},
		// Smooth arrivals (v = 1/2) wait as often as 2 + 2√2 servers
		// offered 2 erlangs: between C(4, 2) = 4/23 and C(5, 2).
		{"smooth", Model{ServiceTime: 1, Slots: 1, Ca2: 0, Cs2: 1}, 4, 2, 0,
			(1-(2*math.Sqrt2-2))*4/23 + (2*math.Sqrt2-2)*erlangCByFactorials(5, 2)},
		// The service time scales the decay: S = 4 s, rate 0.25 gives a = 1.
		{"slow service", Model{ServiceTime: 4, Slots: 1, Ca2: 1, Cs2: 1}, 2, 0.25, 4, math.Exp(-1) / 3},
		{"clockwork", Model{ServiceTime: 1, Slots: 1}, 2, 1, 1, 0},
		{"overloaded", mmc, 2, 2, 100, 1},
		{"no load", mmc, 0, 0, 1, 0},
		{"no tasks", mmc, 0, 1, 1, 1},
	} {
		if got := tc.m.Tail(tc.tasks, tc.rate, tc.wait); !near(got, tc.want, 1e-12) {
			t.Errorf("%s: tail %.12g, want %.12g", tc.name, got, tc.want)
		}
	}
}

func TestWaitPercentile(t *testing.T) {
	slo := SLO{Wait: 10, Percentile: 95}
	// M/M/1 at ρ = 0.5: 0.5·e^−t/2 = 0.05 at t = 2 ln 10.
	if got, want := mmc.WaitPercentile(1, 0.5, slo), 2*math.Log(10); !near(got, want, 1e-12) {
		t.Errorf("M/M/1 p95 wait %v, want %v", got, want)
	}
	if got := mmc.WaitPercentile(10, 1, slo); got != 0 {
		t.Errorf("an idle pool's p95 wait is %v, want 0", got)
	}
	if got := mmc.WaitPercentile(2, 3, slo); !math.IsInf(got, 1) {
		t.Errorf("an overloaded pool's p95 wait is %v, want +Inf", got)
	}
	// The percentile is where the tail equals the excess share.
	m := Model{ServiceTime: 3, Slots: 8, Ca2: 2.5, Cs2: 0.7}
	for _, tasks := range []int32{4, 5, 9} {
		w := m.WaitPercentile(tasks, 10, slo)
		if tail := m.Tail(tasks, 10, w); w > 0 && !near(tail, 0.05, 1e-9) {
			t.Errorf("%d tasks: tail at the p95 wait %v is %v, want 0.05", tasks, w, tail)
		}
	}
}

// TestTasksIsTheSmallest: the count meets the SLO and one task fewer does
// not, over pools from one slot to thousands.
func TestTasksIsTheSmallest(t *testing.T) {
	slo := SLO{Wait: 10, Percentile: 95}
	for _, m := range []Model{
		{ServiceTime: 30, Slots: 8, Ca2: 1, Cs2: 1},
		{ServiceTime: 2, Slots: 1, Ca2: 4, Cs2: 0.5},
		{ServiceTime: 12, Slots: 256, Ca2: 1.5, Cs2: 1},
		{ServiceTime: 60, Slots: 4, Ca2: 0, Cs2: 0},
	} {
		for _, rate := range []float64{0.01, 0.5, 3, 40, 900} {
			n, met := m.Tasks(rate, slo, 100000)
			if !met {
				t.Fatalf("%+v at %g/s: not met within 100000 tasks", m, rate)
			}
			if m.Tail(n, rate, slo.Wait) > 0.05 {
				t.Errorf("%+v at %g/s: %d tasks miss the SLO", m, rate, n)
			}
			if n > 0 && m.Tail(n-1, rate, slo.Wait) <= 0.05 {
				t.Errorf("%+v at %g/s: %d tasks already meet the SLO, got %d", m, rate, n-1, n)
			}
		}
	}
}

func TestTasksLimit(t *testing.T) {
	slo := SLO{Wait: 10, Percentile: 95}
	m := Model{ServiceTime: 10, Slots: 4, Ca2: 1, Cs2: 1}
	// 10/s × 10 s = 100 busy slots: 25 tasks only keep up, more are needed.
	need, _ := m.Tasks(10, slo, 1000)
	if need <= 25 {
		t.Fatalf("need %d tasks, want more than 25", need)
	}
	if got, met := m.Tasks(10, slo, need-1); got != need-1 || met {
		t.Errorf("limit %d: got %d met %v, want the limit, not met", need-1, got, met)
	}
	if got, met := m.Tasks(10, slo, 20); got != 20 || met {
		t.Errorf("limit below the load: got %d met %v", got, met)
	}
	if got, met := m.Tasks(0, slo, 0); got != 0 || !met {
		t.Errorf("no load: got %d met %v, want 0 met", got, met)
	}
	if got, met := m.Tasks(math.Inf(1), slo, 7); got != 7 || met {
		t.Errorf("infinite load: got %d met %v", got, met)
	}
}

func FuzzTasks(f *testing.F) {
	f.Add(3.0, 30.0, int32(8), 1.0, 1.0, 10.0, 95.0, 0.5)
	f.Add(0.0, 0.0, int32(0), 0.0, 0.0, 0.0, 0.0, 0.0)
	f.Add(5000.0, 1.0, int32(1), 16.0, 1.0, 1.0, 99.9, 1.0)
	f.Add(1e9, 1e9, int32(1<<30), -1.0, math.NaN(), -5.0, 200.0, -1.0)
	f.Fuzz(func(t *testing.T, rate, service float64, slots int32, ca2, cs2, wait, pct, more float64) {
		m := Model{ServiceTime: service, Slots: slots, Ca2: ca2, Cs2: cs2}
		slo := SLO{Wait: wait, Percentile: pct}
		const limit = 100000
		n, met := m.Tasks(rate, slo, limit)
		if n < 0 || n > limit {
			t.Fatalf("tasks %d outside [0, %d]", n, limit)
		}
		if met && m.Tail(n, rate, slo.Wait) > slo.excess()*(1+1e-9) {
			t.Fatalf("%d tasks reported to meet the SLO, tail %v", n, m.Tail(n, rate, slo.Wait))
		}
		// More load never needs fewer tasks.
		if more = math.Abs(more); !math.IsNaN(more) && rate >= 0 {
			n2, met2 := m.Tasks(rate+more, slo, limit)
			if met2 && (n2 < n || !met) {
				t.Fatalf("rate %v needs %d (met %v), rate %v needs %d (met %v)", rate, n, met, rate+more, n2, met2)
			}
		}
		if w := m.WaitPercentile(n, rate, slo); math.IsNaN(w) || w < 0 {
			t.Fatalf("wait percentile %v", w)
		}
		if tail := m.Tail(n, rate, slo.Wait); math.IsNaN(tail) || tail < 0 || tail > 1 {
			t.Fatalf("tail %v", tail)
		}
	})
}

// BenchmarkTasks sizes a pool of about 1,300 tasks of 8 slots (10,000
// busy slots): the warm-started recursion makes it cost O(√a), not O(a).
func BenchmarkTasks(b *testing.B) {
	m := Model{ServiceTime: 10, Slots: 8, Ca2: 2, Cs2: 1}
	slo := SLO{Wait: 10, Percentile: 99}
	for b.Loop() {
		if n, met := m.Tasks(1000, slo, 100000); !met || n < 1250 {
			b.Fatalf("%d tasks, met %v", n, met)
		}
	}
}
