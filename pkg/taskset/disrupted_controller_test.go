package taskset

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
	"github.com/gputask/gputask-controller/pkg/setplan"
)

// disruptedNode is a Ready node that Karpenter has tainted to drain it.
func disruptedNode(name string) *corev1.Node {
	n := controllertest.Node(name)
	n.Spec.Taints = []corev1.Taint{{Key: setplan.TaintDisrupted, Effect: corev1.TaintEffectNoSchedule}}
	return n
}

// onNode puts a task's pod on node.
func onNode(node string) controllertest.TaskOption {
	return controllertest.TaskFunc(func(t *gputaskv1.GPUTask) { t.Status.NodeName = node })
}

// busy marks a task's worker busy, as the GPUTask controller mirrors its
// pod's mark.
var busy = controllertest.Annotation(gputaskv1.AnnotationPodBusy, "true")

// withNodesStatus is set's in-step status for these counts, draining of
// them draining.
func withNodesStatus(set *gputaskv1.GPUTaskSet, replicas, running, pending, nodes, draining int32) *gputaskv1.GPUTaskSet {
	s := withStatus(set, replicas, running, pending, 0, nodes)
	s.Status.DrainingReplicas = draining
	return s
}

// syncCaches makes the caches show what the API holds, new tasks
// included, as the informers would, and counts the writes as observed.
func (f *fixture) syncCaches(ctx context.Context, c *Controller, set *gputaskv1.GPUTaskSet) {
	f.T.Helper()
	inAPI, err := f.Client.GputaskV1().GPUTasks(set.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		f.T.Fatal(err)
	}
	indexer := f.Informers.Gputask().V1().GPUTasks().Informer().GetIndexer()
	for _, obj := range indexer.List() {
		f.Remove(obj.(*gputaskv1.GPUTask))
	}
	for i := range inAPI.Items {
		f.Update(&inAPI.Items[i])
	}
	cur, err := f.Client.GputaskV1().GPUTaskSets(set.Namespace).Get(ctx, set.Name, metav1.GetOptions{})
	if err != nil {
		f.T.Fatal(err)
	}
	f.Update(cur)
	c.expectations.Delete(setKey(set))
}

