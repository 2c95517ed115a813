package e2e

// The scripted load-index server that the pools read.

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// loadServer is a scripted load-index endpoint on 127.0.0.1. It answers
// {"data":{"load_balance":X}} with the value last set, or fails as told,
// and logs when it answered which value.
type loadServer struct {
	srv   *httptest.Server
	reads atomic.Int64
	// stop ends hanging requests when the server closes.
	stop      chan struct{}
	closeOnce sync.Once

	mu     sync.Mutex
	value  float64
	status int // an HTTP error status to answer with; 0 answers the value
	hang   bool
	// answers are the values answered, in order.
	answers []loadAnswer
}

type loadAnswer struct {
	at    time.Time
	value float64
}

func newLoadServer(t *testing.T, value float64) *loadServer {
	s := &loadServer{value: value, stop: make(chan struct{})}
	// httptest listens on 127.0.0.1 with a free port.
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *loadServer) serve(w http.ResponseWriter, r *http.Request) {
	s.reads.Add(1)
	s.mu.Lock()
	value, status, hang := s.value, s.status, s.hang
	if !hang && status == 0 {
		s.answers = append(s.answers, loadAnswer{at: time.Now(), value: value})
	}
	s.mu.Unlock()
	switch {
	case hang:
		// Answer nothing until the client gives up.
		select {
		case <-r.Context().Done():
		case <-s.stop:
		}
	case status != 0:
		http.Error(w, "load index unavailable", status)
	default:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"data":{"load_balance":%g}}`, value)
	}
}

// URL is the endpoint's address, for spec.autoscaling.metrics[].http.url.
func (s *loadServer) URL() string { return s.srv.URL + "/api/load" }

// Reads counts the requests served so far.
func (s *loadServer) Reads() int64 { return s.reads.Load() }

// Set answers value from now on.
func (s *loadServer) Set(value float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.value, s.status, s.hang = value, 0, false
}

// Fail answers the HTTP status code from now on.
func (s *loadServer) Fail(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.hang = code, false
}

// Hang answers nothing from now on, so reads time out.
func (s *loadServer) Hang() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hang = true
}

// Close stops the server; its port then refuses connections.
func (s *loadServer) Close() {
	s.closeOnce.Do(func() {
		close(s.stop)
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
}

// LastAtLeast and FirstBelow find the last answer at or above threshold
// before a time, and the first answer below threshold.
func (s *loadServer) LastAtLeast(threshold float64, before time.Time) (last time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.answers {
		if a.value >= threshold && a.at.Before(before) {
			last = a.at
		}
	}
	return last
}

func (s *loadServer) FirstBelow(threshold float64) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.answers {
		if a.value < threshold {
			return a.at
		}
	}
	return time.Time{}
}
