package scaling

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/gpuprofile"
	"github.com/gputask/gputask-controller/pkg/queueing"
)

// TestSLOEngine: with an engine model and an ITL target a task serves as
// many requests as its capacity allows, unless slotsPerTask overrides it;
// the service time is at most the output tokens at the ITL target plus
// the prompt's prefill; a TTFT objective bounds the wait by the TTFT less
// the prefill.
func TestSLOEngine(t *testing.T) {
	ms := time.Millisecond
	engine := func(in *Inputs, e Engine) {
		in.Policy.SLO.SlotsPerTask, in.Policy.SLO.ITL = 0, 20*ms
		in.Engine = &e
	}
	fitted := func() ITLFit {
		var f ITLFit
		for k := 0; k < 20; k++ {
			b := float64(1 + 10*(k%5))
			f = f.Observe(t0.Add(time.Duration(k-20)*time.Minute), b, time.Duration((0.010+0.0001*b)*float64(time.Second)))
		}
		return f
	}
	for _, tc := range []struct {
		name    string
		in      Inputs
		slots   int32
		from    string
		service time.Duration
		msg     string
	}{
		{name: "slots from the profile", in: with(sloBase(2, 20), func(in *Inputs) { engine(in, Engine{Model: h100, Context: 1024}) }),
			slots: 253, from: SlotsFromProfile, service: 10 * time.Second},
		{name: "slotsPerTask overrides", in: with(sloBase(2, 20), func(in *Inputs) {
			engine(in, Engine{Model: h100, Context: 1024})
			in.Policy.SLO.SlotsPerTask = 8
		}), slots: 8, from: SlotsFromOverride, service: 10 * time.Second},
		// (20 − 10) / 0.1 = 100 sequences by the fit of the tasks' ITL.
		{name: "slots from the fit", in: with(sloBase(2, 20), func(in *Inputs) {
			engine(in, Engine{Context: 1024})
			in.Queue.ITL = fitted()
		}), slots: 100, from: SlotsFromFit, service: 10 * time.Second},
		{name: "no fit yet: one slot", in: with(sloBase(2, 20), func(in *Inputs) { engine(in, Engine{Context: 1024}) }),
			slots: 1, from: SlotsFromDefault, service: 10 * time.Second},
		{name: "no ITL target: one slot", in: with(sloBase(2, 20), func(in *Inputs) {
			engine(in, Engine{Model: h100, Context: 1024})
			in.Policy.SLO.ITL = 0
		}), slots: 1, from: SlotsFromDefault, service: 10 * time.Second},
		// 100 output tokens at 20 ms and 1,000 prompt tokens at 38,000/s:
		// 2.026 s, though 20 running at 2/s would say 10 s.
		{name: "the service time bounded by the tokens", in: with(sloBase(2, 20), func(in *Inputs) {
			engine(in, Engine{Model: h100, Context: 1024, GenerationTokens: 200, PromptTokens: 2000})
			in.Policy.SLO.SlotsPerTask = 8
		}), slots: 8, from: SlotsFromOverride, service: 2026 * time.Millisecond},
		// 19,000-token prompts take 0.5 s to prefill: 1.5 s of a 2 s TTFT
		// are left for the wait.
		{name: "TTFT bounds the wait", in: with(sloBase(2, 20), func(in *Inputs) {
			engine(in, Engine{Model: h100, Context: 1024, PromptTokens: 38000})
			in.Policy.SLO.SlotsPerTask, in.Policy.SLO.TTFT = 8, 2*time.Second
		}), slots: 8, from: SlotsFromOverride, service: 10 * time.Second, msg: "p95 wait within 1.5s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.in)
			o := d.SLO
			if o.Slots != tc.slots || o.SlotsFrom != tc.from || o.ServiceTime != tc.service {
				t.Errorf("slots %d from %q service %v, want %d from %q and %v", o.Slots, o.SlotsFrom, o.ServiceTime, tc.slots, tc.from, tc.service)
			}
			if !strings.Contains(d.Message, tc.msg) {
				t.Errorf("message %q lacks %q", d.Message, tc.msg)
			}
		})
	}
}

