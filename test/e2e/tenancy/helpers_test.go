package tenancy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Loads against the default thresholds (up 0.8, down 0.5).
const (
	loadHigh = 0.9
	loadMid  = 0.6
	loadLow  = 0.3
)

// loadServer answers {"data":{"load_balance":X}} on 127.0.0.1 with the value
// last set.
type loadServer struct {
	srv   *httptest.Server
	mu    sync.Mutex
	value float64
}

func newLoadServer(t *testing.T, value float64) *loadServer {
	s := &loadServer{value: value}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		v := s.value
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"data":{"load_balance":%g}}`, v)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// Set answers value from now on.
func (s *loadServer) Set(value float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.value = value
}
