package taskplan

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/reschedule"
)

// replacementReason tells why the pod must be replaced now, "" when it is
// kept: first a restart the user asked for, then the rescheduling cases. It
// plans the next look for the time-based cases that are not due yet; the
// extra second lands that look past the moment rather than on it.
func (p *Plan) replacementReason(in Input) string {
	verdict, err := reschedule.Restart(in.Task, in.Pod, in.Now)
	p.warnBadRestartedAt(in.Task, err)
	if verdict.Replace {
		return reschedule.ReasonRestart
	}
	if verdict.Wait > 0 {
		p.lookAgainIn(verdict.Wait + time.Second)
	}
	seen := p.seePending(in.Pod, in.Now)
	if ok, reason := reschedule.Decide(in.Task, in.Pod, in.Node, in.Now, in.Rescheduling, seen); ok {
		if reason == reschedule.ReasonPodFailed && !p.backOff(in.Pod, in.Now) {
			return ""
		}
		return reason
	}
	if next := reschedule.NextCheck(in.Task, in.Pod, in.Node, in.Now, in.Rescheduling, seen); next > 0 {
		p.lookAgainIn(next + time.Second)
	}
	return ""
}

// backOff reports whether the replacement of pod, which failed, may be
// made now (reschedule.BackOff), and records the count of failures in a
// row that its replacement carries. While it waits, the task is looked at
// again when the wait ends, and a Warning says why no pod is made, once
// per failed pod.
func (p *Plan) backOff(pod *corev1.Pod, now time.Time) bool {
	b := reschedule.BackOff(pod, now)
	p.Failures = b.Failures
	if b.Wait <= 0 {
		p.Memory.BackedOff = ""
		return true
	}
	p.lookAgainIn(b.Wait)
	if p.Memory.BackedOff != pod.UID {
		p.Memory.BackedOff = pod.UID
		p.Events = append(p.Events, Event{Type: corev1.EventTypeWarning, Reason: gputaskv1.ReasonBackOff,
			Message: fmt.Sprintf("Back-off %s before replacing failed pod %s: %d of the task's pods failed in a row, each within %s of its start",
				b.Delay, pod.Name, b.Failures, reschedule.FailureBackOffReset)})
	}
	return false
}

// warnBadRestartedAt reports a restartedAt value that cannot be read, once
// per value.
func (p *Plan) warnBadRestartedAt(task *gputaskv1.GPUTask, err error) {
	if err == nil {
		p.Memory.WarnedRestartedAt = ""
		return
	}
	value := task.Annotations[gputaskv1.AnnotationRestartedAt]
	if p.Memory.WarnedRestartedAt == value {
		return
	}
	p.Memory.WarnedRestartedAt = value
	p.Events = append(p.Events, Event{Type: corev1.EventTypeWarning, Reason: gputaskv1.ReasonInvalidRestartedAt,
		Message: fmt.Sprintf("Ignoring the restart request: %v", err)})
}

// seePending remembers, of the task's pod, whether it was held by a
// scheduling gate and when it was first seen unschedulable after the gate
// was lifted, so that the pending timeout runs from then rather than from
// the pod's creation (reschedule.Seen).
func (p *Plan) seePending(pod *corev1.Pod, now time.Time) reschedule.Seen {
	m := &p.Memory
	gated := len(pod.Spec.SchedulingGates) > 0
	if !gated && m.GatedPod == "" {
		return reschedule.Seen{}
	}
	if m.GatedPod != pod.UID {
		m.GatedPod, m.UnschedulableSince = "", time.Time{}
	}
	switch {
	case gated:
		m.GatedPod, m.UnschedulableSince = pod.UID, time.Time{}
	case m.GatedPod == "":
	case !reschedule.Unschedulable(pod):
		if pod.Spec.NodeName != "" {
			// Placed: nothing is left to time.
			m.GatedPod, m.UnschedulableSince = "", time.Time{}
		}
	case m.UnschedulableSince.IsZero():
		m.UnschedulableSince = now
	}
	return reschedule.Seen{UnschedulableSince: m.UnschedulableSince}
}
