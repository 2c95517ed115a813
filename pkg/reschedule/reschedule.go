// Package reschedule decides when a GPUTask's pod must be placed again. The
// decision is pure (task, pod, node, now, options in; verdict and reason out)
// so one table test covers every case; the controller only carries it out.
package reschedule

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// Reasons, CamelCase so they can be used as event reasons and metric labels.
const (
	ReasonPodFailed     = "PodFailed"
	ReasonEvicted       = gputaskv1.ReasonEvicted
	ReasonNodeLost      = "NodeLost"
	ReasonNodeNotReady  = "NodeNotReady"
	ReasonUnschedulable = "Unschedulable"
	// ReasonPreempted is a pod the scheduler preempted for a pod of higher
	// priority.
	ReasonPreempted = gputaskv1.ReasonPreempted
	ReasonPeriodic  = "Periodic"
	// ReasonRestart is the reason recorded for a restart the user asked for
	// with the gputask.io/restartedAt annotation.
	ReasonRestart = "Restart"
)

// DefaultMaxConcurrent bounds how many tasks may be without a pod at once
// because the controller replaces it: the GPUTask controller's default,
// and the default of the flag that sets it.
const DefaultMaxConcurrent = 5

// Options are the controller-wide rescheduling settings.
type Options struct {
	// Interval turns rescheduling on when > 0, and is the pod age after which
	// a Periodic task's pod is placed again.
	Interval time.Duration
	// PendingTimeout is how long a pod may stay unschedulable before it is
	// placed again; 0 turns that case off.
	PendingTimeout time.Duration
	// NodeNotReadyTimeout is how long a pod's node may be NotReady before the
	// pod is placed again, counted from the Ready condition's last transition,
	// so a kubelet restart or a short network blip does not churn GPU work.
	// 0 acts at once.
	NodeNotReadyTimeout time.Duration
}

// Seen is what the controller saw of a pod over time, beyond what the pod
// says now.
type Seen struct {
	// UnschedulableSince is when the controller first saw the pod
	// unschedulable after its scheduling gates were lifted; zero when it
	// did not see the pod gated. While a gate holds a pod, PodScheduled
	// stays False from the pod's creation, so the condition's
	// lastTransitionTime says nothing of how long the pod has been waiting
	// for a node since it was let go.
	UnschedulableSince time.Time
}

// queueMarkers name the queueing systems that manage a pod's placement, by
// the label or annotation each puts on the pods it manages.
var queueMarkers = []struct {
	system, label, annotation string
}{
	{system: "Kueue", label: "kueue.x-k8s.io/managed"},
	{system: "Volcano", annotation: "scheduling.k8s.io/group-name"},
	{system: "KAI", label: "kai.scheduler/queue"},
}

// QueueManager names the queueing system that manages pod's placement
// (Kueue, Volcano, the KAI scheduler), or "" for none. Such a system admits
// the pod against a quota and keeps it waiting, requeues and evicts it on
// its own terms; a pod it admitted that waits for a node is its to handle.
func QueueManager(pod *corev1.Pod) string {
	for _, m := range queueMarkers {
		if m.label != "" && pod.Labels[m.label] != "" || m.annotation != "" && pod.Annotations[m.annotation] != "" {
			return m.system
		}
	}
	return ""
}

// Decide reports whether pod, the pod of task, must be deleted and created
// again, and why. node is the node the pod is bound to, nil if that node is
// not known (gone) or the pod is not bound.
//
// A pod held by a scheduling gate is never placed again: it waits for
// admission, not for a node. Nor is a pod a queueing system manages (see
// QueueManager) placed again for waiting for a node: replacing it would
// throw its admission away and send the new pod to the back of the queue.
// Failed, evicted and lost pods are handled alike for all.
func Decide(task *gputaskv1.GPUTask, pod *corev1.Pod, node *corev1.Node, now time.Time, opts Options, seen Seen) (bool, string) {
	if !enabled(task, pod, opts) {
		return false, ""
	}
	// A Succeeded pod is final: its work is done, placing it again would run
	// the work twice.
	if pod.Status.Phase == corev1.PodSucceeded {
		return false, ""
	}
	if pod.Status.Phase == corev1.PodFailed {
		if pod.Status.Reason == "Evicted" {
			return true, ReasonEvicted
		}
		return true, ReasonPodFailed
	}
	if pod.Spec.NodeName != "" {
		if node == nil {
			return true, ReasonNodeLost
		}
		if d, ok := notReadyFor(node, now); ok && d >= opts.NodeNotReadyTimeout {
			return true, ReasonNodeNotReady
		}
	}
	if d, ok := unschedulableFor(pod, now, seen); ok && opts.PendingTimeout > 0 && d >= opts.PendingTimeout {
		return true, ReasonUnschedulable
	}
	if policy(task) == gputaskv1.ReschedulePeriodic && now.Sub(pod.CreationTimestamp.Time) >= opts.Interval {
		return true, ReasonPeriodic
	}
	return false, ""
}

