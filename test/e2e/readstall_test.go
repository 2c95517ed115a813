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
// least 90% of the evaluations that a third tenant's set, with no silent
// neighbour, gets meanwhile on the same controller, and at least half of
// its intervals. A read never holds a worker, and a namespace's reads wait
// for that namespace's own slots.
func TestSilentEndpointsStallNoOtherTenant(t *testing.T) {
	t.Parallel()
	const (
		interval = time.Second
		window   = 20 * time.Second
		silent   = 6 // more than the shared controller's 4 workers
	)
	ctx := context.Background()
	hostile, victim, quiet := cp.NamespaceT(t), cp.NamespaceT(t), cp.NamespaceT(t)
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

	// The victim's set, and a third tenant's with no silent neighbour: on
	// a machine loaded by the tests beside them (and by make verify's
	// compiling, on a fresh machine) a set evaluated every second loses a
	// few evaluations to the load alone (15 of 20 seen), and the quiet set
	// loses them too.
	load, control := newLoadServer(t, 0.6), newLoadServer(t, 0.6)
	if _, err := cp.GPUTask.GputaskV1().GPUTaskSets(victim).Create(ctx, httpSet("victim", "none", load.URL(), 2, interval), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.GPUTask.GputaskV1().GPUTaskSets(quiet).Create(ctx, httpSet("quiet", "none", control.URL(), 2, interval), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, waitTimeout, "the other tenants' sets evaluated", func(context.Context) (bool, string) {
		return load.Reads() >= 2 && control.Reads() >= 2, fmt.Sprintf("%d and %d reads", load.Reads(), control.Reads())
	})
	before, controlBefore := load.Reads(), control.Reads()
	time.Sleep(window)
	evaluations, unhindered := load.Reads()-before, control.Reads()-controlBefore
	if evaluations*10 < unhindered*9 {
		t.Errorf("the other tenant's set was evaluated %d times while %d silent sets hung, a set with no silent neighbour %d times, want at least 90%% of that",
			evaluations, silent, unhindered)
	}
	// A read that held a worker, or a read slot shared across namespaces,
	// would leave both sets no evaluation in the window: the silent reads
	// time out after 30 s.
	if want := int64(window/interval) / 2; evaluations < want {
		t.Errorf("the other tenant's set was evaluated %d times in %d intervals while %d silent sets hung, want at least %d",
			evaluations, window/interval, silent, want)
	}
	if hanging.Reads() > 2*silent {
		t.Errorf("%d reads of the silent endpoint within one timeout, want at most one in flight per set", hanging.Reads())
	}
	t.Logf("%d evaluations in %d intervals, %d of the set with no silent neighbour; %d reads of the silent endpoint", evaluations, window/interval, unhindered, hanging.Reads())
}
