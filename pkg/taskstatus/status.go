// Package taskstatus computes a GPUTask's status from its pod, as a pure
// function of what the controller saw. That is the phase, the pod's
// conditions mirrored, the controller's own conditions, and when a write
// may wait for the pod to settle. The controller writes what it returns.
package taskstatus

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/reschedule"
)

// View is what the status is computed from.
type View struct {
	// Pod is the task's pod, nil if there is none or it is not the task's.
	Pod *corev1.Pod
	// GPUModel is the GPU model label of the pod's node, empty when the
	// node is not known, so that a task with gpuAlternatives shows which
	// model it got.
	GPUModel string
	// Conflict, when set, is why the pod of the task's name is not the task's.
	Conflict string
	// Devices are the devices allocated to the pod's GPU claim in DRA mode.
	Devices []string
	SpecErr error
	// Stale is the first field where the pod differs from the pod the spec
	// asks for now; empty when it is up to date.
	Stale string
	// CreateErr, when set, is the API server's refusal of the task's pod.
	CreateErr error
	// Replaced, when set, is a completed replacement to count.
	Replaced *Replacement
	// Queue, when set, is the queueing system's own reason and message for
	// a pod that waits for admission (Kueue's, from the pod's Workload).
	// The Scheduled condition carries them while the pod is not scheduled.
	Queue *QueueWait
	// UntoleratedTaints, when set, lists the taints of the task's GPU nodes
	// that the pod does not tolerate; it is called only when the scheduler
	// reports untolerated taints.
	UntoleratedTaints func() []string
}

// QueueWait is why a queueing system keeps a pod waiting, in its words.
type QueueWait struct {
	Reason, Message string
}

// Replacement is a completed replacement of the task's pod. CountedFrom is
// status.reschedules before it: writing CountedFrom+1 and At, rather than
// adding one to whatever the status holds, keeps a retried status write from
// counting the same replacement twice.
type Replacement struct {
	CountedFrom int32
	At          metav1.Time
}

// Condition reasons the controller sets itself; mirrored conditions keep the
// pod's reasons.
const (
	condReasonValid          = "Valid"
	condReasonPodControlled  = "PodControlled"
	condReasonPodNotCreated  = "PodNotCreated"
	condReasonPodScheduled   = "PodScheduled"
	condReasonPodUnscheduled = "PodNotScheduled"
	condReasonPodReady       = "PodReady"
	condReasonPodNotReady    = "PodNotReady"
	condReasonPodMatchesSpec = "PodMatchesSpec"
	condReasonSpecChanged    = "SpecChanged"
)

// Compute returns the task's status for view. It starts from the
// current status so that an unchanged status compares equal and costs no
// write; meta.SetStatusCondition keeps lastTransitionTime unless the status
// of a condition flips.
func Compute(task *gputaskv1.GPUTask, view View, at time.Time) gputaskv1.GPUTaskStatus {
	now := metav1.NewTime(at)
	status := *task.Status.DeepCopy()
	status.ObservedGeneration = task.Generation
	status.Phase = Phase(view.Pod)
	prevNode, prevModel := status.NodeName, status.GPUModel
	status.PodName, status.NodeName, status.GPUModel, status.Devices = "", "", "", nil
	if view.Pod != nil {
		status.PodName = view.Pod.Name
		status.Devices = view.Devices
		status.NodeName = view.Pod.Spec.NodeName
		status.GPUModel = view.GPUModel
		if status.GPUModel == "" && status.NodeName == prevNode {
			// The node left the cache; the pod still runs where it ran.
			status.GPUModel = prevModel
		}
	}
	if r := view.Replaced; r != nil {
		status.Reschedules = max(status.Reschedules, r.CountedFrom+1)
		at := r.At
		status.LastRescheduleTime = &at
	}
	acknowledgeRestart(task, view.Pod, &status)

	set := func(condType string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{
			Type: condType, Status: s, Reason: reason, Message: msg,
			ObservedGeneration: task.Generation, LastTransitionTime: now,
		})
	}
	if view.SpecErr != nil {
		set(gputaskv1.ConditionSpecValid, metav1.ConditionFalse, gputaskv1.ReasonInvalidSpec, view.SpecErr.Error())
	} else {
		set(gputaskv1.ConditionSpecValid, metav1.ConditionTrue, condReasonValid, "")
	}

	switch {
	case view.CreateErr != nil:
		reason, msg := PodCreateFailure(view.CreateErr)
		set(gputaskv1.ConditionPodCreateFailed, metav1.ConditionTrue, reason, msg)
	case view.Pod != nil:
		meta.RemoveStatusCondition(&status.Conditions, gputaskv1.ConditionPodCreateFailed)
	}

	switch {
	case view.Conflict != "":
		set(gputaskv1.ConditionPodOwned, metav1.ConditionFalse, gputaskv1.ReasonPodConflict, view.Conflict)
		set(gputaskv1.ConditionScheduled, metav1.ConditionFalse, gputaskv1.ReasonPodConflict, view.Conflict)
		set(gputaskv1.ConditionReady, metav1.ConditionFalse, gputaskv1.ReasonPodConflict, view.Conflict)
		meta.RemoveStatusCondition(&status.Conditions, gputaskv1.ConditionPodUpToDate)
	case view.Pod == nil:
		set(gputaskv1.ConditionPodOwned, metav1.ConditionUnknown, condReasonPodNotCreated, "")
		set(gputaskv1.ConditionScheduled, metav1.ConditionFalse, condReasonPodNotCreated, "")
		set(gputaskv1.ConditionReady, metav1.ConditionFalse, condReasonPodNotCreated, "")
		meta.RemoveStatusCondition(&status.Conditions, gputaskv1.ConditionPodUpToDate)
	default:
		set(gputaskv1.ConditionPodOwned, metav1.ConditionTrue, condReasonPodControlled, "")
		s, reason, msg := MirrorPodCondition(view.Pod, corev1.PodScheduled, condReasonPodScheduled, condReasonPodUnscheduled)
		if s != metav1.ConditionTrue && view.Pod.Spec.NodeName != "" {
			// A pod bound without the scheduler has no PodScheduled condition.
			s, reason, msg = metav1.ConditionTrue, condReasonPodScheduled, ""
		}
		if s == metav1.ConditionFalse && strings.Contains(msg, "untolerated taint") {
			msg = withUntoleratedTaints(msg, view.UntoleratedTaints)
		}
		if q := view.Queue; q != nil && s != metav1.ConditionTrue && validReason(q.Reason) {
			reason, msg = q.Reason, gputaskv1.TruncateMessage(q.Message, maxConditionMessage)
		}
		set(gputaskv1.ConditionScheduled, s, reason, msg)
		s, reason, msg = MirrorPodCondition(view.Pod, corev1.PodReady, condReasonPodReady, condReasonPodNotReady)
		set(gputaskv1.ConditionReady, s, reason, msg)
		switch {
		case view.SpecErr != nil:
			set(gputaskv1.ConditionPodUpToDate, metav1.ConditionUnknown, gputaskv1.ReasonInvalidSpec, "the spec cannot be turned into a pod")
		case view.Stale != "":
			set(gputaskv1.ConditionPodUpToDate, metav1.ConditionFalse, condReasonSpecChanged, fmt.Sprintf(
				"the running pod differs from the spec at %s; set the annotation %s to replace it", view.Stale, gputaskv1.AnnotationRestartedAt))
		default:
			set(gputaskv1.ConditionPodUpToDate, metav1.ConditionTrue, condReasonPodMatchesSpec, "")
		}
	}
	return status
}

