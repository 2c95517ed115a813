package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/podspec"
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
	key := cache.MetaObjectToName(task)
	if c.cacheBehindStatusWrite(key, task.ResourceVersion) {
		// The cache still shows the task as it was before this controller's
		// last status write: a write from it would be refused with a 409.
		// That write's update event brings the task back here, newer.
		klog.FromContext(ctx).V(4).Info("Status write waits for the cache to show the last one")
		return nil
	}
	if !c.statusWriteDue(key) {
		return errStatusDeferred
	}
	updated := task.DeepCopy()
	updated.Status = status
	out, err := c.gputaskclientset.GputaskV1().GPUTasks(task.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating status of gputask %s: %w", klog.KObj(task), err)
	}
	if out.ResourceVersion != task.ResourceVersion {
		// A write the API server found to change nothing keeps the version
		// and sends no event: then there is nothing to wait for.
		c.mu.Lock()
		c.statusWrittenFrom[key] = task.ResourceVersion
		c.mu.Unlock()
	}
	return nil
}

// errStatusDeferred ends a sync whose status write waits for its turn
// within the status client's rate limit. The key is already queued again
// for that time; a worker does not sit in the client's rate limiter
// meanwhile, where it would hold up the pod creates of other tasks.
var errStatusDeferred = errors.New("status write deferred to its turn within the client rate limit")

// statusWriteDue reports whether the task's status write may go now. When
// the status writes are at their rate limit it reserves the task's turn,
// once, and queues the key for then.
func (c *Controller) statusWriteDue(key cache.ObjectName) bool {
	if c.statusLimiter == nil {
		return true
	}
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	at, reserved := c.statusWriteAt[key]
	if !reserved {
		at = now.Add(c.statusLimiter.ReserveN(now, 1).DelayFrom(now))
	}
	if !now.Before(at) {
		delete(c.statusWriteAt, key)
		return true
	}
	c.statusWriteAt[key] = at
	c.workqueue.AddAfter(key, at.Sub(now))
	return false
}

// cacheBehindStatusWrite reports whether resourceVersion, the task's in the
// cache, is the one this controller's last status write of the task
// replaced. A cache that shows any other version has caught up, and the
// note goes.
func (c *Controller) cacheBehindStatusWrite(key cache.ObjectName, resourceVersion string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	from, ok := c.statusWrittenFrom[key]
	if !ok {
		return false
	}
	if from == resourceVersion {
		return true
	}
	delete(c.statusWrittenFrom, key)
	return false
}

// statusView is what the status is computed from.
type statusView struct {
	// pod is the task's pod, nil if there is none or it is not the task's.
	pod *corev1.Pod
	// conflict, when set, is why the pod of the task's name is not the task's.
	conflict string
	specErr  error
	// stale is the first field where the pod differs from the pod the spec
	// asks for now; empty when it is up to date.
	stale string
	// createErr, when set, is the API server's refusal of the task's pod.
	createErr error
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
	condReasonPodMatchesSpec = "PodMatchesSpec"
	condReasonSpecChanged    = "SpecChanged"
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
	prevNode, prevModel := status.NodeName, status.GPUModel
	status.PodName, status.NodeName, status.GPUModel = "", "", ""
	if view.pod != nil {
		status.PodName = view.pod.Name
		status.NodeName = view.pod.Spec.NodeName
		status.GPUModel = c.gpuModelOf(view.pod)
		if status.GPUModel == "" && status.NodeName == prevNode {
			// The node left the cache; the pod still runs where it ran.
			status.GPUModel = prevModel
		}
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
	case view.createErr != nil:
		reason, msg := podCreateFailure(view.createErr)
		set(gputaskv1.ConditionPodCreateFailed, metav1.ConditionTrue, reason, msg)
	case view.pod != nil:
		meta.RemoveStatusCondition(&status.Conditions, gputaskv1.ConditionPodCreateFailed)
	}

	switch {
	case view.conflict != "":
		set(gputaskv1.ConditionPodOwned, metav1.ConditionFalse, ReasonPodConflict, view.conflict)
		set(gputaskv1.ConditionScheduled, metav1.ConditionFalse, ReasonPodConflict, view.conflict)
		set(gputaskv1.ConditionReady, metav1.ConditionFalse, ReasonPodConflict, view.conflict)
		meta.RemoveStatusCondition(&status.Conditions, gputaskv1.ConditionPodUpToDate)
	case view.pod == nil:
		set(gputaskv1.ConditionPodOwned, metav1.ConditionUnknown, condReasonPodNotCreated, "")
		set(gputaskv1.ConditionScheduled, metav1.ConditionFalse, condReasonPodNotCreated, "")
		set(gputaskv1.ConditionReady, metav1.ConditionFalse, condReasonPodNotCreated, "")
		meta.RemoveStatusCondition(&status.Conditions, gputaskv1.ConditionPodUpToDate)
	default:
		set(gputaskv1.ConditionPodOwned, metav1.ConditionTrue, condReasonPodControlled, "")
		s, reason, msg := mirrorPodCondition(view.pod, corev1.PodScheduled, condReasonPodScheduled, condReasonPodUnscheduled)
		if s != metav1.ConditionTrue && view.pod.Spec.NodeName != "" {
			// A pod bound without the scheduler has no PodScheduled condition.
			s, reason, msg = metav1.ConditionTrue, condReasonPodScheduled, ""
		}
		if s == metav1.ConditionFalse && strings.Contains(msg, "untolerated taint") {
			msg = c.withUntoleratedTaints(task, view.pod, msg)
		}
		set(gputaskv1.ConditionScheduled, s, reason, msg)
		s, reason, msg = mirrorPodCondition(view.pod, corev1.PodReady, condReasonPodReady, condReasonPodNotReady)
		set(gputaskv1.ConditionReady, s, reason, msg)
		switch {
		case view.specErr != nil:
			set(gputaskv1.ConditionPodUpToDate, metav1.ConditionUnknown, ReasonInvalidSpec, "the spec cannot be turned into a pod")
		case view.stale != "":
			set(gputaskv1.ConditionPodUpToDate, metav1.ConditionFalse, condReasonSpecChanged, fmt.Sprintf(
				"the running pod differs from the spec at %s; set the annotation %s to replace it", view.stale, gputaskv1.AnnotationRestartedAt))
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
func (c *Controller) withUntoleratedTaints(task *gputaskv1.GPUTask, pod *corev1.Pod, msg string) string {
	nodes, err := c.nodesLister.List(labels.Everything())
	if err != nil {
		return msg
	}
	taints := podspec.UntoleratedTaints(pod, nodes, c.opts.GPULabelKey, podspec.Models(&task.Spec), c.opts.GPUResourceName)
	if len(taints) == 0 {
		return msg
	}
	return fmt.Sprintf("%s Untolerated taints on the task's GPU nodes: %s.", msg, strings.Join(taints, ", "))
}

// gpuModelOf is the GPU model label of the pod's node, so that a task with
// gpuAlternatives shows which model it got.
func (c *Controller) gpuModelOf(pod *corev1.Pod) string {
	if node := c.nodeOf(pod); node != nil {
		return node.Labels[c.opts.GPULabelKey]
	}
	return ""
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