// TestSLOLearnsITL: the policy fits the tasks' ITL against their running
// sequences, and sizes by the fit once it has enough readings.
func TestSLOLearnsITL(t *testing.T) {
	in := sloPool(4)
	in.Policy.SLO.SlotsPerTask, in.Policy.SLO.ITL = 0, 20*time.Millisecond
	var ds []Decision
	for k := 0; k < 8; k++ {
		running := float64(8 + 24*(k%3)) // 2, 8 and 14 sequences a task
		batch := running / 4
		in.Engine = &Engine{Context: 1024, ITL: time.Duration((0.010 + 0.0001*batch) * float64(time.Second))}
		var d []Decision
		in, d = drive(in, reading{running / 10, running / 10, running, 0})
		in.Current = 4
		ds = append(ds, d...)
	}
	if l, ok := in.Queue.ITL.Usable(); !ok || l.Alpha < 0.0099 || l.Alpha > 0.0101 {
		t.Fatalf("fit %+v %v, want α 10 ms β 0.1 ms", l, ok)
	}
	if o := ds[len(ds)-1].SLO; o.SlotsFrom != SlotsFromFit || o.Slots != 100 {
		t.Errorf("slots %d from %q, want 100 from the fit", o.Slots, o.SlotsFrom)
	}
	if o := ds[0].SLO; o.SlotsFrom != SlotsFromDefault {
		t.Errorf("first reading sized from %q, want the default before the fit", o.SlotsFrom)
	}
}

func TestRises(t *testing.T) {
	width := 2 * time.Minute
	at := func(k int) time.Time { return t0.Add(time.Duration(k) * width) }
	record := func(r Rises, now time.Time, rise float64) Rises {
		return r.Record(now, now, time.Time{}, rise, 0, width)
	}
	var r Rises
	for k := 0; k < 9; k++ {
		r = record(r, at(k), float64(k))
	}
	if _, ok := r.Headroom(at(9), width, math.Inf(1)); ok {
		t.Error("headroom from 9 start-ups, want at least 10")
	}
	// Within one start-up a bucket keeps its highest rise.
	r = record(record(record(r, at(9), 1), at(9).Add(time.Minute), 20), at(9).Add(90*time.Second), 2)
	if n := len(r.Buckets); n != 10 || r.Buckets[9].Rise != 20 {
		t.Fatalf("%d buckets, last %+v", n, r.Buckets[n-1])
	}
	// Rises 0..8 and 20: the 99th percentile by nearest rank of ten is
	// the highest, but a rise seen once is not what the traffic shows
	// at the percentile: the headroom is the next, 8.
	if h, ok := r.Headroom(at(10), width, math.Inf(1)); !ok || h != 8 {
		t.Errorf("headroom %v %v, want 8", h, ok)
	}
	// Seen again once the queue it left is worked off, it is what the
	// traffic does again.
	for k := 10; k < 13; k++ {
		r = record(r, at(k), 0)
	}
	r = record(r, at(13), 20)
	if h, ok := r.Headroom(at(14), width, math.Inf(1)); !ok || h != 20 {
		t.Errorf("headroom %v %v after a second rise of 20, want 20", h, ok)
	}
	// The start-up going on is left out: a rise of 50 now does not size
	// the headroom that is to absorb it.
	now := at(14).Add(time.Minute)
	if h, ok := record(r, at(14), 50).Headroom(now, width, math.Inf(1)); !ok || h != 20 {
		t.Errorf("headroom %v %v with a rise of 50 in the start-up going on, want 20", h, ok)
	}
	// The readings of one step, a start-up long, fall in two buckets and
	// go on showing the rise of 50 that began in the first: it is one
	// rise of the history, and the new bucket has none of its own.
	step := record(r, at(14), 0).Record(at(14).Add(90*time.Second), at(14).Add(90*time.Second), time.Time{}, 50, 0, width).
		Record(at(15), at(14).Add(90*time.Second), time.Time{}, 50, 0, width).
		Record(at(15).Add(time.Minute), at(14).Add(90*time.Second), time.Time{}, 45, 0, width)
	if n := len(step.Buckets); n != 16 || step.Buckets[14].Rise != 50 || step.Buckets[15].Rise != 0 {
		t.Fatalf("%d buckets, last two %+v", n, step.Buckets[n-2:])
	}
	if h, ok := step.Headroom(at(17), width, math.Inf(1)); !ok || h != 20 {
		t.Errorf("headroom %v %v after one step of 50, want 20", h, ok)
	}
	// With start-ups of seconds the queue's start-ups can be all the
	// others: the highest is all the history knows.
	short := time.Second
	var quick Rises
	for k := 0; k < minRiseBuckets+1; k++ {
		now := t0.Add(time.Duration(k) * short)
		quick = quick.Record(now, now, time.Time{}, float64(10-k), 0, short)
	}
	if h, ok := quick.Headroom(t0.Add(time.Duration(minRiseBuckets+1)*short), short, math.Inf(1)); !ok || h != 10 {
		t.Errorf("headroom %v %v with 1 s start-ups, want 10", h, ok)
	}
	// A rise that began before the oldest bucket kept goes to it.
	if got := (Rises{}).Record(at(1), at(0), time.Time{}, 5, 0, width); len(got.Buckets) != 1 || got.Buckets[0].Rise != 5 {
		t.Errorf("first bucket %+v, want the rise of 5", got.Buckets)
	}
	// Bounded: a day of readings keeps maxRiseBuckets buckets, none
	// older than maxRiseBuckets start-ups.
	for k := 0; k < 720; k++ {
		r = record(r, at(k), 1)
	}
	if n := len(r.Buckets); n != maxRiseBuckets {
		t.Errorf("%d buckets, want %d", n, maxRiseBuckets)
	}
	// A rise no reading could give is left out.
	if got := record(r, at(1000), nan()); len(got.Buckets) != len(r.Buckets) {
		t.Error("a NaN rise was recorded")
	}
}

