package sim

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

var t0 = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

// Requests wait in one FIFO queue for a slot; a worker serves concurrency
// requests at once and becomes Ready startup after it is created.
func TestPoolQueueAndStartup(t *testing.T) {
	tr := workload.Trace{Requests: []workload.Served{
		{Arrival: 0, Service: 10 * time.Second},
		{Arrival: time.Second, Service: 10 * time.Second},
		{Arrival: 2 * time.Second, Service: 10 * time.Second},
	}}
	p := NewPool(tr, t0, 2, time.Minute)
	p.AddReady(1)
	p.Advance(t0.Add(5 * time.Second))
	o := p.Observe()
	if o.InFlight != 2 || o.Waiting != 1 || o.Serving != 1 {
		t.Fatalf("observation = %+v, want 2 in flight, 1 waiting", o)
	}
	if got := o.LoadIndex(LoadDemand); got != 1.5 {
		t.Errorf("demand = %v, want 3/2", got)
	}
	if got := o.LoadIndex(LoadUtilization); got != 1 {
		t.Errorf("utilization = %v, want 2/2", got)
	}
	p.Add(1) // Ready at 1m05s; the first slot frees at 10s
	p.Advance(t0.Add(2 * time.Minute))
	if !p.Finished() {
		t.Fatal("not finished")
	}
	if p.waits[2] != 8*time.Second {
		t.Errorf("third request waited %v, want 8s for the first slot", p.waits[2])
	}
	if got := p.GPUHours(t0.Add(2 * time.Minute)); math.Abs(got-(2*time.Minute+115*time.Second).Hours()) > 1e-9 {
		t.Errorf("GPU-hours = %v", got)
	}
}

// Without a serving worker the load index divides by one worker's slots,
// so it stays finite and still says how many workers the queue needs.
func TestLoadIndexWithoutServingWorkers(t *testing.T) {
	o := Observation{Waiting: 12, Concurrency: 4, Starting: 2}
	if got := o.LoadIndex(LoadDemand); got != 3 {
		t.Errorf("demand = %v, want 12/4", got)
	}
}

// A draining worker takes no new request; Advance stops when it finishes
// its last one.
func TestPoolDrainStopsAtIdle(t *testing.T) {
	tr := workload.Trace{Requests: []workload.Served{{Arrival: 0, Service: 10 * time.Second}, {Arrival: time.Second, Service: 10 * time.Second}}}
	p := NewPool(tr, t0, 1, 0)
	ws := p.AddReady(2)
	p.Advance(t0.Add(500 * time.Millisecond))
	p.Drain(ws[0])
	at, idle := p.Advance(t0.Add(time.Minute))
	if !idle || !at.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("Advance = %v, %v; want a stop at 10s", at, idle)
	}
	if ws[0].InFlight() != 0 || ws[1].InFlight() != 1 {
		t.Errorf("in flight = %d, %d; want the second request on the serving worker", ws[0].InFlight(), ws[1].InFlight())
	}
}

// Requests that never got a slot fail when the replay gives up.
func TestPoolAbandon(t *testing.T) {
	p := NewPool(workload.Trace{Requests: []workload.Served{{Arrival: 0, Service: time.Second}, {Arrival: time.Hour, Service: time.Second}}}, t0, 1, 0)
	p.Advance(t0.Add(time.Minute))
	p.Abandon()
	if !p.Finished() {
		t.Fatal("not finished")
	}
	if r := Measure(p.Outcomes(), SLOTargets{Wait: time.Second}); r.FailedRequests != 2 || r.SLOAttainment != 0 {
		t.Errorf("result = %+v", r)
	}
}

