package tenancy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gputask/gputask-controller/test/framework"
)

// Loads against the default thresholds (up 0.8, down 0.5).
const (
	loadHigh = 0.9
	loadMid  = 0.6
	loadLow  = 0.3
)

// poll polls cond every 100ms until it holds or timeout passes, and fails
// the test with what and the last state cond described.
func poll(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var ok bool
		ok, last = cond(ctx)
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not reached within %s; last seen: %s", what, timeout, last)
	}
}

// httpGet returns the status and body of a GET, or 0 if it failed.
func httpGet(ctx context.Context, url string) (int, string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, err.Error()
	}
	return resp.StatusCode, string(b)
}

// loopbackAddr returns 127.0.0.1:<a free port>.
func loopbackAddr(t *testing.T) string {
	t.Helper()
	port, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(port)
}

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