// TestRisesOneRiseInTwoBuckets: behind a scrape a flash crowd's first
// reading shows a part of it, and the reading halfway up it, when it
// began, moves into the next bucket as the next readings show the rest.
// Rising from the same reading, they are one rise of the history, kept
// in the latest bucket it began in at its height; rises from other
// readings stay rises of their own.
func TestRisesOneRiseInTwoBuckets(t *testing.T) {
	width := 2 * time.Minute
	at := func(k int) time.Time { return t0.Add(time.Duration(k) * width) }
	var history Rises
	for k := 0; k < 12; k++ {
		history = history.Record(at(k), at(k), at(k), float64(k%3)*5, 0, width)
	}
	history = history.Record(at(12), at(12), at(12), 0, 0, width)
	low := at(13).Add(-30 * time.Second)
	crowd := []struct {
		now, began time.Time
		rise       float64
	}{
		{at(13).Add(-15 * time.Second), at(13).Add(-15 * time.Second), 27},
		{at(13), at(13), 58},
		{at(13).Add(30 * time.Second), at(13), 68.7},
		{at(13).Add(45 * time.Second), at(13).Add(-15 * time.Second), 46.8},
	}
	tests := []struct {
		name         string
		sameReading  bool
		want12       float64
		want13       float64
		wantHeadroom float64
	}{
		{"from one reading: one rise, alone, the next sizes the headroom", true, 0, 68.7, 10},
		{"from two readings: two rises within LoneRise of each other", false, 46.8, 68.7, 68.7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := history
			for i, c := range crowd {
				from := low
				if !tc.sameReading {
					from = low.Add(time.Duration(i) * time.Second)
				}
				r = r.Record(c.now, c.began, from, c.rise, 10, width)
			}
			for k := 14; k < 20; k++ {
				r = r.Record(at(k), at(k), at(k), 0, 0, width)
			}
			if got12, got13 := r.Buckets[12].Rise, r.Buckets[13].Rise; got12 != tc.want12 || got13 != tc.want13 {
				t.Errorf("buckets 12 and 13 hold %v and %v, want %v and %v", got12, got13, tc.want12, tc.want13)
			}
			if h, ok := r.Headroom(at(20), width, math.Inf(1)); !ok || h != tc.wantHeadroom {
				t.Errorf("headroom %v %v, want %v", h, ok, tc.wantHeadroom)
			}
		})
	}
}

func TestRisesBusyService(t *testing.T) {
	width := 2 * time.Minute
	at := func(k int) time.Time { return t0.Add(time.Duration(k) * width) }
	served := func(r Rises, now time.Time, service float64) Rises {
		return r.Record(now, now, time.Time{}, 0, 0, width).Served(now, service, service/100)
	}
	var r Rises
	for k := 0; k < 9; k++ {
		r = served(r, at(k), float64(k+1))
	}
	if _, _, ok := r.BusyService(at(8), width); ok {
		t.Error("a busy service from 9 start-ups, want at least 10")
	}
	// Within one start-up a bucket keeps its longest service, and its
	// longest per token, each on its own.
	r = served(served(r, at(9), 3), at(9).Add(time.Minute), 30).Served(at(9).Add(90*time.Second), 4, 0.5)
	if n := len(r.Buckets); n != 10 || r.Buckets[9].Service != 30 || r.Buckets[9].PerToken != 0.5 {
		t.Fatalf("%d buckets, last %+v", n, r.Buckets[n-1])
	}
	// 1..9 and 30: the 90th percentile by nearest rank of ten is the
	// ninth, 9, the start-up going on counted; per token 0.09 of
	// 0.01..0.09 and 0.5.
	if s, p, ok := r.BusyService(at(9).Add(time.Minute), width); !ok || s != 9 || p != 0.09 {
		t.Errorf("busy service %v, %v per token, %v, want 9 and 0.09", s, p, ok)
	}
	// Of twenty, with ten buckets more at 1 s, the eighteenth: 8.
	for k := 10; k < 20; k++ {
		r = served(r, at(k), 1)
	}
	if s, _, ok := r.BusyService(at(19), width); !ok || s != 8 {
		t.Errorf("busy service %v %v of twenty, want 8", s, ok)
	}
	// A service no reading could give, or one before the last bucket,
	// is left out, and the history is left as it was.
	last := func(r Rises) RiseBucket { return r.Buckets[len(r.Buckets)-1] }
	for _, bad := range []float64{0, -1, nan(), math.Inf(1)} {
		if got := last(r.Served(at(19), bad, 1)); got.Service != 1 {
			t.Errorf("a service of %v was recorded", bad)
		}
		if got := last(r.Served(at(19), 99, bad)); got.Service != 1 || got.PerToken != 0.01 {
			t.Errorf("a service per token of %v was recorded", bad)
		}
	}
	if got := last(r.Served(at(18), 99, 1)); got.Service != 1 {
		t.Error("a service read before the last bucket was recorded in it")
	}
	if got := last(r.Served(at(19), 99, 1)); got.Service != 99 || last(r).Service != 1 {
		t.Error("Served did not record in a new history")
	}
	// Buckets older than maxRiseBuckets start-ups are forgotten.
	if _, _, ok := r.BusyService(at(19+maxRiseBuckets), width); ok {
		t.Error("a busy service from buckets past the horizon")
	}
}