func TestLoadIndexServer(t *testing.T) {
	p := NewPool(workload.Trace{Requests: []workload.Served{{Arrival: 0, Service: time.Hour}, {Arrival: 0, Service: time.Hour}, {Arrival: 0, Service: time.Hour}}}, t0, 2, 0)
	p.AddReady(1)
	p.Advance(t0)
	s := NewLoadIndexServer(LoadDemand)
	s.Update(p)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	var doc struct {
		Data struct {
			LoadBalance float64 `json:"load_balance"`
			Waiting     int     `json:"waiting"`
		} `json:"data"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Data.LoadBalance != 1.5 || doc.Data.Waiting != 1 {
		t.Errorf("document = %s", rec.Body.String())
	}
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodDelete, "/", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("DELETE: %d", rec.Code)
	}
}

// Percentiles are the nearest ranks of the sorted values, on values with
// many equal ones (a pool that keeps up waits 0), sorted, reversed and
// none.
func TestPercentiles(t *testing.T) {
	if got := percentiles([]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.5, 0.95, 0.99); !slices.Equal(got, []float64{5, 10, 10}) {
		t.Errorf("percentiles of 1..10 = %v, want 5, 10, 10", got)
	}
	if got := percentiles(nil, 0.5, 0.95); !slices.Equal(got, []float64{0, 0}) {
		t.Errorf("percentiles of none = %v, want 0s", got)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		n := 1 + rng.IntN(2000)
		v := make([]float64, n)
		for i := range v {
			switch trial % 3 {
			case 0:
				v[i] = rng.Float64()
			case 1:
				v[i] = float64(rng.IntN(4)) // mostly equal
			default:
				v[i] = float64(n - i) // reversed
			}
		}
		sorted := slices.Sorted(slices.Values(v))
		qs := []float64{0, 0.5, 0.95, 0.99, 1}
		got := percentiles(v, qs...)
		for i, q := range qs {
			k := min(max(int(math.Ceil(q*float64(n)))-1, 0), n-1)
			if got[i] != sorted[k] {
				t.Fatalf("trial %d (%d values): p%v = %v, want %v", trial, n, 100*q, got[i], sorted[k])
			}
		}
	}
}

// Pool.Delete: a deleted pod leaves the router at once, finishes the
// requests that end within the grace, is killed with the rest at the
// grace's end, exits as soon as it is idle, and holds its GPU until it
// exits.
func TestPoolDeleteWithGrace(t *testing.T) {
	for _, tc := range []struct {
		name      string
		grace     time.Duration
		wantLost  int
		wantExit  time.Duration // after t0
		wantQueue int           // requests left waiting for a slot
	}{
		{"no grace kills at once", 0, 2, 5 * time.Second, 1},
		{"a short grace finishes what ends within it", 20 * time.Second, 1, 25 * time.Second, 1},
		{"a long grace finishes everything and exits when idle", 2 * time.Minute, 0, 40 * time.Second, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := workload.Trace{Requests: []workload.Served{
				{Arrival: 0, Service: 10 * time.Second},
				{Arrival: 0, Service: 40 * time.Second},
				{Arrival: 6 * time.Second, Service: 10 * time.Second},
			}}
			p := NewPool(tr, t0, 2, time.Hour)
			p.SetGrace(tc.grace)
			w := p.AddReady(1)[0]
			p.Advance(t0.Add(5 * time.Second))
			p.Delete(w)
			if len(p.Workers()) != 0 {
				t.Fatalf("the deleted worker is still counted: %d", len(p.Workers()))
			}
			p.Advance(t0.Add(10 * time.Minute))
			lost := 0
			for i := range 2 {
				if p.failed[i] {
					lost++
				}
			}
			if lost != tc.wantLost {
				t.Errorf("lost %d, want %d", lost, tc.wantLost)
			}
			if p.started[2] || p.Observe().Waiting != tc.wantQueue {
				t.Errorf("the request arriving after the delete was served by the terminating worker")
			}
			if got := w.Removed.Sub(t0); got != tc.wantExit {
				t.Errorf("exited after %v, want %v", got, tc.wantExit)
			}
			if got, want := p.GPUHours(t0.Add(10*time.Minute)), tc.wantExit.Hours(); math.Abs(got-want) > 1e-9 {
				t.Errorf("GPU-hours %v, want %v", got, want)
			}
			if len(p.Terminating()) != 0 {
				t.Errorf("%d still terminating", len(p.Terminating()))
			}
		})
	}
}

// An idle worker deleted exits at once, whatever the grace.
func TestPoolDeleteIdle(t *testing.T) {
	p := NewPool(workload.Trace{}, t0, 2, 0)
	p.SetGrace(time.Minute)
	w := p.AddReady(1)[0]
	p.Delete(w)
	if !w.Removed.Equal(t0) || w.Terminating {
		t.Errorf("removed %v, terminating %v", w.Removed, w.Terminating)
	}
}

// Pool.Metrics: without a scrape the workers as they are; with one, as
// they were at the last scrape, half an interval after the start and
// every interval on.
func TestPoolScrape(t *testing.T) {
	tr := workload.Trace{Requests: []workload.Served{
		{Arrival: 0, Service: time.Hour},
		{Arrival: 10 * time.Second, Service: time.Hour},
		{Arrival: 20 * time.Second, Service: time.Hour},
		{Arrival: 30 * time.Second, Service: time.Hour},
	}}
	for _, tc := range []struct {
		scrape time.Duration
		at     time.Duration
		want   int
	}{
		{0, 25 * time.Second, 3},                // fresh
		{15 * time.Second, 5 * time.Second, 0},  // nothing scraped since the start
		{15 * time.Second, 15 * time.Second, 1}, // scraped at 7.5 s
		{15 * time.Second, 25 * time.Second, 3}, // scraped at 22.5 s
		{15 * time.Second, 30 * time.Second, 3}, // still that one; fresh says 4
		{15 * time.Second, 40 * time.Second, 4}, // scraped at 37.5 s
	} {
		p := NewPool(tr, t0, 8, 0)
		p.SetScrape(tc.scrape)
		p.AddReady(1)
		p.Advance(t0.Add(tc.at))
		if got := p.Metrics().InFlight; got != tc.want {
			t.Errorf("scrape %v at %v: %d in flight, want %d (fresh %d)", tc.scrape, tc.at, got, tc.want, p.Observe().InFlight)
		}
	}
}

// A pool that follows a real Prometheus's scrapes takes them when Scrape
// is called, not every interval, and reads its rates back from the
// read's time, as a query does: at 61 s the sample of 0.6 s is out of
// the minute's window, where a window back from the last scrape (60.5 s)
// would hold it.
func TestPoolFollowScrapes(t *testing.T) {
	tr := workload.Trace{Requests: []workload.Served{
		{Arrival: 500 * time.Millisecond, Service: time.Hour},
		{Arrival: 20 * time.Second, Service: time.Hour},
		{Arrival: 40 * time.Second, Service: time.Hour},
		{Arrival: 45 * time.Second, Service: time.Hour},
		{Arrival: 60800 * time.Millisecond, Service: time.Hour},
	}}
	p := NewPool(tr, t0, 8, 0)
	p.SetScrape(15 * time.Second)
	p.FollowScrapes()
	p.AddReady(1)
	for _, at := range []time.Duration{600 * time.Millisecond, 30400 * time.Millisecond, 60500 * time.Millisecond} {
		p.Advance(t0.Add(at))
		p.Scrape()
	}
	p.Advance(t0.Add(61 * time.Second))
	o := p.Metrics()
	if o.InFlight != 4 {
		t.Errorf("%d in flight, want 4, as scraped at 60.5s (fresh %d)", o.InFlight, p.Observe().InFlight)
	}
	// 2 arrivals between the scrapes of 30.4 s and 60.5 s.
	if want := 2 / 30.1; math.Abs(o.Arrivals-want) > 1e-9 {
		t.Errorf("arrivals %v/s, want %v/s", o.Arrivals, want)
	}
}
