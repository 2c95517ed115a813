package fakevllm

import (
	"bufio"
	"math"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC)

func constant(rate float64) func(time.Duration) float64 {
	return func(time.Duration) float64 { return rate }
}

func workers(n int) func() int { return func() int { return n } }

// run scrapes the pool every second for d and returns the mean running
// and waiting requests seen.
func run(p *Pool, c *testingclock.FakeClock, d time.Duration) (running, waiting float64) {
	n := int(d / time.Second)
	for range n {
		c.Step(time.Second)
		s := p.Snapshot()
		running += float64(s.Running)
		waiting += float64(s.Waiting)
	}
	return running / float64(n), waiting / float64(n)
}

// TestSteadyLoad: 2 requests/s of 4 s each keep 8 of 16 slots busy on
// average (Little's law), finish at the rate they arrive, and rarely wait
// (Erlang C at 8 erlangs on 16 servers: 0.5 %).
func TestSteadyLoad(t *testing.T) {
	c := testingclock.NewFakeClock(t0)
	p := New(Config{ModelName: "llama", Rate: constant(2), ServiceTime: 4 * time.Second, SlotsPerWorker: 8, Workers: workers(2), Seed: 1, Clock: c})
	const hours = 2
	running, waiting := run(p, c, hours*time.Hour)
	s := p.Snapshot()
	if math.Abs(running-8) > 0.5 {
		t.Errorf("mean running = %.2f, want 8 ± 0.5", running)
	}
	if waiting > 0.1 {
		t.Errorf("mean waiting = %.3f, want below 0.1", waiting)
	}
	want := 2.0 * hours * 3600
	if got := float64(s.Succeeded); math.Abs(got-want) > 0.03*want {
		t.Errorf("succeeded = %v, want %v ± 3%%", got, want)
	}
	if mean := s.QueueTimeSum / float64(s.Succeeded); mean > 0.05 {
		t.Errorf("mean queue time = %.3fs, want below 0.05s", mean)
	}
}

// TestOverload: 5 requests/s on 8 slots of 4 s (2 requests/s at most)
// keep every slot busy, finish 2 a second, and pile up the other 3 a
// second in the queue, where they wait longer and longer.
func TestOverload(t *testing.T) {
	c := testingclock.NewFakeClock(t0)
	p := New(Config{ModelName: "llama", Rate: constant(5), ServiceTime: 4 * time.Second, SlotsPerWorker: 8, Workers: workers(1), Seed: 2, Clock: c})
	run(p, c, 10*time.Minute)
	s := p.Snapshot()
	if s.Running != 8 {
		t.Errorf("running = %d, want all 8 slots", s.Running)
	}
	if want := 3.0 * 600; math.Abs(float64(s.Waiting)-want) > 0.1*want {
		t.Errorf("waiting = %d, want %v ± 10%%", s.Waiting, want)
	}
	if want := 2.0 * 600; math.Abs(float64(s.Succeeded)-want) > 0.1*want {
		t.Errorf("succeeded = %d, want %v ± 10%%", s.Succeeded, want)
	}
	if mean := s.QueueTimeSum / float64(s.Succeeded); mean < 60 {
		t.Errorf("mean queue time = %.1fs, want minutes", mean)
	}
}

// TestWorkersLeaveAndJoin: a worker taken away finishes its requests but
// starts none, so the running requests fall to the slots left; one added
// takes the waiting requests at once.
func TestWorkersLeaveAndJoin(t *testing.T) {
	c := testingclock.NewFakeClock(t0)
	var n atomic.Int32
	n.Store(2)
	p := New(Config{ModelName: "llama", Rate: constant(10), ServiceTime: 4 * time.Second, SlotsPerWorker: 8,
		Workers: func() int { return int(n.Load()) }, Seed: 3, Clock: c})
	run(p, c, time.Minute)
	if s := p.Snapshot(); s.Running != 16 || s.Waiting == 0 {
		t.Fatalf("overloaded 2 workers: %+v, want 16 running and some waiting", s)
	}
	n.Store(1)
	last := 16
	for range 120 {
		c.Step(time.Second)
		s := p.Snapshot()
		if s.Running > last {
			t.Fatalf("running rose from %d to %d after a worker left", last, s.Running)
		}
		last = s.Running
	}
	if last != 8 {
		t.Errorf("running = %d two minutes after a worker left, want the 8 slots left", last)
	}
	before := p.Snapshot()
	n.Store(3)
	c.Step(time.Millisecond)
	if s := p.Snapshot(); s.Running != 24 || s.Waiting >= before.Waiting {
		t.Errorf("a third worker: %+v from %+v, want 24 running and fewer waiting", s, before)
	}
}

