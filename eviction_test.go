package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
	"github.com/gputask/gputask-controller/pkg/reschedule"
)

// TestEvictionIsCounted: a pod Kueue (or the scheduler) evicts is waited
// for while its finalizer holds it, with one event naming who evicted it
// and why, and the pod made in its place counts in status.reschedules.
func TestEvictionIsCounted(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task, pod := f.addTaskWithPod(newTask("render"), corev1.PodRunning, "gpu-1")
	evicted := pod.DeepCopy()
	evicted.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
	evicted.DeletionGracePeriodSeconds = ptr.To[int64](0)
	evicted.Finalizers = []string{"kueue.x-k8s.io/managed"}
	evicted.Status.Conditions = append(evicted.Status.Conditions, corev1.PodCondition{
		Type: reschedule.ConditionTerminationTarget, Status: corev1.ConditionTrue, Reason: "StoppedByKueue",
		Message: "Preempted to accommodate a workload (UID: 42) in the ClusterQueue",
	})
	c := f.newController(ctx)
	f.Update(evicted)
	for range 2 {
		if err := c.syncHandler(ctx, key(task)); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range f.KubeClient.Actions() {
		if a.GetVerb() == "delete" {
			t.Errorf("a pod Kueue's finalizer holds was deleted again: %v", a)
		}
	}
	f.ExpectEvents("Warning Evicted Pod render was evicted by Kueue (StoppedByKueue): Preempted to accommodate a workload (UID: 42) in the ClusterQueue")

	// The pod is gone: its replacement is made and counted.
	f.Remove(evicted)
	if err := f.KubeClient.Tracker().Delete(podsResource, evicted.Namespace, evicted.Name); err != nil {
		t.Fatal(err)
	}
	f.KubeClient.ClearActions()
	f.Client.ClearActions()
	if err := c.syncHandler(ctx, key(task)); err != nil {
		t.Fatal(err)
	}
	created := false
	for _, a := range f.KubeClient.Actions() {
		created = created || a.GetVerb() == "create"
	}
	var counted int32
	for _, a := range f.Client.Actions() {
		if controllertest.IsApply(a) && a.GetSubresource() == "status" {
			var applied gputaskv1.GPUTask
			controllertest.Applied(t, a, &applied)
			counted = applied.Status.Reschedules
		}
	}
	if !created || counted != 1 {
		t.Errorf("after the eviction: pod created %v, reschedules %d; want a new pod and 1", created, counted)
	}
	f.ExpectEvents("Normal Rescheduled Rescheduled (Evicted): replaced the pod with render")
}
