package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/metrics"
	"github.com/gputask/gputask-controller/pkg/reschedule"
	"github.com/gputask/gputask-controller/pkg/taskstatus"
)

// replacement is a pod the controller is replacing: deleted, waiting until it
// is gone, then created again. It lives in memory only; after a restart of
// the controller a missing pod is simply created, without being counted.
type replacement struct {
	oldPodUID types.UID
	// reason is a reschedule reason, or reschedule.ReasonRestart.
	reason string
	// created is set once the new pod exists and only the status write that
	// counts the replacement is left.
	created bool
	// counted is status.reschedules before this replacement, and the time
	// the new pod was created.
	counted taskstatus.Replacement
}

// replacementReason tells whether pod must be replaced now: first a restart
// the user asked for, then the rescheduling cases. It schedules the next look
// for the time-based cases that are not due yet.
func (c *Controller) replacementReason(ctx context.Context, key cache.ObjectName, task *gputaskv1.GPUTask, pod *corev1.Pod) (string, bool) {
	now := c.clock.Now()
	verdict, err := reschedule.Restart(task, pod, now)
	if err != nil {
		c.warnBadRestartedAt(ctx, key, task, err)
	} else {
		c.update(key, func(s *taskState) { s.warnedRestartedAt = "" })
	}
	if verdict.Replace {
		return reschedule.ReasonRestart, true
	}
	if verdict.Wait > 0 {
		c.workqueue.AddAfter(key, verdict.Wait+time.Second)
	}

	node := c.nodeOf(pod)
	seen := c.seePending(key, pod, now)
	if ok, reason := reschedule.Decide(task, pod, node, now, c.rescheduling, seen); ok {
		klog.FromContext(ctx).V(4).Info("Pod must be placed again", "pod", klog.KObj(pod), "podUID", pod.UID,
			"phase", pod.Status.Phase, "node", pod.Spec.NodeName, "nodeKnown", node != nil, "reason", reason)
		return reason, true
	}
	if next := reschedule.NextCheck(task, pod, node, now, c.rescheduling, seen); next > 0 {
		c.workqueue.AddAfter(key, next+time.Second)
	}
	return "", false
}

// seePending remembers, of the task's pod, whether it was held by a
// scheduling gate and when it was first seen unschedulable after the gate
// was lifted, so that the pending timeout runs from then rather than from
// the pod's creation (Seen).
func (c *Controller) seePending(key cache.ObjectName, pod *corev1.Pod, now time.Time) reschedule.Seen {
	var seen reschedule.Seen
	gated := len(pod.Spec.SchedulingGates) > 0
	if !gated {
		c.mu.Lock()
		s := c.state[key]
		watched := s != nil && s.gatedPod != ""
		c.mu.Unlock()
		if !watched {
			return seen
		}
	}
	c.update(key, func(s *taskState) {
		if s.gatedPod != pod.UID {
			s.gatedPod, s.unschedulableSince = "", time.Time{}
		}
		switch {
		case gated:
			s.gatedPod, s.unschedulableSince = pod.UID, time.Time{}
		case s.gatedPod == "":
		case !reschedule.Unschedulable(pod):
			if pod.Spec.NodeName != "" {
				// Placed: nothing is left to time.
				s.gatedPod, s.unschedulableSince = "", time.Time{}
			}
		case s.unschedulableSince.IsZero():
			s.unschedulableSince = now
		}
		seen.UnschedulableSince = s.unschedulableSince
	})
	return seen
}

func (c *Controller) nodeOf(pod *corev1.Pod) *corev1.Node {
	if pod.Spec.NodeName == "" {
		return nil
	}
	node, err := c.nodesLister.Get(pod.Spec.NodeName)
	if err != nil {
		return nil
	}
	return node
}

// startReplacement deletes the pod and leaves the creation of the new one to
// a later sync, after the old one is gone: the name is reused, and a pod
// that still holds its GPUs must not be doubled.
func (c *Controller) startReplacement(ctx context.Context, key cache.ObjectName, task *gputaskv1.GPUTask, pod *corev1.Pod, reason string, view taskstatus.View) error {
	logger := klog.FromContext(ctx)
	if !c.reserveReplacement(key, pod.UID, reason) {
		logger.V(2).Info("Too many pods being replaced; waiting", "pod", klog.KObj(pod), "reason", reason, "limit", c.opts.MaxConcurrentReschedules)
		c.workqueue.AddAfter(key, replacementPoll)
		return c.applyStatus(ctx, task, c.status(task, view))
	}

	uid := pod.UID
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
	if reason == reschedule.ReasonNodeLost {
		// The node object is gone, so no kubelet will ever confirm the
		// pod's end and it would stay terminating until the pod garbage
		// collector notices. Removing it at once is what that collector
		// does too.
		opts.GracePeriodSeconds = ptr.To[int64](0)
	}
	err := c.kubeclientset.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, opts)
	switch {
	case err == nil, apierrors.IsNotFound(err):
	case apierrors.IsConflict(err):
		// The pod of that name is not the one we judged; judge again.
		c.dropReplacement(key)
		c.workqueue.AddAfter(key, replacementPoll)
		return nil
	default:
		c.dropReplacement(key)
		c.recorder.Eventf(task, corev1.EventTypeWarning, gputaskv1.ReasonFailedDelete, "Error deleting pod %s to replace it (%s): %v", pod.Name, reason, err)
		return fmt.Errorf("deleting pod %s to replace it: %w", klog.KObj(pod), err)
	}
	logger.Info("Deleted pod to replace it", "pod", klog.KObj(pod), "reason", reason)
	c.recorder.Eventf(task, corev1.EventTypeNormal, gputaskv1.ReasonRescheduling, "Deleted pod %s to replace it: %s", pod.Name, reason)
	c.workqueue.AddAfter(key, replacementPoll)
	return c.applyStatus(ctx, task, c.status(task, view))
}

