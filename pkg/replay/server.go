package replay

import (
	"encoding/json"
	"net/http"
	"sync"
)

// LoadIndexServer serves the modelled backend's load index as the
// backends our users run do, {"data":{"load_balance":0.83}}, so that a real
// controller can read the replay's load through its HTTP source. The pool
// is advanced by whoever drives the replay; Update publishes what it
// observes, and the handler only reads the last published value.
type LoadIndexServer struct {
	kind LoadKind

	mu  sync.RWMutex
	obs Observation
}

// NewLoadIndexServer serves the load index of kind.
func NewLoadIndexServer(kind LoadKind) *LoadIndexServer {
	return &LoadIndexServer{kind: kind}
}

// Update publishes the pool's state as it is now.
func (s *LoadIndexServer) Update(p *Pool) {
	o := p.Observe()
	s.mu.Lock()
	s.obs = o
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
		LoadBalance float64 `json:"load_balance"`
		InFlight    int     `json:"in_flight"`
		Waiting     int     `json:"waiting"`
		Serving     int     `json:"serving_workers"`
	} `json:"data"`
}

// ServeHTTP answers GET (and POST, which sources may use) with the document.
func (s *LoadIndexServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	var doc loadIndexDoc
	s.mu.RLock()
	doc.Data.InFlight, doc.Data.Waiting, doc.Data.Serving = s.obs.InFlight, s.obs.Waiting, s.obs.Serving
	s.mu.RUnlock()
	doc.Data.LoadBalance = s.Value()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(doc)
}
