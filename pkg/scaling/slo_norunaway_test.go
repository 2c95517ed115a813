package scaling

import (
	"math"
	"strings"
	"testing"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/queueing"
)

// reading is one evaluation's metric values for the SLO policy.
// reading is one evaluation's readings; arrivals below 0 are not read.
type reading struct{ arrivals, completions, running, waiting float64 }

// sloPool is sloBase reading all four roles, from a count of current.
func sloPool(current int32) Inputs {
	in := sloBase(0, 0)
	in.Current, in.Min = current, 1
	return in
}

// drive evaluates the readings one interval apart, each on the count and
// the state the one before left, as the autoscaler does.
func drive(in Inputs, readings ...reading) (Inputs, []Decision) {
	var ds []Decision
	for _, r := range readings {
		in.Now = in.Now.Add(in.Interval)
		in.Metrics = []MetricInput{
			role(gputaskv1.RoleCompletions, r.completions),
			role(gputaskv1.RoleRunning, r.running), role(gputaskv1.RoleWaiting, r.waiting),
		}
		if r.arrivals >= 0 {
			in.Metrics = append(in.Metrics, role(gputaskv1.RoleArrivals, r.arrivals))
		}
		d := Decide(in)
		in.Queue, in.Current, in.Recommendations = d.Queue, d.Desired, d.Recommendations
		ds = append(ds, d)
	}
	return in, ds
}

// repeat is n copies of r.
func repeat(n int, r reading) []reading {
	out := make([]reading, n)
	for i := range out {
		out[i] = r
	}
	return out
}

// steadyAt is a pool serving rate requests a second of 10 s each.
func steadyAt(rate float64) reading { return reading{rate, rate, rate * 10, 0} }

// needs is what rate needs at sloBase's SLO (p95 wait within 10 s, 8 slots
// a task) with requests of service seconds and Poisson arrivals.
func needs(rate, service float64) int32 {
	n, _ := queueing.Model{ServiceTime: service, Slots: 8, Ca2: 1, Cs2: 1}.Tasks(rate, queueing.SLO{Wait: 10, Percentile: 95}, MaxSLOTasks)
	return n
}

// noisy is an hour of traffic around rate (±swing/s, one reading in
// four), so that the history of rises within a start-up fills (from
// rate − swing to rate + swing within one: its 99th percentile is
// 2·swing/s), and then two minutes at rate, with no trend.
func noisy(rate, swing float64) []reading {
	var rs []reading
	for k := 0; k < 240; k++ {
		r := rate
		switch k % 8 {
		case 2:
			r = rate + swing
		case 6:
			r = rate - swing
		}
		rs = append(rs, steadyAt(r))
	}
	return append(rs, repeat(8, steadyAt(rate))...)
}

