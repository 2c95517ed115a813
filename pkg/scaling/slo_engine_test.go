package scaling

import (
	"strings"
	"testing"
	"time"
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
	var r Rises
	for k := 0; k < 9; k++ {
		r = r.Record(t0.Add(time.Duration(k)*width), float64(k), width)
	}
	if _, ok := r.Headroom(t0.Add(9*width), width); ok {
		t.Error("headroom from 9 start-ups, want at least 10")
	}
	// Within one start-up a bucket keeps its highest rise.
	r = r.Record(t0.Add(9*width), 1, width).Record(t0.Add(9*width+time.Minute), 20, width).Record(t0.Add(9*width+90*time.Second), 2, width)
	if n := len(r.Buckets); n != 10 || r.Buckets[9].Rise != 20 {
		t.Fatalf("%d buckets, last %+v", n, r.Buckets[n-1])
	}
	// Rises 0..8 and 20: the 90th percentile by nearest rank is 8.
	if h, ok := r.Headroom(t0.Add(10*width), width); !ok || h != 8 {
		t.Errorf("headroom %v %v, want 8", h, ok)
	}
	// Bounded: a day of readings keeps maxRiseBuckets buckets, none
	// older than maxRiseBuckets start-ups.
	for k := 0; k < 720; k++ {
		r = r.Record(t0.Add(time.Duration(k)*width), 1, width)
	}
	if n := len(r.Buckets); n != maxRiseBuckets {
		t.Errorf("%d buckets, want %d", n, maxRiseBuckets)
	}
	// A rise no reading could give is left out.
	if got := r.Record(t0.Add(1000*width), nan(), width); len(got.Buckets) != len(r.Buckets) {
		t.Error("a NaN rise was recorded")
	}
}
