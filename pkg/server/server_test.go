package server

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"k8s.io/apiserver/pkg/server/healthz"
)

func get(t *testing.T, h http.Handler, path string) int {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code
}

func TestHealthEndpoints(t *testing.T) {
	var ready, leaseLost atomic.Bool
	h := HealthHandler(ready.Load, healthz.NamedCheck("leaderElection", func(*http.Request) error {
		if leaseLost.Load() {
			return errors.New("lease not renewed")
		}
		return nil
	}))
	if code := get(t, h, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d, want 200", code)
	}
	if code := get(t, h, "/readyz"); code != http.StatusInternalServerError {
		t.Errorf("/readyz before sync = %d, want 500", code)
	}
	ready.Store(true)
	if code := get(t, h, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after sync = %d, want 200", code)
	}
	leaseLost.Store(true)
	if code := get(t, h, "/healthz"); code != http.StatusInternalServerError {
		t.Errorf("/healthz of a leader that stopped renewing = %d, want 500", code)
	}
}

// TestProfiling serves pprof on the metrics address only when asked.
func TestProfiling(t *testing.T) {
	for _, profiling := range []bool{false, true} {
		want := http.StatusNotFound
		if profiling {
			want = http.StatusOK
		}
		if code := get(t, MetricsHandler(profiling), "/debug/pprof/symbol"); code != want {
			t.Errorf("profiling=%v: /debug/pprof/symbol = %d, want %d", profiling, code, want)
		}
	}
	if code := get(t, MetricsHandler(false), "/metrics"); code != http.StatusOK {
		t.Errorf("/metrics = %d, want 200", code)
	}
}
