package sim

import (
	"math"
	"testing"
	"time"

	enginemodel "github.com/gputask/gputask-controller/pkg/replay/engine"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// vllmTrace is four requests on the fixed model, each with its prefill
// and token counts, whose first tokens and finishes are worked out by
// hand (two workers of two slots: none waits):
//
//	req  arrival  service  prefill  prompt  output  first token (TTFT)  finish  ITL sum/count
//	 0      0s      10s      1s      100      10     1s  (1s, le=1)      10s      9s / 9
//	 1      5s       4s      2s      300       5     7s  (2s, le=2.5)     9s      2s / 4
//	 2     30s      40s      3s       50      21    33s  (3s, le=5)      70s     37s / 20
//	 3     55s      30s     10s      200      11    65s  (10s, le=10)    85s     20s / 10
func vllmTrace() workload.Trace {
	var tr workload.Trace
	for _, r := range []struct {
		arrival, service, prefill time.Duration
		prompt, output            float64
	}{
		{0, 10 * time.Second, time.Second, 100, 10},
		{5 * time.Second, 4 * time.Second, 2 * time.Second, 300, 5},
		{30 * time.Second, 40 * time.Second, 3 * time.Second, 50, 21},
		{55 * time.Second, 30 * time.Second, 10 * time.Second, 200, 11},
	} {
		tr.Requests = append(tr.Requests, workload.Served{Arrival: r.arrival, Service: r.service})
		tr.Tokens = append(tr.Tokens, workload.Tokens{Prefill: r.prefill, InputTokens: r.prompt, OutputTokens: r.output})
	}
	return tr
}

// ttftBuckets is a histogram of one observation in each of the buckets
// whose upper bounds are given.
func ttftBuckets(les ...float64) TTFTBuckets {
	var b TTFTBuckets
	for _, le := range les {
		for i, bound := range VLLMTTFTBuckets {
			if bound == le {
				b[i]++
			}
		}
	}
	return b
}

// The TTFT histogram, the inter-token latency, the token rates and the
// KV cache read from the pool of vllmTrace at several moments, fresh and
// behind a 15 s scrape: the fresh read covers the last minute (the
// trace's first minute at 60 s) for the counters and the last 5 minutes
// for the histogram; a scrape read is the last scrape's (at 7.5 s, 22.5 s
// and every 15 s on), with rates between the first and the last scrape
// within its window, as Prometheus's rate() takes them.
func TestVLLMMetrics(t *testing.T) {
	type want struct {
		ttft                  TTFTBuckets
		ttftP50, ttftP95      float64 // seconds; 0 for no value
		itl                   float64 // seconds; 0 for no value
		prompt, generation    float64
		promptTotal, itlCount float64
	}
	for _, tc := range []struct {
		name   string
		scrape time.Duration
		at     time.Duration
		want   want
	}{
		{name: "fresh at 60s: three first tokens, two finished", at: 60 * time.Second, want: want{
			ttft: ttftBuckets(1, 2.5, 5), ttftP50: 1 + 1.5*0.5, ttftP95: 2.5 + 2.5*0.85,
			itl: 11.0 / 13, prompt: 450.0 / 60, generation: 15.0 / 60, promptTotal: 450, itlCount: 13}},
		{name: "fresh at 120s: the last minute's first token and finishes", at: 120 * time.Second, want: want{
			ttft: ttftBuckets(1, 2.5, 5, 10), ttftP50: 1 + 1.5*1, ttftP95: 7.5 + 2.5*0.8,
			itl: 57.0 / 30, prompt: 200.0 / 60, generation: 32.0 / 60, promptTotal: 650, itlCount: 43}},
		{name: "fresh at 340s: only request 3's first token within 5m", at: 340 * time.Second, want: want{
			ttft: ttftBuckets(10), ttftP50: 7.5 + 2.5*0.5, ttftP95: 7.5 + 2.5*0.95, promptTotal: 650, itlCount: 43}},
		{name: "fresh at 400s: nothing within either window", at: 400 * time.Second, want: want{promptTotal: 650, itlCount: 43}},
		{name: "scraped at 60s: the scrape at 52.5s, rates since the trace's start", scrape: 15 * time.Second, at: 60 * time.Second, want: want{
			ttft: ttftBuckets(1, 2.5, 5), ttftP50: 1 + 1.5*0.5, ttftP95: 2.5 + 2.5*0.85,
			itl: 11.0 / 13, prompt: 450 / 52.5, generation: 15 / 52.5, promptTotal: 450, itlCount: 13}},
		{name: "scraped at 120s: rates between the scrapes at 67.5s and 112.5s", scrape: 15 * time.Second, at: 120 * time.Second, want: want{
			ttft: ttftBuckets(1, 2.5, 5, 10), ttftP50: 1 + 1.5*1, ttftP95: 7.5 + 2.5*0.8,
			itl: 57.0 / 30, prompt: 0, generation: 32.0 / 45, promptTotal: 650, itlCount: 43}},
		{name: "scraped at 340s: the histogram's increase from 52.5s to 337.5s", scrape: 15 * time.Second, at: 340 * time.Second, want: want{
			ttft: ttftBuckets(10), ttftP50: 7.5 + 2.5*0.5, ttftP95: 7.5 + 2.5*0.95, promptTotal: 650, itlCount: 43}},
		{name: "scraped at 400s: nothing within either window", scrape: 15 * time.Second, at: 400 * time.Second, want: want{promptTotal: 650, itlCount: 43}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPool(vllmTrace(), t0, 2, 0)
			p.SetScrape(tc.scrape)
			p.AddReady(2)
			p.Advance(t0.Add(tc.at))
			o := p.Metrics()
			if o.TTFT != tc.want.ttft {
				t.Errorf("TTFT buckets = %v, want %v", o.TTFT, tc.want.ttft)
			}
			for _, q := range []struct{ p, want float64 }{{50, tc.want.ttftP50}, {95, tc.want.ttftP95}} {
				got, ok := o.TTFTPercentile(q.p)
				if ok != (q.want > 0) || math.Abs(got-q.want) > 1e-6 {
					t.Errorf("TTFT p%v = %vs, %v; want %vs", q.p, got, ok, q.want)
				}
			}
			itl, ok := o.InterTokenLatency()
			if ok != (tc.want.itl > 0) || math.Abs(itl-tc.want.itl) > 1e-6 {
				t.Errorf("ITL = %vs, %v; want %vs", itl, ok, tc.want.itl)
			}
			if math.Abs(o.PromptTokens-tc.want.prompt) > 1e-9 || math.Abs(o.GenerationTokens-tc.want.generation) > 1e-9 {
				t.Errorf("token rates = %v prompt, %v generation; want %v, %v", o.PromptTokens, o.GenerationTokens, tc.want.prompt, tc.want.generation)
			}
			if o.PromptTokensTotal != tc.want.promptTotal || o.ITLCountTotal != tc.want.itlCount {
				t.Errorf("counters = %v prompt tokens, %v gaps; want %v, %v", o.PromptTokensTotal, o.ITLCountTotal, tc.want.promptTotal, tc.want.itlCount)
			}
			// The fixed model holds no KV cache: its serving workers read 0.
			if !o.KVCacheKnown || o.KVCacheUsage != 0 {
				t.Errorf("KV cache = %v, %v; want 0 from the fixed model", o.KVCacheUsage, o.KVCacheKnown)
			}
		})
	}
}

