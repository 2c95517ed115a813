package sim

import (
	"math"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/gputask/gputask-controller/pkg/gpuprofile"
	enginemodel "github.com/gputask/gputask-controller/pkg/replay/engine"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

func h100Profile(t *testing.T) *gpuprofile.Profile {
	t.Helper()
	p, err := gpuprofile.Lookup("h100-llama-3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// tokenTrace is requests of (arrival, prompt, output).
func tokenTrace(reqs ...[3]float64) workload.Trace {
	var tr workload.Trace
	for _, r := range reqs {
		tr.Requests = append(tr.Requests, workload.Served{Arrival: time.Duration(r[0] * float64(time.Second)), Service: time.Second})
		tr.Tokens = append(tr.Tokens, workload.Tokens{InputTokens: r[1], OutputTokens: r[2]})
	}
	return tr
}

func enginePool(t *testing.T, tr workload.Trace, concurrency int, router Router, cfg enginemodel.Config) *Pool {
	t.Helper()
	if cfg.Profile == nil {
		cfg.Profile = h100Profile(t)
	}
	p := NewPool(tr, t0, concurrency, time.Minute)
	if err := p.SetEngine(EngineServing{Engine: cfg, Router: router}); err != nil {
		t.Fatal(err)
	}
	return p
}

// One request on one worker: the pool's outcome is the profile's prefill
// and decode times, worked out by hand from the measured table.
func TestEngineServingOneRequest(t *testing.T) {
	p := enginePool(t, tokenTrace([3]float64{2, 3000, 400}), 1, RouterLeastOutstanding, enginemodel.Config{})
	p.AddReady(1)
	p.Advance(t0.Add(time.Hour))
	if !p.Finished() {
		t.Fatal("not finished")
	}
	prefillRate := (512.0 + 2048 + 8192 + 4*2048 + 16*2048) / (13.95 + 51.2 + 230.71 + 210.9 + 843.49) * 1e3
	itl1 := func(ctx float64) float64 { return (7.026 + (8.315-7.026)*(ctx-1024)/3072) / 1e3 }
	ttft := 3000 / prefillRate
	e2e := ttft + 399*itl1(3000+200)
	o := p.Outcomes()[0]
	if !o.Started || o.Failed || o.Wait != 0 {
		t.Fatalf("outcome %+v: want started at once", o)
	}
	if math.Abs(o.TTFT.Seconds()-ttft) > 0.05*ttft {
		t.Errorf("TTFT %v, want %.4fs within 5 %%", o.TTFT, ttft)
	}
	if math.Abs(o.E2E.Seconds()-e2e) > 0.05*e2e {
		t.Errorf("end to end %v, want %.4fs within 5 %%", o.E2E, e2e)
	}
	if want := (e2e - ttft) / 399; math.Abs(o.ITL.Seconds()-want) > 0.05*want {
		t.Errorf("ITL %v, want %.5fs", o.ITL, want)
	}
}

// Least-outstanding routing sends a request at its arrival to the worker
// with the fewest outstanding requests, and it waits there: it does not
// move to another worker that frees up first. Pooled routing hands it to
// the first worker that has room.
func TestEngineRouting(t *testing.T) {
	// One sequence per worker. Request 0 is long and goes to the first
	// worker, request 1 short to the second; request 2 finds one
	// outstanding on each and goes to the oldest, the first.
	tr := tokenTrace([3]float64{0, 100, 3000}, [3]float64{0.1, 100, 50}, [3]float64{0.2, 100, 10})
	for _, tc := range []struct {
		router Router
		// wantStart is when request 2 is admitted: when request 0 or
		// request 1 finishes.
		wantAfter int
	}{
		{RouterLeastOutstanding, 0},
		{RouterPooled, 1},
	} {
		t.Run(string(tc.router), func(t *testing.T) {
			p := enginePool(t, tr, 1, tc.router, enginemodel.Config{MaxNumSeqs: 1})
			ws := p.AddReady(2)
			p.Advance(t0.Add(300 * time.Millisecond))
			o := p.Observe()
			switch tc.router {
			case RouterLeastOutstanding:
				if ws[0].Queued() != 1 || o.Waiting != 1 || o.InFlight != 2 {
					t.Errorf("worker queues %d, %d; observation %+v: want request 2 queued on the first worker", ws[0].Queued(), ws[1].Queued(), o)
				}
			case RouterPooled:
				if ws[0].Queued()+ws[1].Queued() != 0 || o.Waiting != 1 {
					t.Errorf("worker queues %d, %d; observation %+v: want request 2 in the pool's queue", ws[0].Queued(), ws[1].Queued(), o)
				}
			}
			p.Advance(t0.Add(time.Hour))
			if !p.Finished() {
				t.Fatal("not finished")
			}
			start := p.start.Add(p.trace[2].Arrival).Add(p.waits[2])
			if want := p.timeOf(p.finished[tc.wantAfter]); !start.Equal(want) {
				t.Errorf("request 2 admitted at %v, want when request %d finished at %v (request 0 at %v, 1 at %v)",
					start.Sub(t0), tc.wantAfter, want.Sub(t0), p.timeOf(p.finished[0]).Sub(t0), p.timeOf(p.finished[1]).Sub(t0))
			}
			if p.finished[1] >= p.finished[0] {
				t.Errorf("request 1 finished at %v, after request 0 at %v", p.timeOf(p.finished[1]).Sub(t0), p.timeOf(p.finished[0]).Sub(t0))
			}
		})
	}
}

// With no Ready worker, requests wait in the pool's queue and are routed,
// least outstanding first, when workers become Ready; a draining worker
// gets nothing new but serves what is queued on it.
func TestEngineRoutingReadyAndDrain(t *testing.T) {
	tr := tokenTrace([3]float64{0, 100, 500}, [3]float64{0, 100, 500}, [3]float64{0, 100, 500},
		[3]float64{70, 100, 500})
	p := enginePool(t, tr, 1, RouterLeastOutstanding, enginemodel.Config{MaxNumSeqs: 1})
	ws := p.Add(2) // Ready at one minute
	p.Advance(t0.Add(30 * time.Second))
	if o := p.Observe(); o.Waiting != 3 || o.Running != 0 || ws[0].Busy() {
		t.Fatalf("observation %+v: want three waiting in the pool's queue", o)
	}
	p.Advance(t0.Add(time.Minute))
	// Requests 0 and 2 on the first worker (one running, one queued),
	// request 1 on the second.
	if ws[0].InFlight() != 1 || ws[0].Queued() != 1 || ws[1].InFlight() != 1 || ws[1].Queued() != 0 {
		t.Fatalf("workers hold %d+%d and %d+%d, want 1+1 and 1+0", ws[0].InFlight(), ws[0].Queued(), ws[1].InFlight(), ws[1].Queued())
	}
	p.Drain(ws[0])
	at, idle := p.Advance(t0.Add(time.Hour))
	if !idle || ws[0].Busy() {
		t.Fatalf("Advance stopped at %v, idle %v: want a stop when the draining worker finished its queue", at.Sub(t0), idle)
	}
	// Its queued request was served by it, after its first.
	if p.waits[2] <= p.waits[0] || !p.timeOf(p.finished[2]).Equal(at) {
		t.Errorf("request 2 waited %v and finished at %v, want it served last by the draining worker at %v", p.waits[2], p.timeOf(p.finished[2]).Sub(t0), at.Sub(t0))
	}
	p.Advance(t0.Add(70*time.Second + time.Millisecond))
	if ws[0].Busy() || ws[1].InFlight() != 1 {
		t.Errorf("request 3 went to the draining worker: %d and %d in flight", ws[0].InFlight(), ws[1].InFlight())
	}
	p.Advance(t0.Add(time.Hour))
	if !p.Finished() || p.failed[3] || !p.started[3] {
		t.Errorf("request 3 not served by the worker that takes work")
	}
	if ws[0].eng.Iterations() > 10 {
		t.Errorf("the first worker scheduled %d times for two requests", ws[0].eng.Iterations())
	}
}

// A deleted worker finishes its running and queued requests within the
// grace and loses what is left when it is killed.
func TestEngineDeleteWithGrace(t *testing.T) {
	// Each request takes about 7 s alone; three queue on one worker.
	tr := tokenTrace([3]float64{0, 100, 1000}, [3]float64{0, 100, 1000}, [3]float64{0, 100, 1000})
	p := enginePool(t, tr, 1, RouterLeastOutstanding, enginemodel.Config{MaxNumSeqs: 1})
	p.SetGrace(10 * time.Second)
	ws := p.AddReady(1)
	p.Advance(t0.Add(time.Second))
	p.Delete(ws[0])
	if !ws[0].Terminating {
		t.Fatal("a busy worker was removed at once")
	}
	p.Advance(t0.Add(time.Hour))
	if !p.Finished() {
		t.Fatal("not finished")
	}
	if p.failed[0] || !p.failed[1] || !p.failed[2] {
		t.Errorf("failed %v: want the first served within the grace, the second killed mid-way and the third never started", p.failed)
	}
	if !p.started[1] || p.started[2] {
		t.Errorf("started %v: want the second admitted before the kill, not the third", p.started)
	}
	if ws[0].Removed != t0.Add(11*time.Second) {
		t.Errorf("removed at %v, want at the grace's end", ws[0].Removed.Sub(t0))
	}
}

// Preemptions reach the pool, and a preempted request keeps its first
// admission as the end of its wait.
func TestEnginePoolPreemption(t *testing.T) {
	tr := tokenTrace([3]float64{0, 400, 400}, [3]float64{0, 400, 400}, [3]float64{0, 400, 400})
	p := enginePool(t, tr, 3, RouterLeastOutstanding, enginemodel.Config{KVTokens: 1600})
	p.AddReady(1)
	p.Advance(t0.Add(time.Hour))
	if !p.Finished() || p.Preemptions() != 1 {
		t.Fatalf("finished %v with %d preemptions, want 1", p.Finished(), p.Preemptions())
	}
	for r, o := range p.Outcomes() {
		if o.Failed || o.Wait != 0 || o.E2E <= 0 {
			t.Errorf("request %d: %+v, want admitted at once and finished", r, o)
		}
	}
	if len(p.startWaits) != 3 {
		t.Errorf("%d admissions counted in the wait histogram, want 3: a readmission is not a new wait", len(p.startWaits))
	}
}

// Engine serving needs every request's token counts.
func TestEngineServingNeedsTokens(t *testing.T) {
	p := NewPool(workload.Trace{Requests: []workload.Served{{Arrival: 0, Service: time.Second}}}, t0, 1, 0)
	if err := p.SetEngine(EngineServing{Engine: enginemodel.Config{Profile: h100Profile(t)}}); err == nil {
		t.Error("a trace without tokens was accepted")
	}
	if _, err := ParseRouter("random"); err == nil {
		t.Error("an unknown router was accepted")
	}
}

// BenchmarkEnginePool plays three days of 4 requests a second (prompts of
// a median 600 tokens, outputs of 250) on a pool of 50 H100 workers behind
// the least-outstanding router: the pool's cost on top of the engines'.
func BenchmarkEnginePool(b *testing.B) {
	profile, err := gpuprofile.Lookup("h100-llama-3.1-8b")
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	tokens := func(median float64) float64 { return math.Round(median*math.Exp(0.8*rng.NormFloat64())) + 1 }
	var tr workload.Trace
	for at := 0.0; at < 3*24*3600; at += rng.ExpFloat64() / 4 {
		tr.Requests = append(tr.Requests, workload.Served{Arrival: time.Duration(at * float64(time.Second)), Service: time.Second})
		tr.Tokens = append(tr.Tokens, workload.Tokens{InputTokens: tokens(600), OutputTokens: tokens(250)})
	}
	for b.Loop() {
		p := NewPool(tr, t0, 64, time.Minute)
		if err := p.SetEngine(EngineServing{Engine: enginemodel.Config{Profile: profile}}); err != nil {
			b.Fatal(err)
		}
		p.AddReady(50)
		p.Advance(t0.Add(4 * 24 * time.Hour))
		if !p.Finished() {
			b.Fatal("not finished")
		}
		b.ReportMetric(float64(len(tr.Requests)), "requests")
	}
}

// When the replay gives up, the requests queued on a worker fail with
// those in the pool's queue; the one running stays in flight.
func TestEngineAbandon(t *testing.T) {
	tr := tokenTrace([3]float64{0, 100, 5000}, [3]float64{0, 100, 10}, [3]float64{9000, 100, 10})
	p := enginePool(t, tr, 1, RouterLeastOutstanding, enginemodel.Config{MaxNumSeqs: 1})
	ws := p.AddReady(1)
	p.Advance(t0.Add(time.Second))
	if ws[0].InFlight() != 1 || ws[0].Queued() != 1 {
		t.Fatalf("worker holds %d+%d, want one running and one queued", ws[0].InFlight(), ws[0].Queued())
	}
	p.Abandon()
	if p.failed[0] || !p.failed[1] || !p.failed[2] || p.started[1] {
		t.Errorf("failed %v, started %v: want the queued and the unarrived failed, the running one not", p.failed, p.started)
	}
	if ws[0].Queued() != 0 || ws[0].InFlight() != 1 {
		t.Errorf("worker holds %d+%d after, want the running one only", ws[0].InFlight(), ws[0].Queued())
	}
}

// A pool keeps only the times its windows read: over three hours, idle
// for a while, its
// per-window records stay within what the longest window holds, and
// every observation, minute by minute, is what a pool that forgets
// nothing observes.
func TestPoolForgetsWhatNoWindowReads(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var reqs [][3]float64
	for at := 0.0; at < 3*3600; at += rng.ExpFloat64() / 5 {
		if at > 3600 && at < 4800 {
			at = 4800 // idle for 20 minutes: every window empty
		}
		reqs = append(reqs, [3]float64{at, float64(100 + rng.IntN(2000)), float64(1 + rng.IntN(300))})
	}
	play := func(atLeast int) (obs []Observation, longest int) {
		forgetAtLeast = atLeast
		defer func() { forgetAtLeast = 1024 }()
		p := enginePool(t, tokenTrace(reqs...), 64, RouterLeastOutstanding, enginemodel.Config{})
		p.AddReady(2)
		for at := t0.Add(time.Minute); p.next < len(reqs) || !p.Finished(); at = at.Add(time.Minute) {
			p.Advance(at)
			obs = append(obs, p.Observe())
			longest = max(longest, len(p.finishedAt), len(p.startedAt), len(p.vllm.firstAt), len(p.vllm.finish))
		}
		return obs, longest
	}
	want, all := play(math.MaxInt)
	got, longest := play(16)
	if all < len(reqs) {
		t.Fatalf("the pool that forgets nothing kept %d times of %d requests", all, len(reqs))
	}
	// About 5 a second over the longest window (5m) and the minute
	// between observations, and twice that before half of them are
	// stale: a tenth of the trace.
	if bound := 2 * 5 * 360 * 5 / 4; longest > bound {
		t.Errorf("kept up to %d times of %d requests, want at most %d", longest, len(reqs), bound)
	}
	if len(got) != len(want) {
		t.Fatalf("%d observations, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("minute %d: observed\n%+v\nwant\n%+v", i+1, got[i], want[i])
		}
	}
}

// The token buckets a pool observes are those of the requests that
// finished within the last WaitWindow, each counted where its output and
// its prompt fall, while the pool forgets what no window reads.
func TestPoolObservesTheTokensOfTheLastWaitWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	var reqs [][3]float64
	for at := 0.0; at < 5400; at += rng.ExpFloat64() / 2 {
		if at > 1800 && at < 2700 {
			at = 2700 // idle for 15 minutes: the window empties
		}
		reqs = append(reqs, [3]float64{at, float64(1 + rng.IntN(8000)), float64(1 + rng.IntN(3000))})
	}
	forgetAtLeast = 16
	defer func() { forgetAtLeast = 1024 }()
	p := enginePool(t, tokenTrace(reqs...), 64, RouterLeastOutstanding, enginemodel.Config{})
	p.AddReady(2)
	counted := 0.0
	for at := t0.Add(37 * time.Second); p.next < len(reqs) || !p.Finished(); at = at.Add(37 * time.Second) {
		p.Advance(at)
		o := p.Observe()
		var outputs, prompts TokenBuckets
		for r, f := range p.finished {
			if f != 0 && p.timeOf(f).After(at.Add(-WaitWindow)) {
				outputs[sort.SearchFloat64s(VLLMTokenBuckets, p.tokens[r].OutputTokens)]++
				prompts[sort.SearchFloat64s(VLLMTokenBuckets, p.tokens[r].InputTokens)]++
			}
		}
		if o.Outputs != outputs || o.Prompts != prompts {
			t.Fatalf("at %v: observed outputs %v prompts %v, want %v and %v", at.Sub(t0), o.Outputs, o.Prompts, outputs, prompts)
		}
		for _, n := range outputs {
			counted += n
		}
	}
	if counted < float64(len(reqs)) {
		t.Fatalf("the windows counted %v finished requests of %d", counted, len(reqs))
	}
}
