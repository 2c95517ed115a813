package taskstatus

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// Settle is how long a pod on its way to Running (waiting for the
// scheduler, or bound and starting) may stay in one state before its task's
// status shows that state. The next state usually comes sooner, and one
// write then shows it: a pod created, bound and started in quick succession
// costs its task one status write instead of three. When a large set starts
// the scheduler falls tens of seconds behind, which is why this is not
// shorter. A pod the scheduler reports as unschedulable, or one that is
// deleted, is shown at once.
const Settle = 30 * time.Second

// SettleTime returns how much longer the status write that would show pod
// may wait, or 0 if it is due now.
func SettleTime(pod *corev1.Pod, now time.Time) time.Duration {
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodPending || pod.CreationTimestamp.IsZero() {
		return 0
	}
	since := pod.CreationTimestamp.Time
	for _, cond := range pod.Status.Conditions {
		if cond.Type != corev1.PodScheduled {
			continue
		}
		if cond.Status != corev1.ConditionTrue {
			// The scheduler has something to say, such as "0/2 nodes are
			// available": the user wants to read it now.
			return 0
		}
		if cond.LastTransitionTime.After(since) {
			since = cond.LastTransitionTime.Time
		}
	}
	return max(since.Add(Settle).Sub(now), 0)
}

// MayWait reports whether the write from current to want only mirrors the
// pod's progress, and so may wait for the pod to settle. A change to the
// reschedule count or the restart acknowledgement, and a spec that was
// invalid and is valid again, are written at once.
func MayWait(current, want *gputaskv1.GPUTaskStatus) bool {
	if current.Reschedules != want.Reschedules || !current.LastRescheduleTime.Equal(want.LastRescheduleTime) {
		return false
	}
	return !meta.IsStatusConditionFalse(current.Conditions, gputaskv1.ConditionSpecValid)
}
