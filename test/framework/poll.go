package framework

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// pollCallTimeout bounds one call of a Poll condition.
const pollCallTimeout = 10 * time.Second

// Poll calls cond every 100ms until it holds or timeout passes, and then
// fails the test with what and the state cond last described. Each call
// has pollCallTimeout of its own, not what is left of timeout, so that the
// last description is of the state and not of the deadline.
func Poll(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), pollCallTimeout)
		defer cancel()
		var ok bool
		ok, last = cond(ctx)
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not reached within %s; last seen: %s", what, timeout, last)
	}
}

// HTTPGet returns the status and body (up to 4 MiB) of a GET that may take
// 2 s at most, or 0 and the error.
func HTTPGet(ctx context.Context, url string) (int, string) {
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
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, err.Error()
	}
	return resp.StatusCode, string(b)
}