// TestSLONoRunaway: the count is sound where the readings say little:
// traffic starting with nothing finished yet, after idle, after a restart
// that lost the policy's state, and in a burst shorter than a start-up.
// From idle a step to a rate R asks for no more than R needs at the SLO
// (needs) plus one task.
func TestSLONoRunaway(t *testing.T) {
	const rate = 4.0 // requests/s of 10 s each: 40 busy slots
	tests := []struct {
		name string
		// start is the pool's count and state before the readings.
		start Inputs
		// prime are readings before the ones checked.
		prime, readings []reading
		// most is the largest count any checked reading may ask for.
		most int32
		// last, when set, is the count the last reading must ask for.
		last  int32
		check func(t *testing.T, ds []Decision)
	}{
		{
			// Nothing has finished in the first seconds, and the
			// completions counter's rate shows a stale trickle: running ÷
			// completions would be 10,000 s.
			name:     "onset with a near-zero completion rate",
			start:    sloPool(1),
			readings: []reading{{rate, 0.002, rate * 5, 0}},
			most:     needs(rate, 10) + 1,
		},
		{
			name:     "onset with zero completions",
			start:    sloPool(1),
			readings: []reading{{rate, 0, rate * 5, 0}, {rate, 0, rate * 10, 0}, {rate, rate, rate * 10, 0}},
			most:     needs(rate, 10) + 1, last: needs(rate, 10),
		},
		{
			// Half an hour of idle after a pool that served 10 s
			// requests, then traffic comes back with nothing finished
			// yet: the service time it learned stands, and the step of
			// the rate is neither a trend nor burstiness.
			name:  "after idle",
			start: sloPool(1),
			prime: append(repeat(40, steadyAt(rate)), repeat(120, reading{})...),
			// The first requests to finish are the short ones: half the
			// arrivals, 20 s by Little's law, which the hour learned
			// before outweighs.
			readings: []reading{
				{rate, 0, rate * 5, 0}, {rate, 0, rate * 10, 0}, {rate, rate / 2, rate * 10, 0}, {rate, rate, rate * 10, 0},
			},
			most: needs(rate, 10) + 1, last: needs(rate, 10),
			check: func(t *testing.T, ds []Decision) {
				if s := ds[0].SLO.ServiceTime; s != 10*time.Second {
					t.Errorf("service time at onset %v, want the 10s learned before the idle spell", s)
				}
			},
		},
		{
			// vLLM counts no arrivals: they are derived from the finished
			// requests over the last minute, which climb for a minute
			// after the traffic comes back. Before it, a trickle of a
			// request every 20 s, half a request in the pool on average:
			// idle, though not too thin to count. The climb is no trend,
			// and the step from idle is no rise the history knows to be
			// taken to go on.
			name:  "back from a trickle, with the arrivals from the completions",
			start: sloPool(1),
			prime: append(repeat(40, reading{-1, rate, rate * 10, 0}), repeat(120, reading{-1, 0.05, 0.5, 0})...),
			// The minute's arrivals and completions climb for a minute.
			readings: []reading{
				{-1, rate / 4, rate * 10 / 4, 0}, {-1, rate / 2, rate * 10 / 2, 0}, {-1, rate * 3 / 4, rate * 10 * 3 / 4, 0},
				{-1, rate, rate * 10, 0}, {-1, rate, rate * 10, 0}, {-1, rate, rate * 10, 0},
			},
			most: needs(rate, 10) + 1, last: needs(rate, 10),
		},
		{
			// A restart mid-traffic: no state, and a first reading that
			// shows the steady pool as it is.
			name:     "after a restart with no history",
			start:    sloPool(6),
			readings: []reading{steadyAt(rate), steadyAt(rate), steadyAt(rate)},
			most:     needs(rate, 10) + 1, last: needs(rate, 10),
		},
		{
			name:     "after a restart at onset",
			start:    sloPool(1),
			readings: []reading{{rate, 0, rate * 3, 0}, {rate, 0, rate * 10, 0}, {rate, rate, rate * 10, 0}},
			most:     needs(rate, 10) + 1, last: needs(rate, 10),
		},
		{
			// A restart at night: a request every 15 minutes is too few
			// to learn a service time from, and the pool shrinks to the
			// requests in it rather than holding the day's count.
			name:     "a trickle after a restart",
			start:    sloPool(10),
			readings: []reading{{0.001, 0.001, 2, 0}},
			most:     1, last: 1,
		},
		{
			// Requests of 10 minutes, longer than the 2-minute start-up:
			// 160 waiting ones spread over the start-up would be 1.33/s,
			// 800 busy slots for 160 requests. Each needs one slot.
			name:     "a backlog of long requests",
			start:    with(sloPool(75), func(in *Inputs) { in.Max = 1000 }),
			prime:    repeat(8, reading{1, 1, 600, 0}),
			readings: []reading{{1, 1, 600, 160}},
			most:     needs(1+160.0/600, 600) + 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in, _ := drive(tc.start, tc.prime...)
			_, ds := drive(in, tc.readings...)
			for i, d := range ds {
				if d.Desired > tc.most {
					t.Errorf("reading %d: %d tasks (%s: %s), at most %d", i, d.Desired, d.Reason, d.Message, tc.most)
				}
			}
			if last := ds[len(ds)-1]; tc.last != 0 && last.Desired != tc.last {
				t.Errorf("last reading: %d tasks (%s), want %d", last.Desired, last.Message, tc.last)
			}
			if tc.check != nil {
				tc.check(t, ds)
			}
		})
	}
}

