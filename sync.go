package main

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/gputask/gputask-controller/pkg/podspec"
	"github.com/gputask/gputask-controller/pkg/reschedule"
	"github.com/gputask/gputask-controller/pkg/taskplan"
)

// taskSync is one sync of a task: what was read, and the plan made from
// it. The plan is final once made; what carrying it out finds out is in the
// sync's outcome.
type taskSync struct {
	key   cache.ObjectName
	input taskplan.Input
	// task is nil when the task is gone; pod is the pod of its name in the
	// cache, nil when there is none.
	task *gputaskv1.GPUTask
	pod  *corev1.Pod
	plan taskplan.Plan
	// state is the copy of what the controller remembers of the task that
	// the sync stores at its end; dealtWith is a deleted task's UID that
	// need not be remembered any longer.
	state     taskState
	dealtWith types.UID
}

// outcome is what carrying out a plan found out, starting from what the
// plan itself says: a create can fail, a delete can meet a newer pod, a
// read can name a drift, and the status write can wait.
type outcome struct {
	// status is how the status is written: the plan's, unless acting
	// showed that another write, or none, is due.
	status taskplan.StatusWrite
	// memory is what to remember of the task: the plan's, with the
	// replacement and drift that acting recorded.
	memory taskplan.Memory
	// after, when > 0, is when to look at the task again: the earliest of
	// the plan's time and those that acting asked for.
	after time.Duration

	// mirrored is the task's pod that the status shows, the pod in the
	// cache or the one this sync created, and node is the node it is
	// bound to, nil when it is unbound or not in the cache.
	mirrored *corev1.Pod
	node     *corev1.Node
	// conflict is why the pod of the task's name is not the task's.
	conflict string
	// stale is the first field where the pod differs from the spec.
	stale string
	// createErr is why the task's pod, or its GPU claim, was not created.
	createErr error
}

// lookAgainIn keeps the earliest of the times to look again: the queue
// keeps the earliest too.
func (o *outcome) lookAgainIn(d time.Duration) {
	if d > 0 && (o.after == 0 || d < o.after) {
		o.after = d
	}
}

// act carries out the plan, up to the status write. An error ends the sync
// before the status is written; a failed create is an outcome the status
// shows (createErr).
func (c *Controller) act(ctx context.Context, s *taskSync) (outcome, error) {
	p := &s.plan
	out := outcome{status: p.Status, memory: p.Memory, after: p.After}
	for _, e := range p.Events {
		c.recorder.Event(s.task, e.Type, e.Reason, e.Message)
	}
	switch {
	case s.task == nil:
		return out, c.deletePodOfGoneTask(ctx, s)
	case p.DeleteOrphan:
		if deleted, err := c.orphans.DeleteOrphan(ctx, s.key); err != nil || deleted {
			out.status = taskplan.NoStatus
			return out, err
		}
		out.conflict = p.Conflict
		return out, nil
	case p.Create:
		return out, c.createPod(ctx, s, &out)
	case s.task.DeletionTimestamp != nil:
		return out, nil
	case s.pod == nil:
		return out, c.carryMarks(ctx, s.task, nil, p)
	}

	out.mirrored, out.node, out.stale = s.pod, s.input.Node, p.Stale
	if p.ReadDrift != nil {
		if err := c.readDrift(ctx, s, &out); err != nil {
			return out, err
		}
	}
	if p.ForceDelete {
		if err := c.forceDelete(ctx, s.task, s.pod); err != nil {
			return out, err
		}
	}
	if p.CompleteDelete {
		if err := c.orphans.CompleteDelete(ctx, s.pod); err != nil {
			return out, err
		}
	}
	if err := c.carryMarks(ctx, s.task, s.pod, p); err != nil {
		return out, err
	}
	if p.Replace != "" {
		return out, c.replacePod(ctx, s, &out)
	}
	return out, nil
}

