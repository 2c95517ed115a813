package queueing

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestArrivalsFromCompletions(t *testing.T) {
	for _, tc := range []struct {
		name                          string
		completions, now, last, dt    float64
		wantArrivals, wantCompletions float64
	}{
		{"steady", 5, 40, 40, 15, 5, 5},
		{"pool grows by 30 in 15 s", 5, 70, 40, 15, 7, 5},
		{"pool drains", 5, 10, 40, 15, 3, 5},
		{"first reading", 5, 70, 0, 0, 5, 5},
		{"draining faster than finishing is no negative rate", 0, 0, 40, 10, 0, 4},
		{"NaN counts as no request", 2, math.NaN(), 3, 1, 0, 3},
	} {
		if got := ArrivalsFromCompletions(tc.completions, tc.now, tc.last, tc.dt); !near(got, tc.wantArrivals, 1e-12) {
			t.Errorf("%s: arrivals %v, want %v", tc.name, got, tc.wantArrivals)
		}
		// The converse: the same pool seen from its arrivals gives the
		// completions back, unless the arrivals were clamped at 0.
		if got := CompletionsFromArrivals(tc.wantArrivals, tc.now, tc.last, tc.dt); !near(got, tc.wantCompletions, 1e-12) {
			t.Errorf("%s: completions %v, want %v", tc.name, got, tc.wantCompletions)
		}
	}
}

func TestLittle(t *testing.T) {
	var l Little
	if _, ok := l.ServiceTime(); ok {
		t.Fatal("a service time before any reading")
	}
	// 40 running, 4 finishing a second: 10 s each, from the first reading.
	l = l.Observe(40, 4, 0.3)
	if s, ok := l.ServiceTime(); !ok || !near(s, 10, 1e-12) {
		t.Fatalf("service time %v %v, want 10", s, ok)
	}
	// A quiet reading (2 running, 0.1/s: 20 s) barely moves it: readings
	// weigh by their completions.
	l = l.Observe(2, 0.1, 0.3)
	if s, _ := l.ServiceTime(); s < 10 || s > 10.5 {
		t.Errorf("after a quiet reading %v, want just above 10", s)
	}
	// A lasting change is followed.
	for range 40 {
		l = l.Observe(80, 4, 0.3)
	}
	if s, _ := l.ServiceTime(); !near(s, 20, 1e-3) {
		t.Errorf("after a lasting change %v, want 20", s)
	}
	if got := l.Observe(math.Inf(1), 1, 0.5); got != l {
		t.Errorf("an infinite reading changed the estimate to %+v", got)
	}
	if got := l.Observe(1, 1, 0); got != l {
		t.Errorf("a zero weight changed the estimate to %+v", got)
	}
}

