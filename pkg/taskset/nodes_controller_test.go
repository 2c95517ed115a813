package taskset

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
	"github.com/gputask/gputask-controller/pkg/metrics"
)

// nodesGauge is gputask_taskset_nodes of the set as a scrape shows it, and
// whether the scrape has it at all.
func nodesGauge(t *testing.T, set *gputaskv1.GPUTaskSet) (float64, bool) {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "gputask_taskset_nodes" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if testutil.LabelsMatch(m, map[string]string{"namespace": set.Namespace, "taskset": set.Name}) {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// TestStatusNodes: status.nodes counts the distinct nodes that hold the
// set's tasks (a task without a node, or one that has finished, holds
// none); a task that moved to another node costs one status write and
// nothing after it, and gputask_taskset_nodes says the same until the set
// is gone.
func TestStatusNodes(t *testing.T) {
	metrics.Register()
	_, ctx := ktesting.NewTestContext(t)
	set := newSet("pool", ptr.To[int32](5))
	on := func(node string) controllertest.TaskOption {
		return controllertest.TaskFunc(func(t *gputaskv1.GPUTask) { t.Status.NodeName = node })
	}
	tasks := func() []*gputaskv1.GPUTask {
		done := ownedTask(set, "pool-done", time.Hour, on("gpu-node-3"))
		done.Status.Phase = gputaskv1.GPUTaskSucceeded
		return []*gputaskv1.GPUTask{
			ownedTask(set, "pool-a", time.Hour), ownedTask(set, "pool-b", time.Hour),
			ownedTask(set, "pool-moved", time.Hour, on("gpu-node-2")),
			ownedTask(set, "pool-nopod", time.Minute, withoutPod), done,
		}
	}
	// The status from before pool-moved left gpu-node-1.
	f := newFixture(t)
	f.Add(withStatus(set, 5, 3, 1, 0, 1))
	f.addTasks(tasks()...)
	want := withStatus(set, 5, 3, 1, 0, 2)
	f.ExpectApplyStatus(want)
	f.newController(ctx)
	f.Run(ctx, key(set))
	if got, ok := nodesGauge(t, set); !ok || got != 2 {
		t.Errorf("gputask_taskset_nodes = %v (present %v), want 2", got, ok)
	}

	// The same sync on a cache that shows the write makes no call.
	f.Cached, f.Objects, f.Actions = []runtime.Object{want}, nil, nil
	f.addTasks(tasks()...)
	f.newController(ctx)
	f.Run(ctx, key(set))

	// Once the set is gone, so is its series.
	gone := newFixture(t)
	gone.newController(ctx)
	gone.Run(ctx, key(set))
	if got, ok := nodesGauge(t, set); ok {
		t.Errorf("gputask_taskset_nodes of a deleted set = %v, want no series", got)
	}
}
