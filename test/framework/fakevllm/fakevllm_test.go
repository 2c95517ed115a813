package fakevllm

import (
	"bufio"
	"math"
	"net/http/httptest"
	"regexp"
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

// TestMetricsText: a scrape answers vLLM's four families, each with its
// TYPE, the model_name label on every sample, a cumulative histogram
// whose +Inf bucket and count are the finished requests, and values that
// agree with the model's state.
func TestMetricsText(t *testing.T) {
	c := testingclock.NewFakeClock(t0)
	p := New(Config{ModelName: "meta-llama/Llama-3.1-8B-Instruct", Rate: constant(5), ServiceTime: 4 * time.Second, SlotsPerWorker: 8, Workers: workers(1), Seed: 5, Clock: c})
	run(p, c, 2*time.Minute)
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	s := p.Snapshot()
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type = %q, want the text format", ct)
	}

	types := map[string]string{}
	values := map[string]float64{}
	var buckets []float64
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
		if m[1] == MetricQueueTime+"_bucket" {
			buckets = append(buckets, v)
			continue
		}
		values[m[1]] = v
	}
	wantTypes := map[string]string{MetricRunning: "gauge", MetricWaiting: "gauge", MetricSuccess: "counter", MetricQueueTime: "histogram"}
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
	if len(buckets) != len(QueueTimeBuckets)+1 {
		t.Fatalf("%d buckets, want %d and +Inf", len(buckets), len(QueueTimeBuckets))
	}
	for i := 1; i < len(buckets); i++ {
		if buckets[i] < buckets[i-1] {
			t.Errorf("bucket %d (%v) below bucket %d (%v): not cumulative", i, buckets[i], i-1, buckets[i-1])
		}
	}
	if inf := buckets[len(buckets)-1]; inf != float64(s.Succeeded) || values[MetricQueueTime+"_count"] != inf {
		t.Errorf("+Inf bucket %v, count %v; want the %d finished", inf, values[MetricQueueTime+"_count"], s.Succeeded)
	}
	if buckets[0] == buckets[len(buckets)-1] {
		t.Errorf("every request waited at most %vs in an overload: buckets %v", QueueTimeBuckets[0], buckets)
	}
	if values[MetricQueueTime+"_sum"] != s.QueueTimeSum {
		t.Errorf("sum %v, want %v", values[MetricQueueTime+"_sum"], s.QueueTimeSum)
	}
}