func TestArrivalVariability(t *testing.T) {
	poisson := func(mean float64, n int, r *rand.Rand) []float64 {
		out := make([]float64, n)
		for i := range out {
			// Knuth's method is fine at these means.
			l, k, p := math.Exp(-mean), 0.0, 1.0
			for p *= r.Float64(); p > l; p *= r.Float64() {
				k++
			}
			out[i] = k
		}
		return out
	}
	r := rand.New(rand.NewPCG(1, 2))
	if v := ArrivalVariability(poisson(30, 2000, r)); math.Abs(v-1) > 0.1 {
		t.Errorf("Poisson counts: Ca² %v, want about 1", v)
	}
	// Bursts: every fifth interval brings five times the rest.
	bursty := make([]float64, 200)
	for i := range bursty {
		bursty[i] = 20
		if i%5 == 0 {
			bursty[i] = 100
		}
	}
	if v := ArrivalVariability(bursty); v < 10 {
		t.Errorf("bursty counts: Ca² %v, want well above 1", v)
	}
	// A steady ramp is a trend, not burstiness.
	ramp := make([]float64, 100)
	for i := range ramp {
		ramp[i] = float64(100 + 10*i)
	}
	if v := ArrivalVariability(ramp); v > 0.2 {
		t.Errorf("ramp: Ca² %v, want near 0", v)
	}
	for _, tc := range []struct {
		name   string
		counts []float64
		want   float64
	}{
		{"too few", []float64{1, 50, 1}, 1},
		{"no arrivals", []float64{0, 0, 0, 0, 0}, 1},
		{"constant", []float64{7, 7, 7, 7}, 0},
		{"capped", []float64{0, 1e6, 0, 1e6, 0}, MaxVariability},
		{"NaN counts as 0", []float64{4, math.NaN(), 4, 4}, 16.0 / 9},
	} {
		if got := ArrivalVariability(tc.counts); !near(got, tc.want, 1e-12) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestTrend(t *testing.T) {
	line := []Sample{{0, 10}, {15, 13}, {30, 16}, {45, 19}}
	if got := Trend(line); !near(got, 0.2, 1e-12) {
		t.Errorf("line: slope %v, want 0.2", got)
	}
	noisy := []Sample{{0, 10}, {10, 14}, {20, 10}, {30, 14}}
	if got := Trend(noisy); !near(got, 0.08, 1e-12) {
		t.Errorf("noisy: slope %v, want 0.08", got)
	}
	for _, s := range [][]Sample{nil, {{0, 1}, {1, 5}}, {{5, 1}, {5, 2}, {5, 3}}} {
		if got := Trend(s); got != 0 {
			t.Errorf("%v: slope %v, want 0", s, got)
		}
	}
}

func TestBacklogRate(t *testing.T) {
	for _, tc := range []struct {
		name                                     string
		waiting, rate, capacity, startup, within float64
		want                                     float64
	}{
		// 60 waiting, and 2/s arriving against 1.5/s completed adds 60
		// more over a 120 s start-up: 120 cleared within 90 s.
		{"behind", 60, 2, 1.5, 120, 90, 120.0 / 90},
		{"keeping up", 60, 2, 2, 120, 90, 60.0 / 90},
		// 1.6/s of capacity against 1/s leaves 0.6/s spare, 72 requests
		// in 120 s: a queue of 72 clears, 96 leaves 24.
		{"cleared in time", 72, 1, 1.6, 120, 120, 0},
		{"left over", 96, 1, 1.6, 120, 120, 0.2},
		{"nothing completes yet (onset)", 30, 5, 0, 120, 90, (30 + 600) / 90.0},
		{"nothing waits", 0, 9, 1, 120, 90, 0},
		{"no start-up time", 60, 2, 1, 0, 90, 0},
		{"no horizon", 60, 2, 1, 120, 0, 0},
		{"an unbounded queue stays finite", math.Inf(1), 2, 1, 120, 90, math.MaxFloat64},
	} {
		if got := BacklogRate(tc.waiting, tc.rate, tc.capacity, tc.startup, tc.within); !near(got, tc.want, 1e-12) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestCorrect(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		factor, obs, pred, wait float64
		want                    float64
	}{
		{"agrees", 1, 4, 4, 10, 1},
		{"waits longer", 1, 9, 4, 10, math.Exp(0.05)},
		{"error clamped at one SLO", 1, 100, 0, 10, math.Exp(0.1)},
		{"waits less", 1, 0, 10, 10, math.Exp(-0.1)},
		{"bounded above", 1.95, 100, 0, 10, MaxCorrection},
		{"bounded below", 0.52, 0, 100, 10, MinCorrection},
		{"overloaded prediction", 1.2, 3, math.Inf(1), 10, 1.2},
		{"no observation", 1.2, math.NaN(), 3, 10, 1.2},
		{"a bad factor restarts", 0, 4, 4, 10, 1},
		{"nobody waits, read through the first bucket", 1, 0.285, 0, 10, 1},
		{"within half a second on a short SLO", 1.2, 0.49, 0, 1.9, 1.2},
		{"far within the SLO, a factor above 1 relaxes", 1.2, 0.285, 0, 10, 1.2 * math.Exp(-0.025)},
		{"relaxes to 1, not below", 1.01, 0.285, 0, 10, 1},
		{"a factor below 1 does not relax", 0.8, 0.285, 0, 10, 0.8},
		{"observed near the SLO's quarter does not relax", 1.2, 2.6, 2.4, 10, 1.2},
		{"within a twentieth of the SLO", 1.2, 19.9, 20, 40, 1.2},
		{"just past the tolerance", 1, 1, 0, 10, math.Exp(0.01)},
	} {
		if got := Correct(tc.factor, tc.obs, tc.pred, tc.wait); !near(got, tc.want, 1e-12) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func FuzzEstimators(f *testing.F) {
	f.Add(5.0, 40.0, 30.0, 15.0, 3.0, 0.3, 10.0, 120.0)
	f.Add(math.NaN(), math.Inf(1), -1.0, 0.0, math.Inf(-1), 2.0, -3.0, math.NaN())
	f.Fuzz(func(t *testing.T, c, now, last, dt, running, w, waiting, startup float64) {
		for _, v := range []float64{
			ArrivalsFromCompletions(c, now, last, dt),
			CompletionsFromArrivals(c, now, last, dt),
			BacklogRate(waiting, c, now, running, startup),
			ArrivalVariability([]float64{c, now, last, dt, running}),
			Trend([]Sample{{0, c}, {dt, now}, {2 * dt, last}}),
			Correct(w, waiting, running, startup),
		} {
			if math.IsNaN(v) {
				t.Fatalf("NaN from %v", []float64{c, now, last, dt, running, w, waiting, startup})
			}
		}
		if s, ok := (Little{}).Observe(running, c, w).ServiceTime(); ok && !(s > 0 && !math.IsInf(s, 0)) {
			t.Fatalf("service time %v", s)
		}
	})
}