// withUntoleratedTaints adds to the scheduler's message, which only says
// that nodes "had untolerated taint(s)", which taints of the task's GPU nodes
// the pod does not tolerate, such as a GPU taint with --gpu-taint-toleration
// turned off.
func withUntoleratedTaints(msg string, untolerated func() []string) string {
	if untolerated == nil {
		return msg
	}
	taints := untolerated()
	if len(taints) == 0 {
		return msg
	}
	return fmt.Sprintf("%s Untolerated taints on the task's GPU nodes: %s.", msg, strings.Join(taints, ", "))
}

// acknowledgeRestart marks a restart request as done when the pod is already
// at least as new as the request (created after it, or the task was created
// with the annotation): the set controller waits for lastRescheduleTime to
// reach the request, and there is no pod to replace.
func acknowledgeRestart(task *gputaskv1.GPUTask, pod *corev1.Pod, status *gputaskv1.GPUTaskStatus) {
	at, ok, err := reschedule.RestartedAt(task)
	if err != nil || !ok || pod == nil || pod.CreationTimestamp.IsZero() || pod.CreationTimestamp.Time.Before(at) {
		return
	}
	if last := status.LastRescheduleTime; last != nil && !last.Time.Before(at) {
		return
	}
	created := pod.CreationTimestamp
	status.LastRescheduleTime = &created
}

// Phase derives the task's phase from its pod.
func Phase(pod *corev1.Pod) gputaskv1.GPUTaskPhase {
	if pod == nil {
		return gputaskv1.GPUTaskPending
	}
	switch pod.Status.Phase {
	case corev1.PodRunning:
		return gputaskv1.GPUTaskRunning
	case corev1.PodSucceeded:
		return gputaskv1.GPUTaskSucceeded
	case corev1.PodFailed:
		return gputaskv1.GPUTaskFailed
	}
	if pod.Spec.NodeName != "" {
		return gputaskv1.GPUTaskScheduled
	}
	return gputaskv1.GPUTaskPending
}

// maxConditionMessage is metav1.Condition's message limit.
const maxConditionMessage = 32768

// validReason reports whether reason is what metav1.Condition accepts; a
// pod condition's reason is free text and is only copied when it fits.
func validReason(reason string) bool {
	probe := metav1.Condition{Type: "Probe", Status: metav1.ConditionTrue, Reason: reason, LastTransitionTime: metav1.Unix(1, 0)}
	return len(metav1validation.ValidateConditions([]metav1.Condition{probe}, field.NewPath("c"))) == 0
}

// MirrorPodCondition returns the pod condition of type t as a task condition:
// its status, its reason (or a default when empty or not CamelCase) and its
// message, such as the scheduler's "0/2 nodes are available: ...".
func MirrorPodCondition(pod *corev1.Pod, t corev1.PodConditionType, trueReason, falseReason string) (metav1.ConditionStatus, string, string) {
	for _, cond := range pod.Status.Conditions {
		if cond.Type != t {
			continue
		}
		s := metav1.ConditionStatus(cond.Status)
		reason := cond.Reason
		if !validReason(reason) {
			reason = falseReason
			if s == metav1.ConditionTrue {
				reason = trueReason
			}
		}
		return s, reason, gputaskv1.TruncateMessage(cond.Message, maxConditionMessage)
	}
	return metav1.ConditionFalse, falseReason, ""
}
