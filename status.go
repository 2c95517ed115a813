package main

import (
	"context"
	"fmt"
	"regexp"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/reschedule"
)

// warnOnTransition records a Warning event when the condition is not already
// False with this reason and message, so that a standing problem costs one
// event rather than one per sync.
func (c *Controller) warnOnTransition(task *gputaskv1.GPUTask, condType, condReason, msg, eventReason string) {
	if cond := meta.FindStatusCondition(task.Status.Conditions, condType); cond != nil &&
		cond.Status == metav1.ConditionFalse && cond.Reason == condReason && cond.Message == msg {
		return
	}
	c.recorder.Event(task, corev1.EventTypeWarning, eventReason, msg)
}

// updateStatus writes status through the status subresource when it differs
// from what the task has.
func (c *Controller) updateStatus(ctx context.Context, task *gputaskv1.GPUTask, status gputaskv1.GPUTaskStatus) error {
	if equality.Semantic.DeepEqual(task.Status, status) {
		return nil
	}
	updated := task.DeepCopy()
	updated.Status = status
	if _, err := c.gputaskclientset.GputaskV1().GPUTasks(task.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating status of gputask %s: %w", klog.KObj(task), err)
	}
	return nil
}

// statusView is what the status is computed from.
type statusView struct {
	// pod is the task's pod, nil if there is none or it is not the task's.
	pod *corev1.Pod
	// conflict, when set, is why the pod of the task's name is not the task's.
	conflict string
	specErr  error
	// replaced, when set, is a completed replacement to count.
	replaced *replacement
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
)

// computeStatus returns the task's status for view. It starts from the
// current status so that an unchanged status compares equal and costs no
// write; meta.SetStatusCondition keeps lastTransitionTime unless the status
// of a condition flips.
func (c *Controller) computeStatus(task *gputaskv1.GPUTask, view statusView) gputaskv1.GPUTaskStatus {
	now := metav1.NewTime(c.clock.Now())
	status := *task.Status.DeepCopy()
	status.ObservedGeneration = task.Generation
	status.Phase = taskPhase(view.pod)
	status.PodName, status.NodeName = "", ""
	if view.pod != nil {
		status.PodName = view.pod.Name
		status.NodeName = view.pod.Spec.NodeName
	}
	if r := view.replaced; r != nil {
		status.Reschedules = max(status.Reschedules, r.countedFrom+1)
		at := r.at
		status.LastRescheduleTime = &at
	}
	acknowledgeRestart(task, view.pod, &status)

	set := func(condType string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{
			Type: condType, Status: s, Reason: reason, Message: msg,
			ObservedGeneration: task.Generation, LastTransitionTime: now,
		})
	}
	if view.specErr != nil {
		set(gputaskv1.ConditionSpecValid, metav1.ConditionFalse, ReasonInvalidSpec, view.specErr.Error())
	} else {
		set(gputaskv1.ConditionSpecValid, metav1.ConditionTrue, condReasonValid, "")
	}

	switch {
	case view.conflict != "":
		set(gputaskv1.ConditionPodOwned, metav1.ConditionFalse, ReasonPodConflict, view.conflict)
		set(gputaskv1.ConditionScheduled, metav1.ConditionFalse, ReasonPodConflict, view.conflict)
		set(gputaskv1.ConditionReady, metav1.ConditionFalse, ReasonPodConflict, view.conflict)
	case view.pod == nil:
		set(gputaskv1.ConditionPodOwned, metav1.ConditionUnknown, condReasonPodNotCreated, "")
		set(gputaskv1.ConditionScheduled, metav1.ConditionFalse, condReasonPodNotCreated, "")
		set(gputaskv1.ConditionReady, metav1.ConditionFalse, condReasonPodNotCreated, "")
	default:
		set(gputaskv1.ConditionPodOwned, metav1.ConditionTrue, condReasonPodControlled, "")
		s, reason, msg := mirrorPodCondition(view.pod, corev1.PodScheduled, condReasonPodScheduled, condReasonPodUnscheduled)
		if s != metav1.ConditionTrue && view.pod.Spec.NodeName != "" {
			// A pod bound without the scheduler has no PodScheduled condition.
			s, reason, msg = metav1.ConditionTrue, condReasonPodScheduled, ""
		}
		set(gputaskv1.ConditionScheduled, s, reason, msg)
		s, reason, msg = mirrorPodCondition(view.pod, corev1.PodReady, condReasonPodReady, condReasonPodNotReady)
		set(gputaskv1.ConditionReady, s, reason, msg)
	}
	return status
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

// taskPhase derives the task's phase from its pod.
func taskPhase(pod *corev1.Pod) gputaskv1.GPUTaskPhase {
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

// conditionReason is the pattern metav1.Condition's reason must match; a pod
// condition's reason is free text and is only copied when it fits.
var conditionReason = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// maxConditionMessage is metav1.Condition's message limit.
const maxConditionMessage = 32768

// mirrorPodCondition returns the pod condition of type t as a task condition:
// its status, its reason (or a default when empty or not CamelCase) and its
// message, such as the scheduler's "0/2 nodes are available: ...".
func mirrorPodCondition(pod *corev1.Pod, t corev1.PodConditionType, trueReason, falseReason string) (metav1.ConditionStatus, string, string) {
	for _, cond := range pod.Status.Conditions {
		if cond.Type != t {
			continue
		}
		s := metav1.ConditionStatus(cond.Status)
		reason := cond.Reason
		if !conditionReason.MatchString(reason) || len(reason) > 1024 {
			reason = falseReason
			if s == metav1.ConditionTrue {
				reason = trueReason
			}
		}
		msg := cond.Message
		if len(msg) > maxConditionMessage {
			msg = msg[:maxConditionMessage]
		}
		return s, reason, msg
	}
	return metav1.ConditionFalse, falseReason, ""
}