func TestRisesHeadroomLoneRise(t *testing.T) {
	width := 2 * time.Minute
	at := func(k int) time.Time { return t0.Add(time.Duration(k) * width) }
	tests := []struct {
		name  string
		rises []float64
		want  float64
	}{
		{"a highest within twice the next: the bursts reach it", []float64{1, 2, 3, 4, 5, 6, 7, 8, 10, 16}, 16},
		{"exactly twice the next: not alone", []float64{1, 2, 3, 4, 5, 6, 7, 8, 10, 20}, 20},
		{"a lone highest, past twice the next: the next", []float64{1, 2, 3, 4, 5, 6, 7, 8, 10, 20.5}, 10},
		{"a flash crowd over steady traffic: the traffic's", []float64{5, 6, 4, 5, 7, 6, 5, 336, 6, 5, 7}, 7},
		{"a crowd after one more than half as high: not alone", []float64{5, 6, 4, 5, 7, 6, 5, 233, 365, 6, 5, 7}, 365},
		{"its queue worked off, read as a rise: the crowd's", []float64{5, 6, 4, 5, 7, 6, 336, 6, 150, 6, 5, 7}, 7},
		{"as high a rise once its queue is worked off: the traffic's", []float64{5, 6, 4, 5, 7, 336, 5, 6, 5, 200, 5, 6}, 336},
		{"one start-up sooner, still its queue's", []float64{5, 6, 4, 5, 7, 336, 5, 6, 200, 6, 5, 6}, 7},
		{"no rise: none", make([]float64, 12), 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r Rises
			for k, rise := range tc.rises {
				r = r.Record(at(k), at(k), time.Time{}, rise, 0, width)
			}
			if h, ok := r.Headroom(at(len(tc.rises)+1), width, math.Inf(1)); !ok || h != tc.want {
				t.Errorf("headroom %v %v, want %v", h, ok, tc.want)
			}
		})
	}
}

// TestRisesHeadroomAtLevel: the rises are taken at the rate the traffic
// holds (the rate now, or the highest a rise of the last LevelStartups
// start-ups rose from), each scaled down by the share that rate is of the
// rate it rose from; one from a lower rate, or from one unknown, as it
// was.
func TestRisesHeadroomAtLevel(t *testing.T) {
	width := 2 * time.Minute
	at := func(k int) time.Time { return t0.Add(time.Duration(k) * width) }
	type rise struct{ rise, level float64 }
	times := func(n int, r rise) []rise { return slices.Repeat([]rise{r}, n) }
	// A step from 60/s to 240/s after an hour of bursts of 70/s, the
	// start-ups its queue is worked off in, and the surge's own swings.
	step := slices.Concat(times(10, rise{70, 60}), []rise{{180, 60}, {0, 240}, {0, 240}, {0, 240}}, times(4, rise{100, 240}))
	after := slices.Concat(step, times(LevelStartups+1, rise{0, 60}))
	afternoon := times(11, rise{300, 250})
	tests := []struct {
		name  string
		rises []rise
		level float64
		want  float64
	}{
		{"at the rate they rose from: as seen", afternoon, 250, 300},
		{"a busy afternoon's in the evening: at half the rate, half", slices.Concat(afternoon, times(LevelStartups+1, rise{0, 125})), 125, 150},
		{"a lull of fewer start-ups: at the rate before it", slices.Concat(afternoon, times(LevelStartups-2, rise{0, 125})), 125, 300},
		{"a quiet hour's at a busier rate: as seen", times(11, rise{20, 30}), 60, 20},
		{"from a rate unknown: as seen", times(11, rise{20, 0}), 10, 20},
		{"as seen, +Inf", afternoon, math.Inf(1), 300},
		{"a step's surge as seen: its swings keep the step's rise from standing alone", after, math.Inf(1), 180},
		{"within LevelStartups of the surge: at its rate", step, 60, 180},
		{"after the surge, at the rate before it: the step stands alone, the bursts of before", after, 60, 70},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r Rises
			for k, b := range tc.rises {
				r = r.Record(at(k), at(k), time.Time{}, b.rise, b.level, width)
			}
			if h, ok := r.Headroom(at(len(tc.rises)+1), width, tc.level); !ok || math.Abs(h-tc.want) > 1e-9 {
				t.Errorf("headroom %v %v, want %v", h, ok, tc.want)
			}
		})
	}
}

