package taskplan

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gputask/gputask-controller/pkg/reschedule"
)

// gatedPod is the task's pod as a queueing system holds it: made at now,
// gated, SchedulingGated since. letGo is the pod once its gate is lifted and
// the scheduler found no node: the condition keeps its transition time, the
// pod's creation.
func gatedPod() (gated *corev1.Pod, letGo func(*corev1.Pod) *corev1.Pod) {
	gated = with(podOf(task(), corev1.PodPending, ""), func(p *corev1.Pod) {
		p.CreationTimestamp = metav1.NewTime(now)
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/quota"}}
		p.Status.Conditions = []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonSchedulingGated,
			LastTransitionTime: metav1.NewTime(now),
		}}
	})
	letGo = func(p *corev1.Pod) *corev1.Pod {
		return with(p, func(p *corev1.Pod) {
			p.Spec.SchedulingGates = nil
			p.Status.Conditions[0].Reason = corev1.PodReasonUnschedulable
			p.Status.Conditions[0].Message = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
		})
	}
	return gated, letGo
}

// planner plans successive syncs of one task, carrying the memory from one
// plan to the next as the controller does.
type planner struct {
	memory Memory
	now    time.Time
}

func (pl *planner) replace(pod *corev1.Pod) string {
	p := Make(Input{Task: task(), Pod: pod, PodOptions: opts, Rescheduling: rescheduling, Memory: pl.memory, Now: pl.now})
	pl.memory = p.Memory
	return p.Replace
}

// TestPendingTimeoutRunsFromTheGate: a gated pod is never placed again,
// however long it waits; once let go, its pending timeout runs from when
// the controller first saw it unschedulable, not from its creation.
func TestPendingTimeoutRunsFromTheGate(t *testing.T) {
	pod, letGo := gatedPod()
	pl := &planner{now: now}
	if reason := pl.replace(pod); reason != "" {
		t.Fatalf("a gated pod is replaced (%s)", reason)
	}
	pl.now = pl.now.Add(time.Hour)
	if reason := pl.replace(pod); reason != "" {
		t.Fatalf("a pod gated for an hour is replaced (%s)", reason)
	}
	admitted := letGo(pod)
	if reason := pl.replace(admitted); reason != "" {
		t.Fatalf("a pod is replaced the moment its gate is lifted (%s)", reason)
	}
	pl.now = pl.now.Add(rescheduling.PendingTimeout - time.Second)
	if reason := pl.replace(admitted); reason != "" {
		t.Fatalf("a pod is replaced before the pending timeout since its gate was lifted (%s)", reason)
	}
	pl.now = pl.now.Add(time.Second)
	if reason := pl.replace(admitted); reason != reschedule.ReasonUnschedulable {
		t.Fatalf("replace = %q at the pending timeout since the gate was lifted; want Unschedulable", reason)
	}
}

// TestQueuedPodIsLeftToItsQueue: an admitted pod of a queueing system that
// waits for a node is never replaced for it; a failed one is.
func TestQueuedPodIsLeftToItsQueue(t *testing.T) {
	pod, letGo := gatedPod()
	pod.Labels["kueue.x-k8s.io/managed"] = "true"
	pl := &planner{now: now}
	admitted := letGo(pod)
	pl.now = pl.now.Add(24 * time.Hour)
	if reason := pl.replace(admitted); reason != "" {
		t.Fatalf("Kueue's pod is replaced for waiting a day (%s)", reason)
	}
	failed := with(admitted, func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })
	if reason := pl.replace(failed); reason != reschedule.ReasonPodFailed {
		t.Fatalf("replace of Kueue's failed pod = %q; want PodFailed", reason)
	}
}
