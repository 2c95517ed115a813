package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gputask/gputask-controller/pkg/gpuprofile"
)

func h100(t testing.TB) *gpuprofile.Profile {
	t.Helper()
	p, err := gpuprofile.Lookup("h100-llama-3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// recorder keeps a worker's events.
type recorder struct{ events []Event }

func (r *recorder) emit(e Event) { r.events = append(r.events, e) }

func (r *recorder) of(id int) []Event {
	var out []Event
	for _, e := range r.events {
		if e.ID == id {
			out = append(out, e)
		}
	}
	return out
}

func (r *recorder) at(id int, k Kind) []float64 {
	var out []float64
	for _, e := range r.of(id) {
		if e.Kind == k {
			out = append(out, e.At)
		}
	}
	return out
}

func newWorker(t testing.TB, cfg Config) (*Worker, *recorder) {
	t.Helper()
	rec := &recorder{}
	w, err := New(cfg, 0, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	return w, rec
}

func within(got, want, frac float64) bool { return math.Abs(got-want) <= frac*math.Abs(want) }

// One request alone on an H100: its time to first token is its prompt
// at the profile's prefill rate, and each later token one decode step of
// batch 1 at its context, worked out here from the measured table.
func TestSingleRequest(t *testing.T) {
	// The prefill table's tokens over its time (ms), and batch 1's ITL at
	// contexts 1,024 and 4,096 (ms), as measured.
	prefillRate := (512.0 + 2048 + 8192 + 4*2048 + 16*2048) / (13.95 + 51.2 + 230.71 + 210.9 + 843.49) * 1e3
	itl1 := func(ctx float64) float64 { return (7.026 + (8.315-7.026)*(ctx-1024)/3072) / 1e3 }
	for _, tc := range []struct{ prompt, output int }{
		{3000, 400}, // one prefill step, contexts between 1,024 and 4,096
		{2048, 1},   // the measured 51.2 ms prefill, within 5 %: one token
		{1500, 2000},
	} {
		t.Run(fmt.Sprintf("%d+%d", tc.prompt, tc.output), func(t *testing.T) {
			w, rec := newWorker(t, Config{Profile: h100(t)})
			w.Enqueue(7, tc.prompt, tc.output, 10)
			w.Advance(math.Inf(1))
			ttft := float64(tc.prompt) / prefillRate
			// The k-th token after the first is decoded at context
			// prompt + k; the mean of a linear ITL over k = 1..O-1 is its
			// value at the mean context.
			n := float64(tc.output - 1)
			e2e := ttft + n*itl1(float64(tc.prompt)+(n+1)/2)
			first, fin := rec.at(7, FirstToken), rec.at(7, Finished)
			if len(first) != 1 || len(fin) != 1 {
				t.Fatalf("events %v: want one first token and one finish", rec.of(7))
			}
			if got := first[0] - 10; !within(got, ttft, 0.05) {
				t.Errorf("TTFT %.4f s, want %.4f within 5 %%", got, ttft)
			}
			if got := fin[0] - 10; !within(got, e2e, 0.05) {
				t.Errorf("end to end %.4f s, want %.4f within 5 %%", got, e2e)
			}
			// The engine's own convention, exactly: no step lost or added.
			if got := fin[0] - 10; !within(got, e2e, 1e-9) {
				t.Errorf("end to end %.9f s, want exactly %.9f", got, e2e)
			}
			if tc.prompt == 2048 && !within(first[0]-10, 0.0512, 0.05) {
				t.Errorf("TTFT of 2,048 tokens %.4f s, want the measured 51.2 ms within 5 %%", first[0]-10)
			}
			if w.Running() != 0 || w.Waiting() != 0 || !math.IsInf(w.Next(), 1) {
				t.Errorf("worker not idle after: %d running, %d waiting, next %v", w.Running(), w.Waiting(), w.Next())
			}
		})
	}
}

// A long prompt is prefilled in chunks of MaxBatchedTokens, each a step:
// the time is the same as one pass at the prefill rate, and the first
// token comes at the end of the last chunk.
func TestChunkedPrefill(t *testing.T) {
	p := h100(t)
	w, rec := newWorker(t, Config{Profile: p, MaxBatchedTokens: 1000})
	w.Enqueue(1, 4500, 1, 0)
	w.Advance(math.Inf(1))
	if got, want := rec.at(1, FirstToken)[0], 4500/p.PrefillTokensPerSecond(); !within(got, want, 1e-9) {
		t.Errorf("first token at %v, want %v", got, want)
	}
	if w.Iterations() != 5 || w.Steps() != 5 {
		t.Errorf("%d iterations of %d steps, want 5 chunks of at most 1000 tokens", w.Iterations(), w.Steps())
	}
}

// When the KV cache runs out, the newest sequence is preempted, waits at
// the head of the queue with its tokens kept, and recomputes them when
// admitted again.
func TestKVExhaustionPreempts(t *testing.T) {
	p := h100(t)
	// 100 blocks of 16 tokens; three requests of 400 + 400 tokens need 25
	// blocks each at admission and 50 at their end.
	w, rec := newWorker(t, Config{Profile: p, KVTokens: 1600})
	for id := 1; id <= 3; id++ {
		w.Enqueue(id, 400, 400, 0)
	}
	w.Advance(math.Inf(1))
	if w.Preemptions() != 1 {
		t.Fatalf("%d preemptions, want 1", w.Preemptions())
	}
	var kinds []Kind
	for _, e := range rec.of(3) {
		kinds = append(kinds, e.Kind)
	}
	// The three fit until each holds 34 blocks (context 529, 129 tokens
	// generated): then the newest goes back to the queue and cannot come
	// back before the others finish (they hold 34 blocks or more each).
	if want := []Kind{Admitted, FirstToken, Preempted, Admitted, Finished}; !slices.Equal(kinds, want) {
		t.Fatalf("request 3: %v, want %v", kinds, want)
	}
	for id := 1; id <= 2; id++ {
		if len(rec.at(id, Preempted)) != 0 || len(rec.at(id, Finished)) != 1 {
			t.Errorf("request %d: %v, want it finished unpreempted", id, rec.of(id))
		}
	}
	// The three were admitted together, so 1 and 2 finish together.
	others := rec.at(2, Finished)[0]
	readmit := rec.at(3, Admitted)[1]
	if readmit != others {
		t.Errorf("request 3 readmitted at %v, want when the others finished at %v", readmit, others)
	}
	// Its recompute: a prefill of its prompt and 129 generated tokens,
	// then the 270 tokens left at batch 1.
	want := float64(400+129) / p.PrefillTokensPerSecond()
	for ctx := 530; ctx < 800; ctx++ {
		want += p.ITLSeconds(1, float64(ctx))
	}
	if got := rec.at(3, Finished)[0] - readmit; !within(got, want, 1e-9) {
		t.Errorf("request 3 took %v after readmission, want %v: a recompute of 529 tokens and 270 decode steps", got, want)
	}
	if used, _ := w.KVBlocks(); used != 0 {
		t.Errorf("%d KV blocks in use after every request finished", used)
	}
}

// MaxNumSeqs caps the batch: the rest wait, first come first served.
func TestMaxNumSeqs(t *testing.T) {
	w, rec := newWorker(t, Config{Profile: h100(t), MaxNumSeqs: 2})
	for id := 1; id <= 3; id++ {
		w.Enqueue(id, 100, 50, 0)
	}
	w.Advance(0.05)
	if w.Running() != 2 || w.Waiting() != 1 {
		t.Errorf("%d running, %d waiting, want 2 and 1", w.Running(), w.Waiting())
	}
	w.Advance(math.Inf(1))
	if a, f := rec.at(3, Admitted)[0], rec.at(1, Finished)[0]; a != f {
		t.Errorf("request 3 admitted at %v, want when request 1 finished at %v", a, f)
	}
}

// A request that cannot fit the KV cache alone is rejected at once.
func TestRejectsTooLong(t *testing.T) {
	w, rec := newWorker(t, Config{Profile: h100(t), KVTokens: 1600})
	w.Enqueue(1, 1500, 101, 3)
	if len(rec.events) != 1 || rec.events[0] != (Event{Kind: Rejected, ID: 1, At: 3}) {
		t.Errorf("events %v, want request 1 rejected at 3", rec.events)
	}
	if w.Outstanding() != 0 {
		t.Errorf("%d outstanding", w.Outstanding())
	}
}

// Requests of one worker that decode for long: the worker schedules a
// few times per request, not once per token.
func TestIterationsPerRequest(t *testing.T) {
	w, rec := newWorker(t, Config{Profile: h100(t)})
	rng := rand.New(rand.NewPCG(3, 4))
	at := 0.0
	const n = 2000
	for id := range n {
		// One a second, 3,000 tokens long on average: about 30 decode
		// together, some 50 steps between two arrivals.
		at += rng.ExpFloat64()
		w.Enqueue(id, 200+rng.IntN(800), 2000+rng.IntN(2000), at)
	}
	w.Advance(math.Inf(1))
	finished := 0
	for _, e := range rec.events {
		if e.Kind == Finished {
			finished++
		}
	}
	if finished != n {
		t.Fatalf("%d finished of %d", finished, n)
	}
	// Per request: the step that prefills it, the run its arrival cuts,
	// the run its completion ends, and a few where the mean context
	// crosses a measured context.
	if w.Iterations() > 4*n {
		t.Errorf("%d iterations for %d requests: want at most 4 per request", w.Iterations(), n)
	}
	if w.Steps() < 20*w.Iterations() {
		t.Errorf("%d steps in %d iterations: want runs of 20 steps or more on average", w.Steps(), w.Iterations())
	}
	t.Logf("%d requests, %d iterations, %d steps", n, w.Iterations(), w.Steps())
}

// The closed form plays exactly what the engine does step by step.
func TestClosedFormMatchesSteps(t *testing.T) {
	p := h100(t)
	rng := rand.New(rand.NewPCG(11, 12))
	for c := range 300 {
		cfg := Config{
			Profile:          p,
			MaxBatchedTokens: 16 + rng.IntN(600),
			MaxNumSeqs:       1 + rng.IntN(12),
			BlockSize:        []int{1, 4, 16}[rng.IntN(3)],
			KVTokens:         int64(400 + rng.IntN(3000)),
		}
		if c%5 == 0 {
			cfg.KVTokens = 0 // the profile's: no preemption
		}
		// A third of the cases are long enough for the mean context to
		// cross 4,096, where the ITL's slope changes.
		long := c%3 == 1
		if long {
			cfg.KVTokens = int64(6000 + rng.IntN(20000))
		}
		var reqs []arrival
		at := 0.0
		for id := range 1 + rng.IntN(40) {
			if rng.IntN(4) > 0 {
				at += rng.ExpFloat64() * 0.1
			}
			r := arrival{id: id, prompt: rng.IntN(900), output: rng.IntN(300), at: at}
			if long {
				r.prompt, r.output = 3000+rng.IntN(1200), rng.IntN(1500)
			}
			reqs = append(reqs, r)
		}
		t.Run(fmt.Sprint(c), func(t *testing.T) {
			w, rec := newWorker(t, cfg)
			for _, r := range reqs {
				w.Enqueue(r.id, r.prompt, r.output, r.at)
			}
			w.Advance(math.Inf(1))
			want, preemptions := stepByStep(cfg, reqs)
			// Per request, in order: events of one instant may come in
			// another order across requests.
			byID := func(events []Event) map[int][]Event {
				m := map[int][]Event{}
				for _, e := range events {
					m[e.ID] = append(m[e.ID], e)
				}
				return m
			}
			got, exp := byID(rec.events), byID(want)
			if len(rec.events) != len(want) {
				t.Fatalf("%d events, want %d step by step", len(rec.events), len(want))
			}
			for id, es := range exp {
				if len(got[id]) != len(es) {
					t.Fatalf("request %d: %v, want %v step by step", id, got[id], es)
				}
				for i, e := range es {
					g := got[id][i]
					if g.Kind != e.Kind || !within(g.At, e.At, 1e-9) {
						t.Fatalf("request %d: %v, want %v step by step", id, got[id], es)
					}
				}
			}
			if w.Preemptions() != preemptions {
				t.Errorf("%d preemptions, want %d", w.Preemptions(), preemptions)
			}
		})
	}
}

type arrival struct {
	id, prompt, output int
	at                 float64
}

// stepByStep is the engine one step at a time: the reference the closed
// form must equal. A request joins the first step that begins at or
// after its arrival.
func stepByStep(cfg Config, reqs []arrival) (events []Event, preemptions int64) {
	cfg = cfg.WithDefaults()
	p := cfg.Profile
	rate := p.PrefillTokensPerSecond()
	bs := cfg.BlockSize
	capacity := cfg.CacheTokens() / int64(bs)
	blocks := func(tokens int) int64 { return int64((tokens + bs - 1) / bs) }
	type sq struct {
		id, prompt, output, g, computed int
		decoding                        bool
	}
	var running, queue []*sq
	t := 0.0
	next := 0
	enqueue := func(r arrival) {
		s := &sq{id: r.id, prompt: max(r.prompt, 1), output: max(r.output, 1)}
		if blocks(s.prompt+s.output) > capacity {
			events = append(events, Event{Rejected, r.id, r.at})
			return
		}
		queue = append(queue, s)
	}
	for {
		for next < len(reqs) && reqs[next].at <= t {
			enqueue(reqs[next])
			next++
		}
		if len(running) == 0 && len(queue) == 0 {
			if next == len(reqs) {
				return events, preemptions
			}
			t = math.Max(t, reqs[next].at)
			continue
		}
		used := func() (n int64) {
			for _, s := range running {
				n += blocks(s.prompt + s.g)
			}
			return n
		}
		for used() > capacity {
			s := running[len(running)-1]
			running = running[:len(running)-1]
			s.decoding, s.computed = false, 0
			queue = append([]*sq{s}, queue...)
			preemptions++
			events = append(events, Event{Preempted, s.id, t})
		}
		budget := cfg.MaxBatchedTokens
		chunk := map[*sq]int{}
		for _, s := range running {
			if !s.decoding {
				c := min(s.prompt+s.g-s.computed, budget)
				chunk[s] = c
				budget -= c
			}
		}
		for budget > 0 && len(running) < cfg.MaxNumSeqs && len(queue) > 0 {
			s := queue[0]
			if used()+blocks(s.prompt+s.g) > capacity {
				break
			}
			queue = queue[1:]
			running = append(running, s)
			c := min(s.prompt+s.g, budget)
			chunk[s] = c
			budget -= c
			events = append(events, Event{Admitted, s.id, t})
		}
		var decoders, ctx, tokens int
		for _, s := range running {
			if s.decoding {
				decoders++
				ctx += s.prompt + s.g
			}
			tokens += chunk[s]
		}
		dt := float64(tokens) / rate
		if decoders > 0 {
			dt += p.ITLSeconds(decoders, float64(ctx)/float64(decoders))
		}
		t += dt
		var kept []*sq
		for _, s := range running {
			if s.decoding {
				s.g++
				if s.g >= s.output {
					events = append(events, Event{Finished, s.id, t})
					continue
				}
			}
			kept = append(kept, s)
		}
		running = kept[:0:0]
		for _, s := range kept {
			if !s.decoding {
				s.computed += chunk[s]
				if s.computed == s.prompt+s.g {
					s.g++
					s.computed = 0
					if s.g == 1 {
						events = append(events, Event{FirstToken, s.id, t})
					}
					if s.g >= s.output {
						events = append(events, Event{Finished, s.id, t})
						continue
					}
					s.decoding = true
				}
			}
			running = append(running, s)
		}
	}
}

// BenchmarkPool is a pool of 50 H100 workers behind a least-outstanding
// router over three days of traffic: 4 requests per second, each of a
// log-normal prompt (median 600 tokens) and output (median 250).
func BenchmarkPool(b *testing.B) {
	p := h100(b)
	const workers = 50
	const seconds = 3 * 24 * 3600.0
	rate := benchRate
	for b.Loop() {
		var finished, iterations, steps int64
		emit := func(e Event) {
			if e.Kind == Finished {
				finished++
			}
		}
		ws := make([]*Worker, workers)
		for i := range ws {
			ws[i], _ = New(Config{Profile: p}, 0, emit)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		tokens := func(median float64) int { return int(median*math.Exp(0.8*rng.NormFloat64())) + 1 }
		n := 0
		for at := rng.ExpFloat64() / rate; at < seconds; at += rng.ExpFloat64() / rate {
			best := ws[0]
			for _, w := range ws {
				w.Advance(at)
				if w.Outstanding() < best.Outstanding() {
					best = w
				}
			}
			best.Enqueue(n, tokens(600), tokens(250), at)
			n++
		}
		for _, w := range ws {
			w.Advance(math.Inf(1))
			iterations += w.Iterations()
			steps += w.Steps()
		}
		if finished != int64(n) {
			b.Fatalf("%d finished of %d", finished, n)
		}
		b.ReportMetric(float64(n), "requests")
		b.ReportMetric(float64(iterations)/float64(n), "iterations/request")
		b.ReportMetric(float64(steps)/float64(iterations), "steps/iteration")
	}
}

// benchRate is BenchmarkPool's arrivals per second.
var benchRate = 4.0