// TestRateRisesFromZero: no request arrives while the rate is 0, and
// requests come once it rises.
func TestRateRisesFromZero(t *testing.T) {
	c := testingclock.NewFakeClock(t0)
	rate := func(elapsed time.Duration) float64 {
		if elapsed < time.Minute {
			return 0
		}
		return 4
	}
	p := New(Config{ModelName: "llama", Rate: rate, ServiceTime: time.Second, SlotsPerWorker: 8, Workers: workers(1), Seed: 4, Clock: c})
	run(p, c, time.Minute)
	if s := p.Snapshot(); s != (Snapshot{}) {
		t.Fatalf("at rate 0: %+v, want no request", s)
	}
	run(p, c, time.Minute)
	if s := p.Snapshot(); math.Abs(float64(s.Succeeded)-240) > 48 {
		t.Errorf("a minute at 4/s: %d finished, want 240 ± 48", s.Succeeded)
	}
}

// TestRepeatable: the same seed and scrapes give the same pool.
func TestRepeatable(t *testing.T) {
	snap := func(seed uint64) Snapshot {
		c := testingclock.NewFakeClock(t0)
		p := New(Config{ModelName: "llama", Rate: constant(3), ServiceTime: 3 * time.Second, SlotsPerWorker: 4, Workers: workers(2), Seed: seed, Clock: c})
		run(p, c, 5*time.Minute)
		return p.Snapshot()
	}
	if a, b := snap(7), snap(7); a != b {
		t.Errorf("seed 7 gave %+v then %+v", a, b)
	}
	if a, b := snap(7), snap(8); a == b {
		t.Errorf("seeds 7 and 8 both gave %+v", a)
	}
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\} (\S+)$`)

// TestMetricsText: a scrape answers vLLM's families, each with its TYPE,
// the model_name label on every sample, cumulative histograms whose +Inf
// bucket and count are their observations, and values that agree with
// the model's state.
func TestMetricsText(t *testing.T) {
	c := testingclock.NewFakeClock(t0)
	p := New(Config{ModelName: "meta-llama/Llama-3.1-8B-Instruct", Rate: constant(5), ServiceTime: 4 * time.Second, SlotsPerWorker: 8, Workers: workers(1), Seed: 5, Clock: c}.WithH100Tokens())
	run(p, c, 2*time.Minute)
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	s := p.Snapshot()
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type = %q, want the text format", ct)
	}

	types := map[string]string{}
	values := map[string]float64{}
	buckets := map[string][]float64{}
	scanner := bufio.NewScanner(rec.Body)
	for scanner.Scan() {
		line := scanner.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(rest, " ")
			types[name] = typ
			continue
		}
		if strings.HasPrefix(line, "# HELP ") {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("line %q is not a sample of the text format", line)
		}
		if !strings.Contains(m[2], `model_name="meta-llama/Llama-3.1-8B-Instruct"`) {
			t.Errorf("sample %q lacks the model_name label", line)
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		if family, ok := strings.CutSuffix(m[1], "_bucket"); ok {
			buckets[family] = append(buckets[family], v)
			continue
		}
		values[m[1]] = v
	}
	wantTypes := map[string]string{MetricRunning: "gauge", MetricWaiting: "gauge", MetricSuccess: "counter", MetricQueueTime: "histogram",
		MetricTTFT: "histogram", MetricITL: "histogram", MetricPrompt: "counter", MetricGenerated: "counter", MetricOutputs: "histogram", MetricPrompts: "histogram", MetricKVCache: "gauge"}
	for name, typ := range wantTypes {
		if types[name] != typ {
			t.Errorf("TYPE of %s = %q, want %s", name, types[name], typ)
		}
	}
	if len(types) != len(wantTypes) {
		t.Errorf("families %v, want %v", types, wantTypes)
	}
	if values[MetricRunning] != float64(s.Running) || values[MetricWaiting] != float64(s.Waiting) || values[MetricSuccess] != float64(s.Succeeded) {
		t.Errorf("running %v, waiting %v, success %v; want the model's %+v", values[MetricRunning], values[MetricWaiting], values[MetricSuccess], s)
	}
	if values[MetricPrompt] != float64(s.PromptTokens) || values[MetricGenerated] != float64(s.GenerationTokens) || values[MetricKVCache] != s.KVCacheUsage {
		t.Errorf("prompt %v, generation %v, KV cache %v; want the model's %+v", values[MetricPrompt], values[MetricGenerated], values[MetricKVCache], s)
	}
	for _, h := range []struct {
		name   string
		bounds []float64
		count  uint64
		sum    float64
	}{
		{MetricQueueTime, QueueTimeBuckets, s.Succeeded, s.QueueTimeSum},
		{MetricTTFT, TTFTBuckets, s.TTFTCount, s.TTFTSum},
		{MetricITL, ITLBuckets, s.ITLCount, s.ITLSum},
		{MetricOutputs, TokenBuckets, s.Succeeded, float64(s.GenerationTokens)},
		{MetricPrompts, TokenBuckets, s.Succeeded, float64(s.Succeeded) * 1000},
	} {
		b := buckets[h.name]
		if len(b) != len(h.bounds)+1 {
			t.Fatalf("%s: %d buckets, want %d and +Inf", h.name, len(b), len(h.bounds))
		}
		for i := 1; i < len(b); i++ {
			if b[i] < b[i-1] {
				t.Errorf("%s: bucket %d (%v) below bucket %d (%v): not cumulative", h.name, i, b[i], i-1, b[i-1])
			}
		}
		if inf := b[len(b)-1]; inf != float64(h.count) || values[h.name+"_count"] != inf || h.count == 0 {
			t.Errorf("%s: +Inf bucket %v, count %v; want the %d observed", h.name, inf, values[h.name+"_count"], h.count)
		}
		if values[h.name+"_sum"] != h.sum {
			t.Errorf("%s: sum %v, want %v", h.name, values[h.name+"_sum"], h.sum)
		}
	}
	if b := buckets[MetricQueueTime]; b[0] == b[len(b)-1] {
		t.Errorf("every request waited at most %vs in an overload: buckets %v", QueueTimeBuckets[0], b)
	}
}

// TestBucketBounds: the histograms have vLLM's bucket bounds, so that a
// histogram_quantile written for vLLM reads the fake alike.
func TestBucketBounds(t *testing.T) {
	for _, tc := range []struct {
		name      string
		got, want []float64
	}{
		{MetricTTFT, TTFTBuckets, []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}},
		{MetricITL, ITLBuckets, []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}},
		// build_1_2_5_buckets up to Llama-3.1's 131,072-token context.
		{MetricOutputs, TokenBuckets, []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}},
	} {
		if !slices.Equal(tc.got, tc.want) {
			t.Errorf("%s buckets %v, want vLLM's %v", tc.name, tc.got, tc.want)
		}
	}
}

// TestTokenMetrics: in steady state the token metrics say what the pool's
// workers do: 1,000 prompt and 160 output tokens a request, a TTFT of the
// wait plus 26 ms of prefill, 159 gaps a request at α + β·batch, and the
// KV cache that the running requests hold.
func TestTokenMetrics(t *testing.T) {
	c := testingclock.NewFakeClock(t0)
	p := New(Config{ModelName: "llama", Rate: constant(2), ServiceTime: 4 * time.Second, SlotsPerWorker: 16, Workers: workers(2), Seed: 6, Clock: c}.WithH100Tokens())
	running, _ := run(p, c, time.Hour)
	s := p.Snapshot()
	started := s.Succeeded + uint64(s.Running)
	if s.TTFTCount != started || s.PromptTokens != 1000*started {
		t.Errorf("%d TTFTs and %d prompt tokens for %d requests started, want one and 1,000 each", s.TTFTCount, s.PromptTokens, started)
	}
	if s.GenerationTokens != 160*s.Succeeded || s.ITLCount != 159*s.Succeeded {
		t.Errorf("%d output tokens and %d gaps for %d finished, want 160 and 159 each", s.GenerationTokens, s.ITLCount, s.Succeeded)
	}
	// Few wait at 8 erlangs on 32 slots: the TTFT is the prefill.
	prefill := 1000.0 / 38000
	if mean := s.TTFTSum / float64(s.TTFTCount); mean < prefill-1e-9 || mean > prefill+0.01 {
		t.Errorf("mean TTFT %.4fs, want the %.4fs prefill and at most 10ms of wait", mean, prefill)
	}
	// About 4 running a worker when a request starts: 7.2 ms.
	want := 0.007 + 0.0000512*(running/2+1)
	if mean := s.ITLSum / float64(s.ITLCount); math.Abs(mean-want) > 0.0001 {
		t.Errorf("mean ITL %.5fs, want %.5fs", mean, want)
	}
	if want := float64(s.Running) * 1080 / (2 * 465000); math.Abs(s.KVCacheUsage-want) > 1e-12 || s.KVCacheUsage == 0 {
		t.Errorf("KV cache usage %v, want %v", s.KVCacheUsage, want)
	}
}

// TestKVCacheUsageAtMostOne: a cache smaller than the running requests
// need shows full, not more.
func TestKVCacheUsageAtMostOne(t *testing.T) {
	c := testingclock.NewFakeClock(t0)
	cfg := Config{ModelName: "llama", Rate: constant(20), ServiceTime: 4 * time.Second, SlotsPerWorker: 64, Workers: workers(1), Seed: 7, Clock: c}.WithH100Tokens()
	cfg.KVTokensPerWorker = 10000
	p := New(cfg)
	run(p, c, time.Minute)
	if s := p.Snapshot(); s.KVCacheUsage != 1 {
		t.Errorf("KV cache usage %v with %d running on 10,000 tokens, want 1", s.KVCacheUsage, s.Running)
	}
}
