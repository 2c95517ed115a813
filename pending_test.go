package main

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
	"github.com/gputask/gputask-controller/pkg/reschedule"
)

// gatedPodOf is task's pod as a queueing system holds it: made at testNow,
// gated, SchedulingGated since.
func gatedPodOf(t *testing.T, f *fixture) (*corev1.Pod, func(*corev1.Pod) *corev1.Pod) {
	t.Helper()
	task := newTask("render")
	pod := podWith(task, corev1.PodPending, "")
	pod.CreationTimestamp = metav1.NewTime(testNow)
	pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/quota"}}
	pod.Status.Conditions = []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonSchedulingGated,
		LastTransitionTime: metav1.NewTime(testNow),
	}}
	f.Add(task)
	// letGo is the pod once its gate is lifted and the scheduler found no
	// node: the condition keeps its transition time, the pod's creation.
	letGo := func(p *corev1.Pod) *corev1.Pod {
		p = p.DeepCopy()
		p.Spec.SchedulingGates = nil
		p.Status.Conditions[0].Reason = corev1.PodReasonUnschedulable
		p.Status.Conditions[0].Message = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
		return p
	}
	return pod, letGo
}

// TestPendingTimeoutRunsFromTheGate: a gated pod is never placed again,
// however long it waits; once let go, its pending timeout runs from when
// the controller first saw it unschedulable, not from its creation.
func TestPendingTimeoutRunsFromTheGate(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	pod, letGo := gatedPodOf(t, f)
	c := f.newController(ctx)
	k := key(newTask("render"))

	if reason, ok := c.replacementReason(ctx, k, newTask("render"), pod); ok {
		t.Fatalf("a gated pod is replaced (%s)", reason)
	}
	f.Clock.Step(time.Hour)
	if reason, ok := c.replacementReason(ctx, k, newTask("render"), pod); ok {
		t.Fatalf("a pod gated for an hour is replaced (%s)", reason)
	}
	admitted := letGo(pod)
	if reason, ok := c.replacementReason(ctx, k, newTask("render"), admitted); ok {
		t.Fatalf("a pod is replaced the moment its gate is lifted (%s)", reason)
	}
	f.Clock.Step(f.opts.PendingTimeout - time.Second)
	if reason, ok := c.replacementReason(ctx, k, newTask("render"), admitted); ok {
		t.Fatalf("a pod is replaced before the pending timeout since its gate was lifted (%s)", reason)
	}
	f.Clock.Step(time.Second)
	if reason, ok := c.replacementReason(ctx, k, newTask("render"), admitted); !ok || reason != reschedule.ReasonUnschedulable {
		t.Fatalf("replacementReason = %q, %v at the pending timeout since the gate was lifted; want Unschedulable", reason, ok)
	}
}

// TestQueuedPodIsLeftToItsQueue: an admitted pod of a queueing system that
// waits for a node is never replaced for it; a failed one is.
func TestQueuedPodIsLeftToItsQueue(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	pod, letGo := gatedPodOf(t, f)
	pod.Labels["kueue.x-k8s.io/managed"] = "true"
	c := f.newController(ctx)
	k := key(newTask("render"))
	admitted := letGo(pod)
	f.Clock.Step(24 * time.Hour)
	if reason, ok := c.replacementReason(ctx, k, newTask("render"), admitted); ok {
		t.Fatalf("Kueue's pod is replaced for waiting a day (%s)", reason)
	}
	failed := admitted.DeepCopy()
	failed.Status.Phase = corev1.PodFailed
	if reason, ok := c.replacementReason(ctx, k, newTask("render"), failed); !ok || reason != reschedule.ReasonPodFailed {
		t.Fatalf("replacementReason of Kueue's failed pod = %q, %v; want PodFailed", reason, ok)
	}
}

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
