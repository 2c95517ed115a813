package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// Batched serving: a sequence decodes one token per α + β × batch, every
// sequence in flight on its worker counting, and each completion is
// recomputed when the batch changes.
func TestBatchedCompletions(t *testing.T) {
	itl := ITL{Base: 20 * time.Millisecond, PerSeq: 5 * time.Millisecond}
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	type req struct {
		arrival, prefill time.Duration
		tokens           float64
	}
	for _, tc := range []struct {
		name        string
		reqs        []req
		concurrency int
		workers     int
		// want is when each request finishes, by index.
		want []time.Duration
	}{{
		name: "alone: prefill + tokens × (α+β)",
		reqs: []req{{0, time.Second, 100}}, concurrency: 4, workers: 1,
		want: []time.Duration{time.Second + 100*ms(25)},
	}, {
		name: "two started together: each decodes at α+2β, 100 × β later than alone",
		reqs: []req{{0, time.Second, 100}, {0, time.Second, 100}}, concurrency: 4, workers: 1,
		want: []time.Duration{time.Second + 100*ms(30), time.Second + 100*ms(30)},
	}, {
		name: "two on two workers: each alone",
		reqs: []req{{0, time.Second, 100}, {0, time.Second, 100}}, concurrency: 4, workers: 2,
		want: []time.Duration{time.Second + 100*ms(25), time.Second + 100*ms(25)},
	}, {
		// The first decodes 40 tokens alone by 1 s, its other 60 at 30 ms
		// (2.8 s); the second decodes 60 at 30 ms by then, its last 40
		// alone at 25 ms.
		name: "joining mid-way slows the one in flight from then on",
		reqs: []req{{0, 0, 100}, {time.Second, 0, 100}}, concurrency: 4, workers: 1,
		want: []time.Duration{ms(2800), ms(3800)},
	}, {
		// A sequence in its prefill is in the batch: the first slows at
		// 1 s; the second decodes from 1.5 s, 1.3 s at 30 ms (43⅓
		// tokens), the other 56⅔ alone.
		name: "a prefilling sequence counts in the batch",
		reqs: []req{{0, 0, 100}, {time.Second, 500 * time.Millisecond, 100}}, concurrency: 4, workers: 1,
		want: []time.Duration{ms(2800), ms(2800 + (56+2.0/3)*25)},
	}, {
		// With one slot the second waits in the queue and runs alone.
		name: "capacity is the concurrency",
		reqs: []req{{0, 0, 100}, {0, 0, 100}}, concurrency: 1, workers: 1,
		want: []time.Duration{ms(2500), ms(5000)},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var tr workload.Trace
			for _, r := range tc.reqs {
				tr.Requests = append(tr.Requests, workload.Served{Arrival: r.arrival, Service: time.Hour})
				tr.Tokens = append(tr.Tokens, workload.Tokens{Prefill: r.prefill, OutputTokens: r.tokens})
			}
			p := NewPool(tr, t0, tc.concurrency, 0)
			if err := p.SetBatched(itl); err != nil {
				t.Fatal(err)
			}
			p.AddReady(tc.workers)
			got := finishTimes(t, p)
			for i := range tc.want {
				if d := got[i] - tc.want[i]; d < -time.Microsecond || d > time.Microsecond {
					t.Errorf("request %d finished at %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// Batched serving needs every request's token counts.
func TestBatchedNeedsTokens(t *testing.T) {
	tr := workload.Trace{Requests: []workload.Served{{Arrival: 0, Service: time.Second}}}
	err := NewPool(tr, t0, 1, 0).SetBatched(DefaultITL)
	if err == nil || !strings.Contains(err.Error(), "token counts") {
		t.Errorf("SetBatched without tokens = %v, want an error naming the token counts", err)
	}
	tr.Tokens = []workload.Tokens{{OutputTokens: 1}}
	if err := NewPool(tr, t0, 1, 0).SetBatched(ITL{}); err == nil {
		t.Error("SetBatched with a zero latency: no error")
	}
}

// running is the requests in flight on any worker.
func (p *Pool) running() map[int]bool {
	out := map[int]bool{}
	for _, w := range append(append([]*Worker(nil), p.workers...), p.terminating...) {
		for _, r := range w.inFlight {
			out[r] = true
		}
	}
	return out
}

// finishTimes plays p to its end event by event and gives when each
// request finished, from t0.
func finishTimes(t testing.TB, p *Pool) []time.Duration {
	got := make([]time.Duration, len(p.trace))
	for !p.Finished() {
		next, kind := p.nextEvent()
		if kind == eventNone {
			t.Fatal("no event left, not finished")
		}
		running := p.running()
		p.Advance(next)
		after := p.running()
		for r := range running {
			if !after[r] && !p.failed[r] {
				got[r] = p.now.Sub(t0)
			}
		}
	}
	return got
}

// Whatever the arrivals, a request's decode runs between the speed of a
// batch of one and that of a full worker: it finishes no sooner than
// prefill + tokens × (α+β) after it started, and no later than prefill +
// tokens × (α + concurrency × β).
func FuzzBatchedBounds(f *testing.F) {
	f.Add(uint64(1), uint8(3), uint8(2), uint8(20))
	f.Add(uint64(7), uint8(1), uint8(1), uint8(40))
	f.Add(uint64(42), uint8(8), uint8(3), uint8(60))
	f.Fuzz(func(t *testing.T, seed uint64, concurrency, workers, n uint8) {
		c, w := int(concurrency%8)+1, int(workers%4)+1
		itl := ITL{Base: 6 * time.Millisecond, PerSeq: 300 * time.Microsecond}
		rng := seed
		next := func(m uint64) uint64 { rng = rng*6364136223846793005 + 1442695040888963407; return (rng >> 33) % m }
		var tr workload.Trace
		at := time.Duration(0)
		for range int(n%64) + 1 {
			at += time.Duration(next(3000)) * time.Millisecond
			tr.Requests = append(tr.Requests, workload.Served{Arrival: at, Service: time.Second})
			tr.Tokens = append(tr.Tokens, workload.Tokens{Prefill: time.Duration(next(500)) * time.Millisecond, OutputTokens: float64(next(400) + 1)})
		}
		p := NewPool(tr, t0, c, 0)
		if err := p.SetBatched(itl); err != nil {
			t.Fatal(err)
		}
		p.AddReady(w)
		got := finishTimes(t, p)
		for r, req := range tr.Requests {
			start := req.Arrival + p.waits[r]
			tok := tr.Tokens[r]
			lo := start + tok.Prefill + time.Duration(tok.OutputTokens*float64(itl.At(1)))
			hi := start + tok.Prefill + time.Duration(tok.OutputTokens*float64(itl.At(c)))
			if got[r] < lo-time.Microsecond || got[r] > hi+time.Microsecond {
				t.Errorf("request %d (started %v, %+v) finished at %v, want within [%v, %v]", r, start, tok, got[r], lo, hi)
			}
		}
	})
}