// vllmPool is the pool that docs/autoscaling.md walks through by hand: 2
// H100 workers of the measured profile, TTFT 2 s and ITL 50 ms at p95,
// reading what vLLM exports: 50 requests/s arrive and finish, 400 run
// and 20 wait, 1,000 prompt and 160 output tokens a request, 60 % of the
// KV cache in use.
func vllmPool(t *testing.T) Inputs {
	t.Helper()
	p, err := gpuprofile.Lookup("h100-llama-3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	return Inputs{Now: t0, Current: 2, Min: 1, Max: 100,
		Policy: Policy{Type: gputaskv1.SLOPolicy, SLO: SLO{TTFT: 2 * time.Second, ITL: 50 * time.Millisecond, Percentile: 95, ServiceVariability: 1}},
		Metrics: []MetricInput{role(gputaskv1.RoleArrivals, 50), role(gputaskv1.RoleCompletions, 50), role(gputaskv1.RoleRunning, 400),
			role(gputaskv1.RoleWaiting, 20), role(gputaskv1.RoleTTFTPercentile, 1.2), role(gputaskv1.RoleInterTokenLatency, 0.015),
			role(gputaskv1.RolePromptTokens, 50000), role(gputaskv1.RoleGenerationTokens, 8000), role(gputaskv1.RoleKVCacheUsage, 0.6)},
		FailureThreshold: 3, Startup: 2 * time.Minute, Interval: 30 * time.Second,
		Engine: &Engine{Model: p, KVTokens: float64(p.KVTokensFit)},
	}
}

// TestPrefillSpread: the ITL at the percentile exceeds the mean by the
// spread of the prompts a request's task prefills in its life; none
// without the token rates, a prefill rate, or above the median.
func TestPrefillSpread(t *testing.T) {
	// The walkthrough's pool: 50 requests a second of 1,000 prompt and
	// 160 output tokens, 50.2222 expected, on 3 tasks at 27.72 ms.
	o := &SLOOutcome{Arrivals: 50, completions: 50, Expected: 50.2222}
	for _, tc := range []struct {
		name   string
		change func(*Inputs)
		count  int32
		want   float64 // milliseconds
	}{
		{"the walkthrough at 3 tasks", func(*Inputs) {}, 3, 2.313},
		// Twice the tasks: half the prompts a task, √2 less.
		{"on 6 tasks", func(*Inputs) {}, 6, 2.313 / math.Sqrt2},
		// Output four times as long: √4 more prompts over 4 times the
		// tokens, half the spread.
		{"longer outputs", func(in *Inputs) { in.Engine.GenerationTokens *= 4 }, 3, 2.313 / 2},
		// 0.74 prompts in a life, fewer than z² = 2.7: the spread is the
		// mean's prefill again, μ × 26.1 ms ÷ 160, not z·√μ of it.
		{"few prompts in a request's life", func(*Inputs) {}, 300, 0.7424 * 26.111 / 160},
		{"at the median", func(in *Inputs) { in.Policy.SLO.Percentile = 50 }, 3, 0},
		{"no prompt tokens", func(in *Inputs) { in.Engine.PromptTokens = 0 }, 3, 0},
		{"no output tokens", func(in *Inputs) { in.Engine.GenerationTokens = 0 }, 3, 0},
		{"no prefill rate", func(in *Inputs) { in.Engine.Model = LinearITL{Alpha: 0.007, Beta: 0.0001} }, 3, 0},
	} {
		in := withRoleReadings(vllmPool(t))
		tc.change(&in)
		if got := 1000 * prefillSpread(in, o, tc.count, 0.02772); math.Abs(got-tc.want) > 0.001 {
			t.Errorf("%s: %.4f ms, want %.4f", tc.name, got, tc.want)
		}
	}
}

