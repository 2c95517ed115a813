package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

// TestSilentEndpointsStallNoOtherTenant: one tenant's sets read an endpoint
// that never answers, with the longest timeout the API allows, as many sets
// as the controller has workers and more; another tenant's set keeps at
// least 90% of its evaluations meanwhile. A read never holds a worker, and
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
	hanging := tsNewLoadServer(t, 0)
	hanging.Hang()
	for i := range silent {
		set := readStallSet(fmt.Sprintf("silent-%d", i), hanging.URL(), interval)
		set.Spec.Autoscaling.Metrics[0].HTTP.Timeout = &gputaskv1.Duration{Duration: gputaskv1.MaxSourceTimeout}
		if _, err := cp.GPUTask.GputaskV1().GPUTaskSets(hostile).Create(ctx, set, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	framework.Poll(t, tsTimeout, "every silent set's read hanging", func(context.Context) (bool, string) {
		return hanging.Reads() >= silent, fmt.Sprintf("%d reads", hanging.Reads())
	})

	load := tsNewLoadServer(t, 0.6)
	if _, err := cp.GPUTask.GputaskV1().GPUTaskSets(victim).Create(ctx, readStallSet("victim", load.URL(), interval), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, tsTimeout, "the other tenant's set evaluated", func(context.Context) (bool, string) {
		return load.Reads() >= 2, fmt.Sprintf("%d reads", load.Reads())
	})
	before := load.Reads()
	time.Sleep(window)
	evaluations := load.Reads() - before
	want := int64(window/interval) * 9 / 10
	if evaluations < want {
		t.Errorf("the other tenant's set was evaluated %d times in %d intervals while %d silent sets hung, want at least %d",
			evaluations, window/interval, silent, want)
	}
	if hanging.Reads() > 2*silent {
		t.Errorf("%d reads of the silent endpoint within one timeout, want at most one in flight per set", hanging.Reads())
	}
	t.Logf("%d evaluations in %d intervals; %d reads of the silent endpoint", evaluations, window/interval, hanging.Reads())
}

// readStallSet is an autoscaled set of one task that holds between its
// thresholds at the load the tests serve.
func readStallSet(name, url string, interval time.Duration) *gputaskv1.GPUTaskSet {
	amount := intstr.FromInt32(1)
	return &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To[int32](1),
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{GPU: "none", GPUAmount: &amount}},
			Autoscaling: &gputaskv1.AutoscalingSpec{
				MinReplicas: ptr.To[int32](1), MaxReplicas: 2,
				Interval: &gputaskv1.Duration{Duration: interval},
				Metrics:  []gputaskv1.MetricSpec{{Name: "load", HTTP: &gputaskv1.HTTPSource{URL: url}}},
				Policy:   gputaskv1.ScalingPolicy{Type: gputaskv1.StepPolicy},
			},
		},
	}
}
