package sim

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// The document carries each SLO role's value as RoleValue reads it from
// the pool, and /metrics the counters and gauges behind them.
func TestLoadIndexServerRoles(t *testing.T) {
	s := func(n int) time.Duration { return time.Duration(n) * time.Second }
	// One slot: the first request runs 5-35 s, the second waits 20 s and
	// runs 35-65 s, the third waits from 25 s.
	tr := workload.Trace{Requests: []workload.Served{{Arrival: s(5), Service: s(30)}, {Arrival: s(15), Service: s(30)}, {Arrival: s(25), Service: s(30)}}}
	p := NewPool(tr, t0, 1, 0)
	p.AddReady(1)
	srv := NewLoadIndexServer(LoadDemand)
	srv.CounterBase = 100
	get := func(path string) string {
		t.Helper()
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: %d", path, rec.Code)
		}
		return rec.Body.String()
	}
	type doc struct {
		Data struct {
			Arrivals    float64  `json:"arrivals"`
			Completions float64  `json:"completions"`
			Running     int      `json:"running"`
			Waiting     int      `json:"waiting"`
			WaitP95     *float64 `json:"wait_p95"`
		} `json:"data"`
	}
	read := func() doc {
		t.Helper()
		var d doc
		if err := json.Unmarshal([]byte(get("/")), &d); err != nil {
			t.Fatal(err)
		}
		return d
	}

	// Before any request got a slot there is no wait percentile to serve.
	p.Advance(t0.Add(s(1)))
	srv.Update(p)
	if d := read(); d.Data.WaitP95 != nil || d.Data.Arrivals != 0 || d.Data.Running != 0 {
		t.Errorf("before the first request: %+v", d.Data)
	}

	p.Advance(t0.Add(s(60)))
	srv.Update(p)
	d := read()
	if d.Data.Arrivals != 3.0/60 || d.Data.Completions != 1.0/60 || d.Data.Running != 1 || d.Data.Waiting != 1 ||
		d.Data.WaitP95 == nil || *d.Data.WaitP95 != 19.5 {
		t.Errorf("document %+v, want arrivals 3/60, completions 1/60, 1 running, 1 waiting, p95 wait 19.5 s (0 and 20 s in vLLM's buckets)", d.Data)
	}
	want := []string{
		"# TYPE " + MetricArrived + " counter", MetricArrived + " 103",
		"# TYPE " + MetricCompleted + " counter", MetricCompleted + " 101",
		"# TYPE " + MetricRunning + " gauge", MetricRunning + " 1",
		"# TYPE " + MetricWaiting + " gauge", MetricWaiting + " 1",
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(get("/metrics"), "\n") {
		lines[l] = true
	}
	for _, l := range want {
		if !lines[l] {
			t.Errorf("/metrics lacks %q", l)
		}
	}

	// Publish keeps nothing of the pool: what it served stays as it was
	// while the pool goes on.
	o := p.Metrics()
	srv.Publish(o)
	p.Advance(t0.Add(s(200)))
	if d := read(); d.Data.Running != 1 || *d.Data.WaitP95 != 19.5 {
		t.Errorf("after the pool went on: %+v", d.Data)
	}
}