// createPod creates the task's pod, after its GPU claim template in DRA
// mode.
func (c *Controller) createPod(ctx context.Context, s *taskSync, out *outcome) error {
	task, desired := s.task, s.plan.Desired
	if s.plan.EnsureClaims {
		if err := c.templates.Ensure(ctx, task); err != nil {
			c.recorder.Eventf(task, corev1.EventTypeWarning, gputaskv1.ReasonFailedCreate, "Error preparing the GPU claim of pod %s: %v", desired.Name, err)
			out.createErr = fmt.Errorf("preparing the GPU claim of gputask %s: %w", s.key, err)
			out.status = taskplan.WriteStatus
			return nil
		}
	}
	podspec.Stamp(desired)
	c.expectations.ExpectCreations(s.key.String(), 1)
	created, err := c.kubeclientset.CoreV1().Pods(task.Namespace).Create(ctx, desired, metav1.CreateOptions{})
	if err != nil {
		// No pod is coming from this call, so nothing is to be observed.
		c.expectations.CreationObserved(s.key.String())
		if apierrors.IsAlreadyExists(err) {
			return c.createConflict(ctx, s, out)
		}
		c.recorder.Eventf(task, corev1.EventTypeWarning, gputaskv1.ReasonFailedCreate, "Error creating pod %s: %v", desired.Name, err)
		// Whatever the failure (a refusal, or a webhook or the API server
		// that is down or slow), the error makes the queue back off, at
		// most maxRetryDelay, and the condition tells the user why. It is
		// written once while its message stays the same.
		out.createErr = fmt.Errorf("creating pod for gputask %s: %w", s.key, err)
		out.status = taskplan.WriteStatus
		return nil
	}
	// No Normal event: one per task would cost as many writes as the pods,
	// on the client that creates them. The set's events count the tasks,
	// and this log line names the pod.
	klog.FromContext(ctx).V(2).Info("Created pod", "pod", klog.KObj(created))

	r := taskplan.Created(out.memory.Replacement, task, c.clock.Now())
	if r == nil {
		// The pod's add event brings the sync that writes the status, once
		// the pod has settled (taskstatus.SettleTime), so a throttled
		// status write never holds up this worker's next create.
		return nil
	}
	out.memory.Replacement = r
	metrics.Reschedules.WithLabelValues(r.Reason).Inc()
	if r.Reason == reschedule.ReasonRestart {
		c.recorder.Eventf(task, corev1.EventTypeNormal, gputaskv1.ReasonRestarted, "Restarted: replaced the pod with %s", created.Name)
	} else {
		c.recorder.Eventf(task, corev1.EventTypeNormal, gputaskv1.ReasonRescheduled, "Rescheduled (%s): replaced the pod with %s", r.Reason, created.Name)
	}
	out.mirrored, out.node, out.status = created, c.nodeOf(created), taskplan.WriteCounted
	return nil
}

// createConflict runs when the create said a pod of that name exists but
// the cache has none: either the cache lags behind a pod we made, or the
// pod lacks the gputask.io/task label and so is invisible to our informer.
// One live read tells which.
func (c *Controller) createConflict(ctx context.Context, s *taskSync, out *outcome) error {
	pod, err := c.kubeclientset.CoreV1().Pods(s.task.Namespace).Get(ctx, s.task.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading pod %s/%s after a create conflict: %w", s.task.Namespace, s.task.Name, err)
	}
	if taskplan.ControlledBy(pod, s.task) {
		// Ours, and the informer will deliver it.
		out.lookAgainIn(taskplan.ReplacementPoll)
		return nil
	}
	// A pod outside our informer sends us no events, so look again later.
	out.lookAgainIn(conflictRecheck)
	out.conflict, out.status = taskplan.ConflictMessage(pod), taskplan.WriteStatus
	return nil
}

// readDrift reads the pod whose hash differs from the spec's to name the
// first field that differs. A pod that differs in its hash only, as after
// an upgrade that builds pods differently, is stamped with the new hash, so
// that it is read once, not after every restart.
func (c *Controller) readDrift(ctx context.Context, s *taskSync, out *outcome) error {
	pod, check := s.pod, *s.plan.ReadDrift
	live, err := c.kubeclientset.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && live.UID != pod.UID) {
		// The pod is gone; its delete event brings the task back.
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading pod %s to compare it with the spec: %w", klog.KObj(pod), err)
	}
	check.Field = podspec.FirstDifference(s.plan.Desired, live)
	if check.Field == "" {
		if err := mergeAnnotations(ctx, c.kubeclientset.CoreV1().Pods(pod.Namespace), pod.Name, map[string]any{gputaskv1.AnnotationPodSpecHash: check.Want}); err != nil {
			return fmt.Errorf("recording the spec's hash on pod %s: %w", klog.KObj(pod), err)
		}
		return nil
	}
	out.memory.Drift, out.stale = &check, check.Field
	return nil
}

// replacePod deletes the pod and leaves the creation of the new one to a
// later sync, after the old one is gone: the name is reused, and a pod that
// still holds its GPUs must not be doubled.
func (c *Controller) replacePod(ctx context.Context, s *taskSync, out *outcome) error {
	logger := klog.FromContext(ctx)
	task, pod, reason := s.task, s.pod, s.plan.Replace
	logger.V(4).Info("Pod must be placed again", "pod", klog.KObj(pod), "podUID", pod.UID,
		"phase", pod.Status.Phase, "node", pod.Spec.NodeName, "nodeKnown", s.input.Node != nil, "reason", reason)
	r := &taskplan.Replacement{OldPodUID: pod.UID, Reason: reason, Failures: s.plan.Failures}
	if !c.reserveReplacement(s.key, r) {
		logger.V(2).Info("Too many pods being replaced; waiting", "pod", klog.KObj(pod), "reason", reason, "limit", c.opts.MaxConcurrentReschedules)
		return nil
	}
	out.memory.Replacement = r

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
		out.memory.Replacement, out.status = nil, taskplan.NoStatus
		return nil
	default:
		out.memory.Replacement = nil
		c.recorder.Eventf(task, corev1.EventTypeWarning, gputaskv1.ReasonFailedDelete, "Error deleting pod %s to replace it (%s): %v", pod.Name, reason, err)
		return fmt.Errorf("deleting pod %s to replace it: %w", klog.KObj(pod), err)
	}
	logger.Info("Deleted pod to replace it", "pod", klog.KObj(pod), "reason", reason)
	c.recorder.Eventf(task, corev1.EventTypeNormal, gputaskv1.ReasonRescheduling, "Deleted pod %s to replace it: %s", pod.Name, reason)
	return nil
}