// forceDeleteIfUnreachable removes a pod that was deleted because its node
// was lost or NotReady and that outlived its grace period there: no kubelet
// will confirm its end, and the task would otherwise wait for the node.
func (c *Controller) forceDeleteIfUnreachable(ctx context.Context, task *gputaskv1.GPUTask, pod *corev1.Pod, reason string) error {
	if !reschedule.ForceDelete(pod, c.nodeOf(pod), reason, c.clock.Now()) {
		return nil
	}
	uid := pod.UID
	err := c.kubeclientset.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		Preconditions:      &metav1.Preconditions{UID: &uid},
		GracePeriodSeconds: ptr.To[int64](0),
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("force deleting pod %s on unreachable node %s: %w", klog.KObj(pod), pod.Spec.NodeName, err)
	}
	klog.FromContext(ctx).Info("Force deleted pod on unreachable node", "pod", klog.KObj(pod), "node", pod.Spec.NodeName)
	c.recorder.Eventf(task, corev1.EventTypeWarning, gputaskv1.ReasonForceDeleted,
		"Pod %s on unreachable node %s outlived its grace period; deleted it without waiting for the kubelet", pod.Name, pod.Spec.NodeName)
	return nil
}

func (c *Controller) recordReplacement(task *gputaskv1.GPUTask, r *replacement, pod *corev1.Pod) {
	metrics.Reschedules.WithLabelValues(r.reason).Inc()
	if r.reason == reschedule.ReasonRestart {
		c.recorder.Eventf(task, corev1.EventTypeNormal, gputaskv1.ReasonRestarted, "Restarted: replaced the pod with %s", pod.Name)
		return
	}
	c.recorder.Eventf(task, corev1.EventTypeNormal, gputaskv1.ReasonRescheduled, "Rescheduled (%s): replaced the pod with %s", r.reason, pod.Name)
}

// reserveReplacement records a replacement of pod for key, unless
// MaxConcurrentReschedules tasks are already waiting for their new pod.
func (c *Controller) reserveReplacement(key cache.ObjectName, podUID types.UID, reason string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	inFlight := 0
	for _, s := range c.state {
		if s.replacement != nil && !s.replacement.created {
			inFlight++
		}
	}
	if inFlight >= c.opts.MaxConcurrentReschedules {
		return false
	}
	s := c.state[key]
	if s == nil {
		s = &taskState{}
		c.state[key] = s
	}
	s.replacement = &replacement{oldPodUID: podUID, reason: reason}
	return true
}

func (c *Controller) replacementFor(key cache.ObjectName) *replacement {
	var cp *replacement
	c.update(key, func(s *taskState) {
		if s.replacement != nil {
			r := *s.replacement
			cp = &r
		}
	})
	return cp
}

// markReplacementCreated flags the replacement of key as created and returns
// it, or nil when the pod was not being replaced.
func (c *Controller) markReplacementCreated(key cache.ObjectName, task *gputaskv1.GPUTask) *replacement {
	var cp *replacement
	c.update(key, func(s *taskState) {
		r := s.replacement
		if r == nil {
			return
		}
		if !r.created {
			r.created = true
			r.counted = taskstatus.Replacement{CountedFrom: task.Status.Reschedules, At: metav1.NewTime(c.clock.Now())}
		}
		out := *r
		cp = &out
	})
	return cp
}

// noteDisruption records, once per pod, that someone else evicted or
// preempted the task's pod, with an event that names who and why, so that
// the pod made in its place is counted in status.reschedules like one this
// controller replaced.
func (c *Controller) noteDisruption(key cache.ObjectName, task *gputaskv1.GPUTask, pod *corev1.Pod, d reschedule.Disruption) {
	noted := false
	c.update(key, func(s *taskState) {
		if s.replacement == nil {
			s.replacement = &replacement{oldPodUID: pod.UID, reason: d.RescheduleReason()}
			noted = true
		}
	})
	if noted {
		c.recorder.Eventf(task, corev1.EventTypeWarning, d.RescheduleReason(), "Pod %s was %s by %s (%s): %s",
			pod.Name, strings.ToLower(d.RescheduleReason()), d.By, d.Reason, gputaskv1.TruncateMessage(d.Message, 512))
	}
}

// finishReplacement forgets the replacement of key once the status counts it.
func (c *Controller) finishReplacement(key cache.ObjectName) {
	c.dropReplacement(key)
}

func (c *Controller) dropReplacement(key cache.ObjectName) {
	c.update(key, func(s *taskState) { s.replacement = nil })
}

func (c *Controller) warnBadRestartedAt(ctx context.Context, key cache.ObjectName, task *gputaskv1.GPUTask, err error) {
	value := task.Annotations[gputaskv1.AnnotationRestartedAt]
	seen := false
	c.update(key, func(s *taskState) {
		seen = s.warnedRestartedAt == value
		s.warnedRestartedAt = value
	})
	if seen {
		return
	}
	klog.FromContext(ctx).Info("Ignoring restart request", "err", err)
	c.recorder.Eventf(task, corev1.EventTypeWarning, gputaskv1.ReasonInvalidRestartedAt, "Ignoring the restart request: %v", err)
}