// NextCheck returns how long from now a time-based case (an unschedulable
// pod reaching the pending timeout, a Periodic pod reaching the interval)
// can first become true, so the controller can look again just then instead
// of polling. It returns 0 when no such case is ahead.
func NextCheck(task *gputaskv1.GPUTask, pod *corev1.Pod, node *corev1.Node, now time.Time, opts Options, seen Seen) time.Duration {
	if !enabled(task, pod, opts) || isFinal(pod) {
		return 0
	}
	var next time.Duration
	consider := func(d time.Duration) {
		if d > 0 && (next == 0 || d < next) {
			next = d
		}
	}
	if d, ok := unschedulableFor(pod, now, seen); ok && opts.PendingTimeout > 0 {
		consider(opts.PendingTimeout - d)
	}
	if d, ok := notReadyFor(node, now); ok && pod.Spec.NodeName != "" {
		consider(opts.NodeNotReadyTimeout - d)
	}
	if policy(task) == gputaskv1.ReschedulePeriodic {
		consider(opts.Interval - now.Sub(pod.CreationTimestamp.Time))
	}
	return next
}

func enabled(task *gputaskv1.GPUTask, pod *corev1.Pod, opts Options) bool {
	if task == nil || pod == nil || pod.DeletionTimestamp != nil || opts.Interval <= 0 {
		return false
	}
	switch policy(task) {
	case gputaskv1.RescheduleOnFailure, gputaskv1.ReschedulePeriodic:
		return true
	default:
		// Never, and any value this version does not know: doing nothing is
		// the safe reading of a policy we do not understand.
		return false
	}
}

func policy(task *gputaskv1.GPUTask) gputaskv1.ReschedulePolicy {
	if task.Spec.ReschedulePolicy == "" {
		return gputaskv1.RescheduleOnFailure
	}
	return task.Spec.ReschedulePolicy
}

func isFinal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// notReadyFor returns how long the node has been NotReady, from its Ready
// condition's last transition; ok is false for a nil or Ready node.
func notReadyFor(node *corev1.Node, now time.Time) (time.Duration, bool) {
	if node == nil || !nodeNotReady(node) {
		return 0, false
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && !c.LastTransitionTime.IsZero() {
			return max(now.Sub(c.LastTransitionTime.Time), 0), true
		}
	}
	// No transition time: treat it as NotReady since long ago rather than
	// never acting.
	return time.Duration(1<<63 - 1), true
}

// nodeNotReady is true when the node's Ready condition is False or Unknown
// (the node lifecycle controller sets Unknown when the kubelet stops
// reporting). A node that has not reported Ready at all yet is left alone.
func nodeNotReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status != corev1.ConditionTrue
		}
	}
	return false
}

// unschedulableFor returns how long an unbound pending pod has been marked
// unschedulable by the scheduler, measured from the condition's
// lastTransitionTime (the scheduler keeps it while retrying), or from when
// the controller first saw it unschedulable once its gates were lifted,
// whichever is later. A gated pod, and one a queueing system manages, is
// not counted.
func unschedulableFor(pod *corev1.Pod, now time.Time, seen Seen) (time.Duration, bool) {
	if len(pod.Spec.SchedulingGates) > 0 || QueueManager(pod) != "" || !Unschedulable(pod) {
		return 0, false
	}
	since := seen.UnschedulableSince
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.LastTransitionTime.After(since) {
			since = c.LastTransitionTime.Time
		}
	}
	return max(now.Sub(since), 0), true
}

