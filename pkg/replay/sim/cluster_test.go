package sim

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// HistogramQuantile gives what Prometheus's histogram_quantile gives on
// its own test histogram (promql/testdata/histograms.test: buckets
// le=0.1, 0.2, 1, +Inf holding 50, 70, 110, 120 observations): 0, 0.048,
// 0.15, 0.72 and 1 at q = 0, 0.2, 0.5, 0.8 and 1.
func TestHistogramQuantileAsPrometheus(t *testing.T) {
	bounds := []float64{0.1, 0.2, 1}
	var values []float64
	for range 50 {
		values = append(values, 0.05)
	}
	for range 20 {
		values = append(values, 0.2) // le is inclusive: the 0.2 bucket
	}
	for range 40 {
		values = append(values, 0.5)
	}
	for range 10 {
		values = append(values, 5) // +Inf
	}
	for _, tc := range []struct{ q, want float64 }{
		{0, 0}, {0.2, 0.048}, {0.5, 0.15}, {0.8, 0.72}, {1, 1}, {0.95, 1},
	} {
		got, ok := HistogramQuantile(tc.q, bounds, values)
		if !ok || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("histogram_quantile(%v) = %v (ok %v), want %v", tc.q, got, ok, tc.want)
		}
	}
	if _, ok := HistogramQuantile(0.5, bounds, nil); ok {
		t.Error("no observation gives a value; histogram_quantile gives NaN")
	}
}

// The wait percentile a policy reads is the queue-time histogram's, in
// vLLM's buckets: every wait 0 reads as 95 % of the first bucket (0.3 s),
// as a cluster's histogram_quantile reads it.
func TestWaitPercentileFromVLLMBuckets(t *testing.T) {
	for _, tc := range []struct {
		name  string
		waits []time.Duration
		want  time.Duration
	}{
		{"no wait", []time.Duration{0, 0, 0, 0}, 285 * time.Millisecond},
		{"one of two at 20 s", []time.Duration{0, 20 * time.Second}, 19500 * time.Millisecond},
		{"beyond the last bucket", []time.Duration{3 * time.Hour}, 7680 * time.Second},
		{"a minute each", []time.Duration{time.Minute, time.Minute}, 59500 * time.Millisecond},
	} {
		got, ok := Observation{Started: tc.waits}.WaitPercentile(95)
		if !ok || math.Abs(got-tc.want.Seconds()) > 1e-3 {
			t.Errorf("%s: p95 = %v (ok %v), want %v", tc.name, got, ok, tc.want)
		}
	}
}

// Within the trace's first minute a rate covers the time since its start,
// fresh and through a scrape: 5 arrivals in the first 10 s are 0.5/s,
// not 5/60.
func TestRatesAtTheTraceStart(t *testing.T) {
	var reqs []workload.Served
	for i := range 5 {
		reqs = append(reqs, workload.Served{Arrival: time.Duration(2*i+1) * time.Second, Service: time.Hour})
	}
	p := NewPool(workload.Trace{Requests: reqs}, t0, 8, 0)
	p.AddReady(1)
	p.Advance(t0.Add(10 * time.Second))
	if got := p.Observe().Arrivals; math.Abs(got-0.5) > 1e-9 {
		t.Errorf("fresh arrivals at 10 s = %v/s, want 0.5", got)
	}
	// The first scrape at 7.5 s has seen 4 arrivals since the start.
	p = NewPool(workload.Trace{Requests: reqs}, t0, 8, 0)
	p.SetScrape(15 * time.Second)
	p.AddReady(1)
	p.Advance(t0.Add(10 * time.Second))
	if got := p.Metrics().Arrivals; math.Abs(got-4/7.5) > 1e-9 {
		t.Errorf("scraped arrivals at 10 s = %v/s, want 4/7.5", got)
	}
}

// --startup reads a fixed duration or a log-normal with its floor.
func TestParseStartup(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want StartupModel
		err  bool
	}{
		{in: "2m", want: StartupModel{Median: 2 * time.Minute}},
		{in: "lognormal:2m,0.5", want: StartupModel{Median: 2 * time.Minute, Sigma: 0.5, Floor: time.Minute}},
		{in: "lognormal:2m,0.5,30s", want: StartupModel{Median: 2 * time.Minute, Sigma: 0.5, Floor: 30 * time.Second}},
		{in: "lognormal:2m", err: true},
		{in: "lognormal:2m,-1", err: true},
		{in: "lognormal:2m,0.5,3m", err: true},
		{in: "-1m", err: true},
	} {
		got, err := ParseStartup(tc.in)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("ParseStartup(%q) = %+v, %v; want %+v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// Each worker draws its own start-up, seeded: the same seed gives the
// same starts, none below the floor, their median near the model's.
func TestStartupDrawnPerWorker(t *testing.T) {
	m := StartupModel{Median: 2 * time.Minute, Sigma: 0.5, Floor: time.Minute}
	starts := func(seed uint64) []time.Duration {
		p := NewPool(workload.Trace{}, t0, 1, 0)
		p.SetStartup(m, seed)
		var out []time.Duration
		for _, w := range p.Add(401) {
			out = append(out, w.ReadyAt.Sub(w.Created))
		}
		return out
	}
	a, b, c := starts(1), starts(1), starts(2)
	if !slices.Equal(a, b) {
		t.Error("the same seed drew different start-ups")
	}
	if slices.Equal(a, c) {
		t.Error("two seeds drew the same start-ups")
	}
	if slices.Min(a) < m.Floor {
		t.Errorf("a start-up of %v, below the floor %v", slices.Min(a), m.Floor)
	}
	distinct := map[time.Duration]bool{}
	for _, d := range a {
		distinct[d] = true
	}
	sorted := slices.Sorted(slices.Values(a))
	if median := sorted[len(sorted)/2]; len(distinct) < 300 || median < 110*time.Second || median > 130*time.Second {
		t.Errorf("%d distinct start-ups, median %v: want them drawn around 2m", len(distinct), median)
	}
	// A fixed start-up is every worker's.
	p := NewPool(workload.Trace{}, t0, 1, 90*time.Second)
	for _, w := range p.Add(3) {
		if w.ReadyAt.Sub(w.Created) != 90*time.Second {
			t.Errorf("fixed start-up %v, want 90s", w.ReadyAt.Sub(w.Created))
		}
	}
}