// TestSLOWalkthroughH100 is the decision docs/autoscaling.md works by
// hand; a change here is a change there.
func TestSLOWalkthroughH100(t *testing.T) {
	d := Decide(vllmPool(t))
	o := d.SLO
	// 0.6 × 465,567 KV tokens × 2 tasks / 400 running = 1,396.7 tokens.
	if math.Abs(o.Context-1396.7) > 0.1 {
		t.Errorf("context %v, want 1396.7", o.Context)
	}
	// 25,000 prompt tokens/s a task take 65 % of an H100's 38,298/s of
	// prefill: decode steps stretch 2.88×, and 159 sequences keep 50 ms.
	if o.Slots != 159 || o.SlotsFrom != SlotsFromProfile {
		t.Errorf("slots %d from %q, want 159 from the profile", o.Slots, o.SlotsFrom)
	}
	// 400 running / 50 done a second; 160 tokens at 50 ms + 0.026 s of
	// prefill bounds it at 8.026 s, above.
	if o.ServiceTime != 8*time.Second {
		t.Errorf("service %v, want 8s", o.ServiceTime)
	}
	// A 1,000-token prompt prefills in 26 ms: 1.974 s of the TTFT is left
	// for the wait.
	if math.Abs(o.Prefill-0.0261) > 0.0001 || math.Abs(o.objective-1.9739) > 0.0001 {
		t.Errorf("prefill %v objective %v, want 0.0261 and 1.9739", o.Prefill, o.objective)
	}
	if d.Desired != 3 || d.Reason != ReasonSLOScaleUp {
		t.Errorf("desired %d (%s), want 3 (SLOScaleUp)", d.Desired, d.Reason)
	}
	// At 3 tasks: 134 sequences each, prefilling the expected rate's
	// prompts 43.7 % of their time, 27.72 ms on average; a request of 160
	// tokens meets 74.3 prompts in its life, and at the 95th percentile
	// 1.645 × 26.1 ms × √74.3 ÷ 160 = 2.31 ms more.
	if o.PredictedWait != 0 || math.Abs(o.PredictedTTFT-0.0261) > 0.0001 ||
		o.PredictedITL.Round(10*time.Microsecond) != 30030*time.Microsecond {
		t.Errorf("predicted wait %v TTFT %v ITL %v, want 0, 0.0261 and 30.03ms", o.PredictedWait, o.PredictedTTFT, o.PredictedITL)
	}
	// At 2 tasks, 65.5 % of each task's time would go to prefill, and 159
	// sequences at 17.32 ms stretched 2.90 times are over 50 ms: the ITL
	// alone asks for 3.
	if got := itlTasks(withRoleReadings(vllmPool(t)), o); got != 3 {
		t.Errorf("tasks for the ITL %d, want 3", got)
	}
	if want := "need 3 tasks of 159 slots for a p95 wait within 1.974s"; !strings.Contains(d.Message, want) {
		t.Errorf("message %q lacks %q", d.Message, want)
	}
	if d.Queue.Context != o.Context {
		t.Errorf("context kept %v, want %v", d.Queue.Context, o.Context)
	}
}

