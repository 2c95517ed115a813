package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

// TestSilentEndpointsStallNoOtherTenant: one tenant's sets read an endpoint
// that never answers, with the longest timeout the API allows, as many sets
// as the controller has workers and more; another tenant's set keeps at
// least half of its evaluations meanwhile. A read never holds a worker, and
// a namespace's reads wait for that namespace's own slots.
func TestSilentEndpointsStallNoOtherTenant(t *testing.T) {
	t.Parallel()
	const (
		interval = time.Second
		window   = 20 * time.Second
		silent   = 6 // more than the shared controller's 4 workers
	)
	ctx := context.Background()
	hostile, victim := cp.NamespaceT(t), cp.NamespaceT(t)
	hanging := newLoadServer(t, 0)
	hanging.Hang()
	for i := range silent {
		set := httpSet(fmt.Sprintf("silent-%d", i), "none", hanging.URL(), 2, interval)
		set.Spec.Autoscaling.Metrics[0].HTTP.Timeout = &gputaskv1.Duration{Duration: gputaskv1.MaxSourceTimeout}
		if _, err := cp.GPUTask.GputaskV1().GPUTaskSets(hostile).Create(ctx, set, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A namespace has 4 reads in flight at most; the others wait their turn
	// outside the workers.
	framework.Poll(t, waitTimeout, "the namespace's read slots all hanging", func(context.Context) (bool, string) {
		return hanging.Reads() >= 4, fmt.Sprintf("%d reads", hanging.Reads())
	})

	load := newLoadServer(t, 0.6)
	if _, err := cp.GPUTask.GputaskV1().GPUTaskSets(victim).Create(ctx, httpSet("victim", "none", load.URL(), 2, interval), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, waitTimeout, "the other tenant's set evaluated", func(context.Context) (bool, string) {
		return load.Reads() >= 2, fmt.Sprintf("%d reads", load.Reads())
	})
	before := load.Reads()
	time.Sleep(window)
	evaluations := load.Reads() - before
	// A read that held a worker, or a read slot shared across namespaces,
	// would leave the set no evaluation in the window: the silent reads
	// time out after 30 s. A set evaluated every second on a machine
	// loaded by the tests beside it (and by make verify's compiling, on a
	// fresh machine) loses a few evaluations anyway, 15 of 20 seen.
	want := int64(window/interval) / 2
	if evaluations < want {
		t.Errorf("the other tenant's set was evaluated %d times in %d intervals while %d silent sets hung, want at least %d",
			evaluations, window/interval, silent, want)
	}
	if hanging.Reads() > 2*silent {
		t.Errorf("%d reads of the silent endpoint within one timeout, want at most one in flight per set", hanging.Reads())
	}
	t.Logf("%d evaluations in %d intervals; %d reads of the silent endpoint", evaluations, window/interval, hanging.Reads())
}