// Unschedulable reports whether the scheduler has found no node for pod,
// an unbound pending pod: PodScheduled False with reason Unschedulable.
func Unschedulable(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodPending || pod.Spec.NodeName != "" {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// ConditionTerminationTarget is the pod condition Kueue sets on a pod it
// stops, as Kubernetes sets DisruptionTarget.
const ConditionTerminationTarget corev1.PodConditionType = "TerminationTarget"

// Disruption is why someone else ended a pod: who (the scheduler, the
// Eviction API, Kueue, …), the condition's reason and its message.
type Disruption struct {
	By, Reason, Message string
}

// RescheduleReason is the reschedule reason a disruption is counted under.
func (d Disruption) RescheduleReason() string {
	if d.Reason == "PreemptionByScheduler" {
		return ReasonPreempted
	}
	return ReasonEvicted
}

// disruptors name who sets each DisruptionTarget reason of Kubernetes.
var disruptors = map[string]string{
	"PreemptionByScheduler":  "the scheduler",
	"EvictionByEvictionAPI":  "the Eviction API",
	"DeletionByTaintManager": "the taint manager",
	"DeletionByPodGC":        "the pod garbage collector",
	"TerminationByKubelet":   "the kubelet",
}

// Disrupted reports why pod, being deleted by someone else, was disrupted:
// from its DisruptionTarget condition (the scheduler's preemption, an
// eviction, the taint manager) or Kueue's TerminationTarget (a workload
// Kueue evicted or preempted). ok is false for a pod deleted without one.
func Disrupted(pod *corev1.Pod) (d Disruption, ok bool) {
	for _, c := range pod.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case corev1.DisruptionTarget:
			by := disruptors[c.Reason]
			if by == "" {
				if by = QueueManager(pod); by == "" {
					by = "another component"
				}
			}
			return Disruption{By: by, Reason: c.Reason, Message: c.Message}, true
		case ConditionTerminationTarget:
			return Disruption{By: "Kueue", Reason: c.Reason, Message: c.Message}, true
		}
	}
	return Disruption{}, false
}

// RestartVerdict is what a gputask.io/restartedAt annotation asks for.
type RestartVerdict struct {
	// Replace is true when the pod predates the requested restart.
	Replace bool
	// Wait, when > 0, is how long until the requested time is reached; a
	// restart time in the future (clock skew) is acted on only once it has
	// passed, so the replacement is never older than the request.
	Wait time.Duration
}

// Restart reads task's gputask.io/restartedAt annotation and tells whether
// pod must be replaced to honour it. A pod created at or after the requested
// time already satisfies it, and so does a task whose lastRescheduleTime is
// at or after it. An unparseable value is returned as an error, which the
// caller reports and otherwise ignores.
func Restart(task *gputaskv1.GPUTask, pod *corev1.Pod, now time.Time) (RestartVerdict, error) {
	at, ok, err := RestartedAt(task)
	if err != nil || !ok || pod == nil || pod.DeletionTimestamp != nil {
		return RestartVerdict{}, err
	}
	if !pod.CreationTimestamp.Time.Before(at) {
		return RestartVerdict{}, nil
	}
	if last := task.Status.LastRescheduleTime; last != nil && !last.Time.Before(at) {
		return RestartVerdict{}, nil
	}
	if now.Before(at) {
		return RestartVerdict{Wait: at.Sub(now)}, nil
	}
	return RestartVerdict{Replace: true}, nil
}

// RestartedAt parses task's gputask.io/restartedAt annotation, to whole
// seconds. ok is false when the annotation is absent or empty.
func RestartedAt(task *gputaskv1.GPUTask) (at time.Time, ok bool, err error) {
	v := task.Annotations[gputaskv1.AnnotationRestartedAt]
	if v == "" {
		return time.Time{}, false, nil
	}
	at, err = time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("annotation %s: %q is not an RFC 3339 time: %w", gputaskv1.AnnotationRestartedAt, v, err)
	}
	// Creation and reschedule times keep whole seconds only; a fractional
	// request would make a pod created in the same second look older than
	// the request forever.
	return at.Truncate(time.Second), true, nil
}

// ForceDeleteMargin is how long past the end of its grace period a pod
// deleted because its node was lost or NotReady may stay terminating before
// it is removed without the kubelet's confirmation.
const ForceDeleteMargin = 30 * time.Second

// ForceDelete reports whether pod, deleted for reason and still terminating,
// should be removed at once. Only a pod whose node is gone or still not Ready
// qualifies: no kubelet will confirm its end, and the task would wait, holding
// one of the concurrent reschedules, until the node came back. A pod on a
// healthy node is always left to terminate on its own.
func ForceDelete(pod *corev1.Pod, node *corev1.Node, reason string, now time.Time) bool {
	if pod == nil || pod.DeletionTimestamp == nil {
		return false
	}
	if reason != ReasonNodeLost && reason != ReasonNodeNotReady {
		return false
	}
	if now.Before(pod.DeletionTimestamp.Add(ForceDeleteMargin)) {
		return false
	}
	return node == nil || nodeNotReady(node)
}

// DeleteInterrupted reports whether pod was deleted with a grace period of 0
// and is still stored. The API server deletes in two steps, setting
// deletionTimestamp and then removing the object, and the client that asked
// (the controller, killed or cut off between them) went away in between.
// Only the kubelet of its node or the pod garbage collector of
// kube-controller-manager would finish it; a second delete does, and the
// API server accepts it for this very case. A pod that still has finalizers
// is not interrupted: another controller (Kueue's, say) holds it until it
// has done its part, and a second delete would change nothing.
func DeleteInterrupted(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp != nil && pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds == 0 &&
		len(pod.Finalizers) == 0
}