// TestEngineFromRoles: the engine's readings come from the metrics of
// their roles; a value the caller gave stays where no metric was read.
func TestEngineFromRoles(t *testing.T) {
	base := func(more ...MetricInput) Inputs {
		in := sloBase(50, 400, more...)
		in.Current = 4
		return in
	}
	failed := role(gputaskv1.RoleKVCacheUsage, 0.5)
	failed.Err = errors.New("down")
	for _, tc := range []struct {
		name string
		in   Inputs
		want *Engine
	}{
		{name: "no engine roles: no engine", in: base(), want: nil},
		{name: "rates and ITL", in: base(role(gputaskv1.RolePromptTokens, 50000), role(gputaskv1.RoleGenerationTokens, 8000), role(gputaskv1.RoleInterTokenLatency, 0.02)),
			// A request's prompt plus half its output: 1,000 + 80.
			want: &Engine{PromptTokens: 50000, GenerationTokens: 8000, ITL: 20 * time.Millisecond, Context: 1080}},
		{name: "context from the KV cache", in: with(base(role(gputaskv1.RoleKVCacheUsage, 0.5), role(gputaskv1.RolePromptTokens, 50000)), func(in *Inputs) {
			in.Engine = &Engine{KVTokens: 100000}
		}), want: &Engine{KVTokens: 100000, PromptTokens: 50000, Context: 500}}, // 0.5 × 100,000 × 4 / 400
		{name: "starting tasks hold no sequences", in: with(base(role(gputaskv1.RoleKVCacheUsage, 0.5)), func(in *Inputs) {
			in.Engine, in.Starting = &Engine{KVTokens: 100000}, 2
		}), want: &Engine{KVTokens: 100000, Context: 250}},
		{name: "idle: the context known last", in: with(sloBase(0, 0, role(gputaskv1.RoleKVCacheUsage, 0)), func(in *Inputs) {
			in.Engine, in.Queue.Context = &Engine{KVTokens: 100000}, 700
		}), want: &Engine{KVTokens: 100000, Context: 700}},
		{name: "a failed reading is no reading", in: with(base(failed), func(in *Inputs) {
			in.Engine = &Engine{KVTokens: 100000, ITL: 5 * time.Millisecond}
		}), want: &Engine{KVTokens: 100000, ITL: 5 * time.Millisecond}},
		{name: "the caller's values stay without a metric", in: with(base(role(gputaskv1.RoleInterTokenLatency, 0.03)), func(in *Inputs) {
			in.Engine = &Engine{PromptTokens: 5, GenerationTokens: 6, Context: 900}
		}), want: &Engine{PromptTokens: 5, GenerationTokens: 6, Context: 900, ITL: 30 * time.Millisecond}},
		{name: "a negative or absurd reading is left out", in: base(role(gputaskv1.RolePromptTokens, -1), role(gputaskv1.RoleInterTokenLatency, 1e12)),
			want: &Engine{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := withRoleReadings(tc.in).Engine
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Errorf("engine %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestContextSmoothed: the context is read over the sequences of many
// readings. After a history of 400 sequences at 1,000 tokens, a reading
// of a few long sequences, or of a usage scraped before new tasks
// joined, moves it by the reading's share of the window and its weight
// in sequences, not to the reading's own context; readings of a new
// context take it over within a few windows.
func TestContextSmoothed(t *testing.T) {
	history := KVReadings{Tokens: 400 * 1000, Sequences: 400}
	w := 1 - math.Exp(-15/ContextWindow.Seconds())
	at := func(running, usage float64, serving int32, kv KVReadings, last time.Time) Inputs {
		in := sloBase(50, running, role(gputaskv1.RoleKVCacheUsage, usage))
		in.Current, in.Engine = serving, &Engine{KVTokens: 100000}
		in.Queue.KV, in.Queue.LastTime = kv, last
		return in
	}
	ago := t0.Add(-15 * time.Second)
	for _, tc := range []struct {
		name string
		in   Inputs
		want float64
	}{
		{"the first reading is the context", at(400, 0.5, 4, KVReadings{}, time.Time{}), 500},
		{"a reading of two sequences", at(2, 0.05, 4, history, ago),
			((1-w)*400*1000 + w*0.05*100000*4) / ((1-w)*400 + w*2)},
		{"a usage read before two more tasks served", at(400, 1, 6, history, ago),
			((1-w)*400*1000 + w*600000) / 400},
		{"a reading at the last one's instant adds nothing", at(2, 0.05, 4, history, t0), 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := withRoleReadings(tc.in)
			if got := in.Engine.Context; math.Abs(got-tc.want) > 1e-6*tc.want {
				t.Errorf("context %v, want %v", got, tc.want)
			}
			if got, ok := in.kv.context(); !ok || math.Abs(got-tc.want) > 1e-6*tc.want {
				t.Errorf("kept %v (%v), want %v", got, ok, tc.want)
			}
		})
	}
	// Readings of 2,000 tokens a sequence (a full cache of 200,000 tokens
	// on each of 4 tasks, over 400 sequences), every 15 s, for four
	// windows of decisions.
	in := at(400, 1, 4, history, ago)
	in.Engine.KVTokens = 200000
	for range int(4 * ContextWindow / (15 * time.Second)) {
		d := Decide(in)
		in.Queue, in.Now = d.Queue, in.Now.Add(15*time.Second)
	}
	if c, _ := in.Queue.KV.context(); c < 1900 || c > 2000 {
		t.Errorf("context after four windows at 2,000: %v", c)
	}
}

// TestTTFTPercentileCorrects: with a TTFT objective and no wait
// percentile, the observed TTFT less the prefill corrects the model as an
// observed wait would.
func TestTTFTPercentileCorrects(t *testing.T) {
	for _, tc := range []struct {
		name     string
		observed float64
		ttft     time.Duration
		want     func(c float64) bool
	}{
		{name: "TTFT far above the prediction raises the rate", observed: 5, ttft: 2 * time.Second, want: func(c float64) bool { return c > 1 }},
		{name: "TTFT as predicted leaves it", observed: 0.0261, ttft: 2 * time.Second, want: func(c float64) bool { return c == 0 || c == 1 }},
		{name: "without a TTFT objective it is not read", observed: 5, ttft: 0, want: func(c float64) bool { return c == 0 || c == 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Four tasks serve the load: the model predicts a finite wait.
			in := vllmPool(t)
			in.Current = 4
			in.Policy.SLO.TTFT = tc.ttft
			if tc.ttft == 0 {
				in.Policy.SLO.Wait = 2 * time.Second
			}
			for i := range in.Metrics {
				if in.Metrics[i].Role == gputaskv1.RoleTTFTPercentile {
					in.Metrics[i].Value = tc.observed
				}
			}
			if c := Decide(in).Queue.Correction; !tc.want(c) {
				t.Errorf("correction %v", c)
			}
		})
	}
}

// TestSLOITLWithPrefill: 256 slots a task (an override) are enough for
// the 401 sequences the load keeps busy at 2 tasks, but 1,200-token
// prompts at 50/s take 78.6 % of 2 H100s' prefill, and the decode steps
// of 201 sequences stretched 4.67 times are far over 50 ms; at 3 tasks
// (52.4 %, 134 sequences) they are within it. The count is the ITL's.
func TestSLOITLWithPrefill(t *testing.T) {
	in := vllmPool(t)
	in.Policy.SLO.SlotsPerTask = 256
	for i, m := range in.Metrics {
		if m.Role == gputaskv1.RolePromptTokens {
			in.Metrics[i].Value = 60000
		}
	}
	d := Decide(in)
	if d.Desired != 3 || !strings.Contains(d.Message, "need 2 tasks of 256 slots") ||
		!strings.Contains(d.Message, "3 tasks keep the ITL within 50ms with the prompts' prefill") {
		t.Errorf("desired %d: %s; want 3 for the ITL where the slots need 2", d.Desired, d.Message)
	}
	if itl := d.SLO.PredictedITL; itl <= 0 || itl > 50*time.Millisecond {
		t.Errorf("predicted ITL %v, want within 50ms", itl)
	}
}

// TestSLOCapacityNoRunaway: the capacity is read at the pool the count
// sizes, not at the tasks serving now: with every task still starting,
// or one task at the onset of a load whose prompts alone are more than
// it can prefill, a task's capacity would be one sequence and the count
// the whole load in single slots, maxReplicas at once.
func TestSLOCapacityNoRunaway(t *testing.T) {
	for _, tc := range []struct {
		name     string
		current  int32
		starting int32
	}{
		{"every task starting", 2, 2},
		{"one task under prompts it cannot prefill", 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := vllmPool(t)
			in.Current, in.Starting = tc.current, tc.starting
			d := Decide(in)
			// The pool walked by hand needs 3 (one task's readings put
			// the context at half, which needs 2): at most one more.
			if d.Desired < 2 || d.Desired > 4 || d.SLO.Slots < 100 {
				t.Errorf("desired %d with %d slots a task: %s; want 2 to 4 with the slots of such a pool", d.Desired, d.SLO.Slots, d.Message)
			}
		})
	}
}

// TestSLOEngineBacklog: an engine's queue is worked off at the rate it
// completes requests, not at its slots over the service time (an engine
// that prefills a queue runs every step long); the queue it will hold
// when a new task is Ready is cleared within three quarters of a
// start-up after.
func TestSLOEngineBacklog(t *testing.T) {
	pool := func(arrivals, completions, waiting float64) Inputs {
		in := vllmPool(t)
		// Six tasks served 50/s of 8 s requests until the rate rose.
		in.Current, in.Queue = 6, steady(50, 0)
		in.Queue.Little = queueing.Little{Running: 400, Completions: 50}
		for i, m := range in.Metrics {
			switch m.Role {
			case gputaskv1.RoleArrivals:
				in.Metrics[i].Value = arrivals
			case gputaskv1.RoleCompletions:
				in.Metrics[i].Value = completions
			case gputaskv1.RoleWaiting:
				in.Metrics[i].Value = waiting
			}
		}
		return in
	}
	// 6,000 waiting and 240/s more than the pool completes for the
	// 2-minute start-up: 34,800 to clear within 90 s.
	behind := Decide(pool(300, 60, 6000))
	if want := (6000 + 240*120) / 90.0; math.Abs(behind.SLO.Backlog-want) > 1e-6 {
		t.Errorf("behind: backlog %v/s, want %v/s", behind.SLO.Backlog, want)
	}
	// The same queue, worked off as fast as requests arrive: it stays.
	keeping := Decide(pool(300, 300, 6000))
	if want := 6000 / 90.0; math.Abs(keeping.SLO.Backlog-want) > 1e-6 {
		t.Errorf("keeping up: backlog %v/s, want %v/s", keeping.SLO.Backlog, want)
	}
	if behind.Desired <= keeping.Desired {
		t.Errorf("a pool behind its arrivals asks for %d tasks, one keeping up %d: want more", behind.Desired, keeping.Desired)
	}
	// Finishing more than arrives works the queue off by itself.
	if d := Decide(pool(300, 400, 6000)); d.SLO.Backlog != 0 {
		t.Errorf("draining: backlog %v/s, want 0 (100/s spare clears 6,000 within the start-up)", d.SLO.Backlog)
	}
	// Four tasks more asked for a minute ago (Startup.ServeFor): each
	// serves at the 10/s of a serving task from when it is Ready, a minute
	// before a task asked for now, so 2,400 of the queue are gone by then.
	in := pool(300, 60, 6000)
	in.Current, in.Starting, in.StartingFor = 10, 4, 4*time.Minute
	starting := Decide(in)
	if want := (6000 + 240*120 - 4*10*60) / 90.0; math.Abs(starting.SLO.Backlog-want) > 1e-6 {
		t.Errorf("tasks starting: backlog %v/s, want %v/s", starting.SLO.Backlog, want)
	}
}