// TestSLOBurstHeadroom: with an hour of traffic behind it, the pool keeps
// headroom for the rises its traffic shows within a start-up. A 30 s
// burst with 2-minute start-ups, which tasks added for it would miss,
// adds none beyond that headroom and is not chased once it has passed;
// a step that lasts is followed once it has lasted a quarter of a
// start-up; a rise beyond twice the headroom, which the history does not
// know, is followed at once.
func TestSLOBurstHeadroom(t *testing.T) {
	const rate = 4.0
	in, ds := drive(sloPool(1), noisy(rate, 2)...)
	before := ds[len(ds)-1]
	// The pool is sized for the rate and a rise of 4/s.
	if o := before.SLO; o.Headroom != 4 || o.Absorbed {
		t.Fatalf("headroom %v absorbed %v, want 4/s of headroom from the rises of the last hour", o.Headroom, o.Absorbed)
	}
	pool := before.Desired
	slots := float64(pool) * 8
	busy := func(r float64) reading { return reading{r, rate, min(r*10, slots), max(0, r*10-slots)} }
	// 12/s is 8/s above the rate: twice the headroom, the most a burst
	// the history knows may rise.
	const burst = rate + UnknownRise*4

	t.Run("a 30 s burst", func(t *testing.T) {
		_, ds := drive(in, busy(burst), busy(burst), steadyAt(rate), steadyAt(rate), steadyAt(rate))
		for i, d := range ds {
			if d.Desired > pool {
				t.Errorf("reading %d: %d tasks (%s), more than the %d the headroom gives", i, d.Desired, d.Message, pool)
			}
		}
		if o := ds[0].SLO; !o.Absorbed || !strings.Contains(ds[0].Message, "absorbed by the headroom") {
			t.Errorf("burst not absorbed: %+v %s", *o, ds[0].Message)
		}
	})
	t.Run("a sustained step", func(t *testing.T) {
		_, ds := drive(in, repeat(6, busy(burst))...)
		if ds[0].Desired > pool {
			t.Errorf("first reading of the step: %d tasks, more than the %d the headroom gives", ds[0].Desired, pool)
		}
		want := needs(burst, 10)
		if last := ds[len(ds)-1]; last.Desired < want || last.SLO.Absorbed {
			t.Errorf("after 90 s at %v/s: %d tasks (%s), want at least the %d the step needs", burst, last.Desired, last.Message, want)
		}
		// Followed once it has lasted a quarter of a start-up: the third
		// reading, 30 s after the first.
		if ds[2].Desired <= pool {
			t.Errorf("30 s into the step: %d tasks, still the %d of before", ds[2].Desired, pool)
		}
	})
	t.Run("a rise the history does not know", func(t *testing.T) {
		const rise = burst + 1
		r := busy(rise)
		_, ds := drive(in, r)
		d := ds[0]
		if d.SLO.Absorbed || d.Desired < needs(rise, 10) {
			t.Errorf("first reading at %v/s: %d tasks (%s), want at least the %d the rate needs, at once", rise, d.Desired, d.Message, needs(rise, 10))
		}
		// It is taken to go on by as much again within a start-up: the
		// rate expected a start-up and half an interval ahead, and the
		// queue counted at the rate a quarter of a start-up ahead.
		o := d.SLO
		startup, interval := in.Startup.Seconds(), in.Interval.Seconds()
		pace := (rise - rate) / startup
		capacity := float64(pool) * 8 / o.service
		backlog := queueing.BacklogRate(r.waiting, rise+pace*startup/4, capacity, startup, max(BacklogClearing*startup, o.service))
		want := (rise + pace*(startup+interval/2) + backlog) * o.Correction
		if !strings.Contains(d.Message, "is taken to go on to") {
			t.Errorf("first reading at %v/s: the message does not say the rise is taken to go on: %s", rise, d.Message)
		}
		if math.Abs(o.Backlog-backlog) > 1e-9*backlog || math.Abs(o.Expected-want) > 1e-9*want {
			t.Errorf("first reading at %v/s: %v/s expected with a backlog of %v/s, want %v/s with %v/s: %s", rise, o.Expected, o.Backlog, want, backlog, d.Message)
		}
	})
	t.Run("traffic back from idle", func(t *testing.T) {
		// The rises of the last hour are 3/s. Traffic that stops for
		// half an hour and comes back at 4/s rose by 4/s within a
		// start-up, but from idle: the pool is sized for the rate it
		// reads, and the headroom on top of a load stays the 3/s of the
		// rises the load showed, rather than the step of its return.
		in, ds := drive(sloPool(1), noisy(rate, 1.5)...)
		if h := ds[len(ds)-1].SLO.Headroom; h != 3 {
			t.Fatalf("headroom %v/s, want 3/s", h)
		}
		_, ds = drive(in, append(repeat(120, reading{}), repeat(40, steadyAt(rate))...)...)
		if h := ds[len(ds)-1].SLO.Headroom; h != 3 {
			t.Errorf("headroom %v/s after the traffic came back, want the 3/s of before", h)
		}
	})
	t.Run("the bursts of a busier hour", func(t *testing.T) {
		// An hour at 20/s whose rises of 4/s rose from 18/s, then 9/s for
		// six start-ups, more than LevelStartups: the pool keeps half the
		// capacity for them (4/s × 9 ÷ 18), but a
		// rise to 14/s, beyond that and within twice the rises seen, is a
		// burst the history knows, absorbed, not one to follow at once.
		in, _ := drive(sloPool(1), noisy(20, 2)...)
		in, ds := drive(in, repeat(48, steadyAt(9))...)
		if o := ds[len(ds)-1].SLO; o.Bursts != 4 || o.Headroom != 2 || o.Expected != (9+2)*o.Correction {
			t.Fatalf("rises %v/s, headroom %v/s, %v/s expected, want 4/s, 2/s and 11/s: %s", o.Bursts, o.Headroom, o.Expected, ds[len(ds)-1].Message)
		}
		// Its queue is counted at the rate the rises seen allow, 13/s.
		pool := ds[len(ds)-1].Desired
		_, ds = drive(in, reading{14, 9, float64(pool) * 8, 20})
		o := ds[0].SLO
		startup := in.Startup.Seconds()
		backlog := queueing.BacklogRate(20, 9+4, float64(pool)*8/o.service, startup, max(BacklogClearing*startup, o.service))
		if want := (9 + 2 + backlog) * o.Correction; !o.Absorbed || math.Abs(o.Expected-want) > 1e-9*want {
			t.Errorf("14/s after 9/s: %v/s expected (%s); want it absorbed, sized for 11/s and a backlog of %v/s", o.Expected, ds[0].Message, backlog)
		}
	})
	t.Run("a rise beyond the headroom that is no step", func(t *testing.T) {
		// 20/s with a headroom of 2/s: 25/s is beyond twice the headroom
		// but far from doubling the rate, a reading a little above the
		// last ones, not a step to extrapolate.
		in, ds := drive(sloPool(1), noisy(20, 1)...)
		if h := ds[len(ds)-1].SLO.Headroom; h != 2 {
			t.Fatalf("headroom %v/s, want 2/s", h)
		}
		_, ds = drive(in, steadyAt(25))
		if d := ds[0]; d.SLO.Absorbed || strings.Contains(d.Message, "taken to go on") {
			t.Errorf("25/s after 20/s: %s; want it followed, not absorbed and not taken to go on", d.Message)
		}
	})
}