// reserveReplacement records r for key, unless MaxConcurrentReschedules
// tasks are already waiting for their new pod. It writes the task's state
// at once, as the other tasks' syncs count it.
func (c *Controller) reserveReplacement(key cache.ObjectName, r *taskplan.Replacement) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	inFlight := 0
	for _, s := range c.state {
		if s.memory.Replacement != nil && !s.memory.Replacement.Created {
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
	s.memory.Replacement = r
	return true
}

// forceDelete removes a pod that was deleted because its node was lost or
// NotReady and that outlived its grace period there: no kubelet will
// confirm its end, and the task would otherwise wait for the node.
func (c *Controller) forceDelete(ctx context.Context, task *gputaskv1.GPUTask, pod *corev1.Pod) error {
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

// deletePodOfGoneTask deletes the pod of a task that is gone, if that pod
// is controlled by the very task that was deleted, or is an orphan.
func (c *Controller) deletePodOfGoneTask(ctx context.Context, s *taskSync) error {
	c.expectations.Delete(s.key.String())
	s.state.statusWrittenFrom, s.state.statusWriteAt = nil, time.Time{}
	if s.plan.DeleteOrphan {
		_, err := c.orphans.DeleteOrphan(ctx, s.key)
		return err
	}
	if err := c.orphans.DeletePodOf(ctx, s.key, s.plan.DeletePodOf); err != nil {
		return err
	}
	s.dealtWith = s.plan.DeletePodOf
	return nil
}

// nodeOf is the node pod is bound to, nil when it is unbound or the node
// is not in the cache.
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

// carryMarks carries the scale-in marks between a task and its pod, so that
// only this controller writes pods: the set controller marks a task
// draining, and the worker reads the mark from its pod (the downward API);
// a worker may mark its pod busy, and the set controller reads that from
// the task's gputask.io/pod-busy, which mirrors the pod's mark; and a busy
// worker's pod carries the marks that keep node autoscalers from evicting
// it (taskplan's protection).
func (c *Controller) carryMarks(ctx context.Context, task *gputaskv1.GPUTask, pod *corev1.Pod, p *taskplan.Plan) error {
	// The pod's marks go in one patch: a busy worker chosen for scale-in
	// costs one write, not two.
	podMarks := map[string]any{}
	if p.PodDraining != nil {
		podMarks[gputaskv1.AnnotationDraining] = trueOrNull(*p.PodDraining, "true")
	}
	if p.PodProtected != nil {
		podMarks[gputaskv1.AnnotationDoNotDisrupt] = trueOrNull(*p.PodProtected, "true")
		podMarks[gputaskv1.AnnotationSafeToEvict] = trueOrNull(*p.PodProtected, "false")
	}
	if len(podMarks) > 0 {
		if err := mergeAnnotations(ctx, c.kubeclientset.CoreV1().Pods(pod.Namespace), pod.Name, podMarks); err != nil {
			return fmt.Errorf("marking pod %s: %w", klog.KObj(pod), err)
		}
		klog.FromContext(ctx).V(2).Info("Carried the task's marks to the pod", "pod", klog.KObj(pod), "draining", p.PodDraining, "protected", p.PodProtected)
	}
	if busy := p.TaskPodBusy; busy != nil {
		if err := mergeAnnotations(ctx, c.gputaskclientset.GputaskV1().GPUTasks(task.Namespace), task.Name, map[string]any{gputaskv1.AnnotationPodBusy: trueOrNull(*busy, "true")}); err != nil {
			return fmt.Errorf("marking gputask %s pod-busy=%v: %w", klog.KObj(task), *busy, err)
		}
		klog.FromContext(ctx).V(4).Info("Carried the pod's busy mark to the task", "pod", klog.KObj(pod), "busy", *busy)
	}
	return nil
}

// trueOrNull is value when on, else nil, which a merge patch reads as
// "remove the key".
func trueOrNull(on bool, value string) any {
	if on {
		return value
	}
	return nil
}

// annotationPatcher is the one method of a typed client that
// patchAnnotation calls.
type annotationPatcher[T any] interface {
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// mergeAnnotations sets each key to its value, or removes it when the value
// is nil, with a merge patch that touches nothing else. An object that is
// gone is no error: its delete event brings the next sync.
func mergeAnnotations[T any](ctx context.Context, client annotationPatcher[T], name string, annotations map[string]any) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	if _, err := client.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}