// TestDisruptedNodeTasksDrainAndAreReplaced: when Karpenter taints a node
// to take it away, one sync marks the busy task there draining (one patch),
// deletes the idle one, and creates both replacements above the count,
// with one NodeDisrupted event; the next syncs, whether the caches lag or
// not, make no write to a task and, once the status shows it all, none at
// all; the drained task goes when its worker turns idle.
func TestDisruptedNodeTasksDrainAndAreReplaced(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	set := newSet("render", ptr.To[int32](3))
	busyTask := ownedTask(set, "render-busy", time.Hour, busy)
	idleTask := ownedTask(set, "render-idle", time.Hour)
	healthy := ownedTask(set, "render-healthy", time.Hour, onNode("gpu-node-2"))
	f := newFixture(t)
	f.Add(withNodesStatus(set, 3, 3, 0, 2, 0), disruptedNode("gpu-node-1"), controllertest.Node("gpu-node-2"))
	f.addTasks(busyTask, idleTask, healthy)

	f.expectPatch(set.Namespace, "render-busy", `{"metadata":{"annotations":{"gputask.io/drainStartedAt":"`+testNow.Format(time.RFC3339)+`","gputask.io/draining":"true"}}}`)
	f.expectDelete(set.Namespace, "render-idle")
	f.expectCreates(set, 2)
	f.ExpectApplyStatus(withNodesStatus(set, 3, 3, 0, 2, 1))
	c := f.newController(ctx)
	f.Run(ctx, key(set))
	f.ExpectEvents(
		"Normal NodeDisrupted Draining 1 busy task, deleted 1 task, on nodes being disrupted: gpu-node-1",
		"Normal SuccessfulCreate Created 2 tasks",
	)
	if got := f.Queue.After(); len(got) != 1 || got[0] != setplan.DefaultDrainTimeout {
		t.Errorf("AddAfter calls %v, want one after the drain timeout %v", got, setplan.DefaultDrainTimeout)
	}

	// Synced again before the caches show any of it: no second mark,
	// delete or create.
	f.Run(ctx, key(set))
	f.ExpectEvents()

	// The caches show the mark, the deletion and the two new tasks: only
	// the counts move (4 tasks, 2 of them starting), a second after the
	// last status write.
	f.syncCaches(ctx, c, set)
	f.Clock.Step(time.Second)
	f.ExpectApplyStatus(withNodesStatus(set, 4, 2, 2, 2, 1))
	f.Run(ctx, key(set))
	f.syncCaches(ctx, c, set)
	f.Run(ctx, key(set))
	f.ExpectEvents()

	// The worker finishes its requests and clears busy: its task goes.
	done, err := f.Client.GputaskV1().GPUTasks(set.Namespace).Get(ctx, "render-busy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done = done.DeepCopy()
	delete(done.Annotations, gputaskv1.AnnotationPodBusy)
	f.Update(done)
	f.expectDelete(set.Namespace, "render-busy")
	f.Run(ctx, key(set))
	f.ExpectEvents("Normal SuccessfulDelete Deleted 1 task")
}

// TestDisruptedInStepMakesNoWrites: a set whose task on a disrupted node is
// draining already and replaced, with its status showing so, costs no
// write and no event however often it is synced.
func TestDisruptedInStepMakesNoWrites(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	set := newSet("render", ptr.To[int32](1))
	marked := ownedTask(set, "render-leaving", time.Hour, busy,
		controllertest.Annotation(gputaskv1.AnnotationDraining, "true"),
		controllertest.Annotation(gputaskv1.AnnotationDrainStartedAt, testNow.Add(-time.Minute).Format(time.RFC3339)))
	replacement := ownedTask(set, "render-new", time.Minute, onNode("gpu-node-2"))
	f := newFixture(t)
	f.Add(withNodesStatus(set, 2, 2, 0, 2, 1), disruptedNode("gpu-node-1"), controllertest.Node("gpu-node-2"))
	f.addTasks(marked, replacement)
	f.newController(ctx)
	f.Run(ctx, key(set))
	f.Run(ctx, key(set))
	f.ExpectEvents()
}

// TestDeletedNodeCountsAsDisrupted: a node being deleted is as surely
// leaving as a tainted one; a node that the cache does not hold is not
// known to be leaving, and its task is left to the GPUTask controller.
func TestDeletedNodeCountsAsDisrupted(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	set := newSet("render", ptr.To[int32](2))
	deleting := controllertest.Node("gpu-node-1")
	deleting.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
	deleting.Finalizers = []string{"karpenter.sh/termination"}
	f := newFixture(t)
	f.Add(withNodesStatus(set, 2, 2, 0, 2, 0), deleting)
	f.addTasks(ownedTask(set, "render-a", time.Hour), ownedTask(set, "render-unknown", time.Hour, onNode("gpu-node-gone")))
	f.expectDelete(set.Namespace, "render-a")
	f.expectCreate(expectedTask(set))
	f.newController(ctx)
	f.Run(ctx, key(set))
	f.ExpectEvents(
		"Normal NodeDisrupted Deleted 1 task, on nodes being disrupted: gpu-node-1",
		"Normal SuccessfulCreate Created 1 task",
	)
}

// TestNodeHandlers: a node wakes the sets of its tasks, once each, when
// its disruption starts or ends or it goes away, and never for the
// node updates that change nothing for a set.
func TestNodeHandlers(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	set := newSet("render", ptr.To[int32](3))
	other := newSet("other", ptr.To[int32](1))
	other.UID = "uid-other"
	stranger := ownedTask(set, "render-x", time.Hour, onNode("gpu-node-1"))
	stranger.OwnerReferences[0].UID = "uid-someone-else"
	f := newFixture(t)
	f.Add(set, other)
	f.addTasks(ownedTask(set, "render-a", time.Hour), ownedTask(set, "render-b", time.Hour),
		ownedTask(other, "other-a", time.Hour, onNode("gpu-node-2")), stranger)
	c := f.newController(ctx)
	logger := klogDiscard()

	plain, tainted := controllertest.Node("gpu-node-1"), disruptedNode("gpu-node-1")
	tainted.ResourceVersion = "2"
	relabelled := plain.DeepCopy()
	relabelled.ResourceVersion, relabelled.Labels = "3", map[string]string{"team": "vision"}
	queued := func() []string {
		var keys []string
		for c.workqueue.Len() > 0 {
			k, _ := c.workqueue.Get()
			keys = append(keys, k.String())
			c.workqueue.Done(k)
			c.workqueue.Forget(k)
		}
		return keys
	}
	for _, tc := range []struct {
		name string
		do   func()
		want int
	}{
		{"the taint appears: the set of the node's two tasks, once", func() { c.updateNode(logger, plain, tainted) }, 1},
		{"the taint stays", func() { c.updateNode(logger, tainted, tainted.DeepCopy()) }, 0},
		{"another change of the node", func() { c.updateNode(logger, plain, relabelled) }, 0},
		{"the taint goes", func() { c.updateNode(logger, tainted, plain) }, 1},
		{"a node without the set's tasks", func() { c.updateNode(logger, controllertest.Node("gpu-node-9"), disruptedNode("gpu-node-9")) }, 0},
		{"a node added tainted", func() { c.addNode(logger, tainted) }, 1},
		{"a node added healthy", func() { c.addNode(logger, plain) }, 0},
		{"a node gone, as a tombstone", func() {
			c.deleteNode(logger, cache.DeletedFinalStateUnknown{Key: "gpu-node-1", Obj: tainted})
		}, 1},
		{"not a node", func() { c.updateNode(logger, "a", "b") }, 0},
	} {
		tc.do()
		if got := queued(); len(got) != tc.want || (tc.want == 1 && got[0] != setKey(set)) {
			t.Errorf("%s: queued %v, want %d of %s", tc.name, got, tc.want, setKey(set))
		}
	}
}
