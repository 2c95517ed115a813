package main

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

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
	f.addTask(task)
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
	f.clock.Step(time.Hour)
	if reason, ok := c.replacementReason(ctx, k, newTask("render"), pod); ok {
		t.Fatalf("a pod gated for an hour is replaced (%s)", reason)
	}
	admitted := letGo(pod)
	if reason, ok := c.replacementReason(ctx, k, newTask("render"), admitted); ok {
		t.Fatalf("a pod is replaced the moment its gate is lifted (%s)", reason)
	}
	f.clock.Step(f.opts.PendingTimeout - time.Second)
	if reason, ok := c.replacementReason(ctx, k, newTask("render"), admitted); ok {
		t.Fatalf("a pod is replaced before the pending timeout since its gate was lifted (%s)", reason)
	}
	f.clock.Step(time.Second)
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
	f.clock.Step(24 * time.Hour)
	if reason, ok := c.replacementReason(ctx, k, newTask("render"), admitted); ok {
		t.Fatalf("Kueue's pod is replaced for waiting a day (%s)", reason)
	}
	failed := admitted.DeepCopy()
	failed.Status.Phase = corev1.PodFailed
	if reason, ok := c.replacementReason(ctx, k, newTask("render"), failed); !ok || reason != reschedule.ReasonPodFailed {
		t.Fatalf("replacementReason of Kueue's failed pod = %q, %v; want PodFailed", reason, ok)
	}
}