// The batched model's first token comes when its prefill ends, as the
// fixed model's does: a request still in prefill has no TTFT yet, and one
// lost before its first token never gets one.
func TestVLLMFirstTokenAhead(t *testing.T) {
	tr := workload.Trace{
		Requests: []workload.Served{{Arrival: 0, Service: time.Minute}, {Arrival: 0, Service: time.Minute}},
		Tokens:   []workload.Tokens{{Prefill: 2 * time.Second, InputTokens: 10, OutputTokens: 100}, {Prefill: 20 * time.Second, InputTokens: 10, OutputTokens: 100}},
	}
	p := NewPool(tr, t0, 1, 0)
	if err := p.SetBatched(DefaultITL); err != nil {
		t.Fatal(err)
	}
	ws := p.AddReady(2)
	p.Advance(t0.Add(time.Second))
	if got := p.Observe().TTFT; got != (TTFTBuckets{}) {
		t.Fatalf("TTFT within the prefill = %v, want none", got)
	}
	p.Advance(t0.Add(5 * time.Second))
	p.Remove(ws[1]) // request 1 is lost 15 s before its first token
	p.Advance(t0.Add(30 * time.Second))
	if got, want := p.Observe().TTFT, ttftBuckets(2.5); got != want {
		t.Errorf("TTFT = %v, want request 0's 2s alone", got)
	}
}

// Under the engine model the KV cache's use is each serving engine's
// blocks in use over its cache, averaged over the serving workers: a
// worker still starting or draining is left out, one that has had no
// request reads 0, and with no serving worker there is no value.
func TestVLLMKVCacheUsage(t *testing.T) {
	p := enginePool(t, tokenTrace([3]float64{0, 3000, 400}), 1, RouterLeastOutstanding, enginemodel.Config{})
	if _, ok := p.Observe().KVCacheUsage, p.Observe().KVCacheKnown; ok {
		t.Fatal("KV cache known with no worker")
	}
	ws := p.AddReady(2) // the request goes to the first
	p.Add(1)            // starting for a minute
	p.Advance(t0.Add(500 * time.Millisecond))
	p.Drain(ws[1])
	p.AddReady(1)
	o := p.Observe()
	// The request's sequence holds its 3000-token prompt plus the tokens
	// decoded so far, in blocks of 16, of the 465567 tokens the H100
	// profile's cache holds: from 188 blocks to 213, over two serving
	// workers (the first and the last added).
	capacity := float64(465567 / 16)
	lo, hi := 188/capacity/2, 214/capacity/2
	if !o.KVCacheKnown || o.KVCacheUsage < lo || o.KVCacheUsage > hi {
		t.Errorf("KV cache usage = %v, %v; want within [%v, %v]", o.KVCacheUsage, o.KVCacheKnown, lo, hi)
	}
}
