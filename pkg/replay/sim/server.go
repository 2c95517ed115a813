package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
)

// LoadIndexServer serves the modelled backend's load index as the
// backends our users run do, {"data":{"load_balance":0.83}}, so that a real
// controller can read the replay's load through its HTTP source. The pool
// is advanced by whoever drives the replay; Update or Publish makes what
// it observes current, and the handler only reads the last published value.
//
// Beside the load index the document carries what the SLO policy's roles
// read (RoleValue): data.arrivals and data.completions (requests/s over
// the last RateWindow), data.running, data.waiting and data.wait_p95 (the
// p95 wait in seconds of the requests that got a slot within WaitWindow,
// absent while none did). At /metrics it serves the same pool as a
// Prometheus target, in the text exposition format, so that a real
// Prometheus computes the rates from counters as it would from a real
// backend's (metric names below).
type LoadIndexServer struct {
	kind LoadKind

	// CounterBase is added to the request counters of /metrics: a
	// backend that served requests before the trace starts. Prometheus's
	// rate() extrapolates less over a window that starts at a counter of 0
	// than over one that does not, which the replay's scrape model
	// (Pool.SetScrape) does not do.
	CounterBase int

	mu     sync.RWMutex
	obs    Observation
	waitP  float64
	waitOK bool
}

// The metrics /metrics exposes.
const (
	MetricArrived   = "replay_requests_arrived_total"
	MetricCompleted = "replay_requests_completed_total"
	MetricRunning   = "replay_requests_running"
	MetricWaiting   = "replay_requests_waiting"
)

// serverWaitPercentile is the percentile of data.wait_p95.
const serverWaitPercentile = 95

// NewLoadIndexServer serves the load index of kind.
func NewLoadIndexServer(kind LoadKind) *LoadIndexServer {
	return &LoadIndexServer{kind: kind}
}

// Update publishes the pool's state as it is now.
func (s *LoadIndexServer) Update(p *Pool) {
	o := p.Observe()
	o.Started = p.recentWaits()
	s.Publish(o)
}

// Publish makes o what the server serves. o.Started is read here and not
// kept, so the pool may go on once Publish returns.
func (s *LoadIndexServer) Publish(o Observation) {
	w, ok := o.WaitPercentile(serverWaitPercentile)
	o.Started = nil
	s.mu.Lock()
	s.obs, s.waitP, s.waitOK = o, w, ok
	s.mu.Unlock()
}

// Value is the load index last published.
func (s *LoadIndexServer) Value() float64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.obs.Concurrency == 0 {
		return 0
	}
	return s.obs.LoadIndex(s.kind)
}

// loadIndexDoc is the document a backend serves; the queue figures are
// extra fields a source may read with another valueLocation.
type loadIndexDoc struct {
	Data struct {
		LoadBalance float64  `json:"load_balance"`
		InFlight    int      `json:"in_flight"`
		Waiting     int      `json:"waiting"`
		Serving     int      `json:"serving_workers"`
		Running     int      `json:"running"`
		Arrivals    float64  `json:"arrivals"`
		Completions float64  `json:"completions"`
		WaitP95     *float64 `json:"wait_p95,omitempty"`
	} `json:"data"`
}

// ServeHTTP answers GET (and POST, which sources may use) with the
// document, and GET /metrics with the exposition.
func (s *LoadIndexServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == "/metrics" {
		s.serveMetrics(w)
		return
	}
	var doc loadIndexDoc
	s.mu.RLock()
	o := s.obs
	doc.Data.InFlight, doc.Data.Waiting, doc.Data.Serving = o.InFlight, o.Waiting, o.Serving
	doc.Data.Running, doc.Data.Arrivals, doc.Data.Completions = o.Running, o.Arrivals, o.Completions
	if s.waitOK {
		doc.Data.WaitP95 = &s.waitP
	}
	s.mu.RUnlock()
	doc.Data.LoadBalance = s.Value()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(doc)
}

func (s *LoadIndexServer) serveMetrics(w http.ResponseWriter) {
	s.mu.RLock()
	o := s.obs
	s.mu.RUnlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	for _, m := range []struct {
		name, kind, help string
		value            int
	}{
		{MetricArrived, "counter", "Requests that arrived.", s.CounterBase + o.Arrived},
		{MetricCompleted, "counter", "Requests that finished.", s.CounterBase + o.Completed},
		{MetricRunning, "gauge", "Requests holding a slot, on every worker that still serves.", o.Running},
		{MetricWaiting, "gauge", "Requests waiting for a slot.", o.Waiting},
	} {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %d\n", m.name, m.help, m.name, m.kind, m.name, m.value)
	}
}