// FuzzSLONoRunaway: no sequence of metric values moves the count further
// in one interval than the SLO needs at the most the readings allow. For
// each evaluation, with running, waiting, arrivals and completions its
// readings, S₀ the service time the state held before it (0 without one)
// and H the largest rise in the history of rises after it:
//
//   - the service time used is at most
//     Ŝ = max(S₀, running ÷ max(completions, arrivals/2, 1/300 s)):
//     Little's law never divides by a near-zero completion rate;
//   - the count is at most max(Current, ⌈(running + waiting) ÷ slots⌉,
//     T̂) + 1, where T̂ is the queueing model's count (at the decision's
//     Ca² and the SLO) for the rate
//     λ̂ = (2·arrivals + H + (waiting + 2·arrivals × start-up) ÷
//     (BacklogClearing × start-up)) × MaxCorrection
//     at service time Ŝ, and the rate it expects is at most λ̂: the trend
//     at most doubles the rate, the backlog is the queue now plus at most
//     the arrivals of a start-up at that rate, cleared within
//     BacklogClearing of a start-up, and the correction at most doubles
//     it;
//   - where no arrivals are read, arrivals is at most the most that the
//     completions and the pool's growth allow (derivedArrivalsBound), and
//     Ŝ = max(S₀, running ÷ max(completions, 1/300 s)).
func FuzzSLONoRunaway(f *testing.F) {
	f.Add(4.0, 0.002, 20.0, 0.0, 4.0, 0.0, 40.0, 0.0, 4.0, 4.0, 40.0, 0.0, int32(1), int32(8), false, true)
	f.Add(4.0, 0.0, 20.0, 0.0, 12.0, 0.0, 120.0, 50.0, 0.0, 0.0, 0.0, 0.0, int32(5), int32(8), true, true)
	f.Add(1e-9, 1e-12, 1e12, 1e9, 1e9, 1e-9, 1e9, 0.0, 0.0, 1e300, 1.0, 1e6, int32(100), int32(1), true, true)
	// The completions alone: a step up, and a pool grown by a billion.
	f.Add(0.0, 2.0, 20.0, 0.0, 0.0, 4.0, 80.0, 40.0, 0.0, 4.0, 80.0, 200.0, int32(2), int32(8), true, false)
	f.Add(0.0, 1e-12, 1e12, 1e9, 0.0, 1e-9, 1e9, 0.0, 0.0, 1e300, 1.0, 1e6, int32(100), int32(1), true, false)
	f.Fuzz(func(t *testing.T, a1, c1, r1, w1, a2, c2, r2, w2, a3, c3, r3, w3 float64, current, slots int32, primed, arrivalsRead bool) {
		in := sloPool(min(max(current, 0), 1000))
		in.Min, in.Max = 0, MaxSLOTasks
		in.Policy.SLO.SlotsPerTask = min(max(slots, 1), 1000)
		if primed {
			// A pool that served 10 s requests, with an hour of rises.
			in.Queue = steady(2, 0)
			for k := 0; k < 30; k++ {
				at := t0.Add(time.Duration(k-30) * in.Startup)
				in.Queue.Rises = in.Queue.Rises.Record(at, at, time.Time{}, float64(k%4), 0, in.Startup)
			}
		}
		// Readings a source can give: finite and at least 0. Others fail
		// the read, which holds the count or leaves the metric out.
		valid := func(v float64) float64 {
			if v = math.Abs(v); math.IsNaN(v) || math.IsInf(v, 0) {
				return 0
			}
			return v
		}
		for _, r := range []reading{{a1, c1, r1, w1}, {a2, c2, r2, w2}, {a3, c3, r3, w3}} {
			r = reading{valid(r.arrivals), valid(r.completions), valid(r.running), valid(r.waiting)}
			if !arrivalsRead {
				r.arrivals = -1
			}
			before := in
			var ds []Decision
			in, ds = drive(in, r)
			d := ds[0]
			if d.SLO == nil {
				t.Fatalf("no SLO outcome for %+v: %s", r, d.Message)
			}
			o, slo := d.SLO, normalize(before).Policy.SLO
			s0, _ := before.Queue.Little.ServiceTime()
			shat := max(s0, r.running/max(r.completions, r.arrivals/2, 1/ServiceTimeWindow.Seconds()))
			if !arrivalsRead {
				shat = max(s0, r.running/max(r.completions, 1/ServiceTimeWindow.Seconds()))
				r.arrivals = derivedArrivalsBound(before.Queue.Rates, in.Now, r.completions, r.running+r.waiting)
			}
			if o.service > shat*(1+1e-9) {
				t.Fatalf("service time %v s, above the %v s the readings allow (%+v, before %v s)", o.service, shat, r, s0)
			}
			var h float64
			for _, b := range d.Queue.Rises.Buckets {
				h = max(h, b.Rise)
			}
			startup := max(before.Startup, before.Interval, time.Second).Seconds()
			rate := (2*r.arrivals + h + (r.waiting+2*r.arrivals*startup)/(BacklogClearing*startup)) * queueing.MaxCorrection
			if o.Expected > rate*(1+1e-9) {
				t.Fatalf("expected %v/s, above the %v/s the readings allow (%+v): %s", o.Expected, rate, r, d.Message)
			}
			model := queueing.Model{ServiceTime: shat, Slots: slo.SlotsPerTask, Ca2: o.Ca2, Cs2: slo.ServiceVariability}
			that, _ := model.Tasks(rate, queueing.SLO{Wait: slo.Wait.Seconds(), Percentile: slo.Percentile}, MaxSLOTasks)
			pool := ceilSat((r.running + r.waiting) / float64(slo.SlotsPerTask))
			if bound := addSat(max(before.Current, pool, that), 1); d.Desired > bound {
				t.Fatalf("%d tasks from %d, above the bound of %d (model %d at %v/s and %v s; pool %d): %+v: %s",
					d.Desired, before.Current, bound, that, rate, shat, pool, r, d.Message)
			}
			if math.IsNaN(o.Expected) {
				t.Fatalf("expected rate NaN: %+v", *o)
			}
		}
	})
}
