package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/csaupgrade"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/claims"
	"github.com/gputask/gputask-controller/pkg/expectations"
	applyv1 "github.com/gputask/gputask-controller/pkg/generated/applyconfiguration/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/orphans"
	"github.com/gputask/gputask-controller/pkg/podspec"
	"github.com/gputask/gputask-controller/pkg/reschedule"
	"github.com/gputask/gputask-controller/pkg/taskstatus"
)

// syncMissingPod creates the task's pod, unless the spec is invalid or a
// creation is already on its way.
func (c *Controller) syncMissingPod(ctx context.Context, key cache.ObjectName, task *gputaskv1.GPUTask) error {
	logger := klog.FromContext(ctx)
	desired, specErr := podspec.Build(task, c.podOpts)
	if specErr != nil {
		c.dropReplacement(key)
		c.warnOnTransition(task, gputaskv1.ConditionSpecValid, gputaskv1.ReasonInvalidSpec, specErr.Error(), gputaskv1.ReasonInvalidSpec)
		// An invalid spec does not heal by retrying; the update that fixes it
		// enqueues the task again.
		return c.applyStatus(ctx, task, c.status(task, taskstatus.View{SpecErr: specErr}))
	}
	if !c.expectations.Satisfied(key.String()) {
		// The pod was created and the informer has not delivered it yet; a
		// create now would fail or, worse, race. Look again when it expires.
		logger.V(4).Info("Waiting for the pod creation to be observed")
		c.workqueue.AddAfter(key, expectations.DefaultTTL)
		return nil
	}

	if podspec.UsesDRA(&task.Spec, c.podOpts) {
		if err := c.templates.Ensure(ctx, task); err != nil {
			c.recorder.Eventf(task, corev1.EventTypeWarning, gputaskv1.ReasonFailedCreate, "Error preparing the GPU claim of pod %s: %v", desired.Name, err)
			err = fmt.Errorf("preparing the GPU claim of gputask %s: %w", key, err)
			return errors.Join(err, c.applyStatus(ctx, task, c.status(task, taskstatus.View{CreateErr: err})))
		}
	}
	podspec.Stamp(desired)
	c.expectations.ExpectCreations(key.String(), 1)
	created, err := c.kubeclientset.CoreV1().Pods(task.Namespace).Create(ctx, desired, metav1.CreateOptions{})
	if err != nil {
		// No pod is coming from this call, so nothing is to be observed.
		c.expectations.CreationObserved(key.String())
		if apierrors.IsAlreadyExists(err) {
			return c.handleCreateConflict(ctx, key, task)
		}
		c.recorder.Eventf(task, corev1.EventTypeWarning, gputaskv1.ReasonFailedCreate, "Error creating pod %s: %v", desired.Name, err)
		err = fmt.Errorf("creating pod for gputask %s: %w", key, err)
		// Whatever the failure (a refusal, or a webhook or the API server
		// that is down or slow), the error makes the queue back off, at
		// most maxRetryDelay, and the condition tells the user why. It is
		// written once while its message stays the same.
		return errors.Join(err, c.applyStatus(ctx, task, c.status(task, taskstatus.View{CreateErr: err})))
	}
	// No Normal event: one per task would cost as many writes as the pods,
	// on the client that creates them. The set's events count the tasks,
	// and this log line names the pod.
	logger.V(2).Info("Created pod", "pod", klog.KObj(created))

	r := c.markReplacementCreated(key, task)
	if r == nil {
		// The pod's add event brings the sync that writes the status, once
		// the pod has settled (taskstatus.SettleTime), so a throttled status write never
		// holds up this worker's next create.
		return nil
	}
	c.recordReplacement(task, r, created)
	if shown, err := c.applyCountedStatus(ctx, task, c.status(task, taskstatus.View{Pod: created, Replaced: &r.counted})); err != nil || !shown {
		// The replacement stays until a status counts it.
		return err
	}
	c.finishReplacement(key)
	return nil
}

// handleCreateConflict runs when the create said a pod of that name exists
// but the cache has none: either the cache lags behind a pod we made, or the
// pod lacks the gputask.io/task label and so is invisible to our informer.
// One live read tells which.
func (c *Controller) handleCreateConflict(ctx context.Context, key cache.ObjectName, task *gputaskv1.GPUTask) error {
	pod, err := c.kubeclientset.CoreV1().Pods(task.Namespace).Get(ctx, task.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading pod %s/%s after a create conflict: %w", task.Namespace, task.Name, err)
	}
	if isControlledBy(pod, task) {
		// Ours, and the informer will deliver it.
		c.workqueue.AddAfter(key, replacementPoll)
		return nil
	}
	// A pod outside our informer sends us no events, so look again later.
	c.workqueue.AddAfter(key, conflictRecheck)
	return c.syncConflict(ctx, task, pod)
}

// syncConflict reports a pod that has the task's name but is not controlled
// by this task. It is never adopted, changed or deleted: it may be someone
// else's work.
func (c *Controller) syncConflict(ctx context.Context, task *gputaskv1.GPUTask, pod *corev1.Pod) error {
	msg := fmt.Sprintf("pod %s exists and is not controlled by this GPUTask", klog.KObj(pod))
	c.warnOnTransition(task, gputaskv1.ConditionPodOwned, gputaskv1.ReasonPodConflict, msg, gputaskv1.ReasonPodConflict)
	_, specErr := podspec.Build(task, c.podOpts)
	return c.applyStatus(ctx, task, c.status(task, taskstatus.View{Conflict: msg, SpecErr: specErr}))
}

// syncOwnedPod mirrors the pod and replaces it when it must be placed again.
func (c *Controller) syncOwnedPod(ctx context.Context, key cache.ObjectName, task *gputaskv1.GPUTask, pod *corev1.Pod) error {
	desired, specErr := podspec.Build(task, c.podOpts)
	view := taskstatus.View{Pod: pod, SpecErr: specErr}
	if specErr != nil {
		c.warnOnTransition(task, gputaskv1.ConditionSpecValid, gputaskv1.ReasonInvalidSpec, specErr.Error(), gputaskv1.ReasonInvalidSpec)
	} else {
		// A spec change is shown, never applied to the running pod: the
		// pod is replaced only when gputask.io/restartedAt asks for it.
		stale, err := c.drift(ctx, key, desired, pod)
		if err != nil {
			return err
		}
		view.Stale = stale
	}

	if r := c.replacementFor(key); r != nil {
		if !r.created && pod.UID == r.oldPodUID {
			// Our delete is under way: the pod terminates or the cache has
			// not caught up yet. Never create in the same sync.
			c.workqueue.AddAfter(key, replacementPoll)
			if err := c.forceDeleteIfUnreachable(ctx, task, pod, r.reason); err != nil {
				return err
			}
			return c.applyStatus(ctx, task, c.status(task, view))
		}
		// The replacement exists; what is left is to count it.
		if !r.created {
			r = c.markReplacementCreated(key, task)
		}
		view.Replaced = &r.counted
		if shown, err := c.applyCountedStatus(ctx, task, c.status(task, view)); err != nil || !shown {
			return err
		}
		c.finishReplacement(key)
		return nil
	}

	if pod.DeletionTimestamp != nil {
		// Someone else deletes the pod; it is created again once it is gone.
		c.workqueue.AddAfter(key, replacementPoll)
		if d, ok := reschedule.Disrupted(pod); ok {
			c.noteDisruption(key, task, pod, d)
		}
		if orphans.DeleteInterrupted(pod) {
			if err := c.orphans.CompleteDelete(ctx, pod); err != nil {
				return err
			}
		}
		return c.applyStatus(ctx, task, c.status(task, view))
	}

	if err := c.carryMarks(ctx, task, pod); err != nil {
		return err
	}
	// A pod whose replacement cannot be built is kept, whatever its state.
	if specErr == nil {
		if reason, ok := c.replacementReason(ctx, key, task, pod); ok {
			return c.startReplacement(ctx, key, task, pod, reason, view)
		}
	}
	view.Queue = c.queueWait(pod)
	want := c.status(task, view)
	if wait := taskstatus.SettleTime(pod, c.clock.Now()); wait > 0 && specErr == nil && taskstatus.MayWait(&task.Status, &want) {
		// The pod is on its way; its next state, or this timer, brings
		// the write.
		c.workqueue.AddAfter(key, wait)
		return nil
	}
	return c.applyStatus(ctx, task, want)
}

// driftCheck is what a read of the task's pod found: the first field where
// the pod (by UID and generation) differs from the pod that the spec, by
// its hash, asks for.
type driftCheck struct {
	podUID        types.UID
	podGeneration int64
	want          string
	field         string
}

// drift returns the first field where the running pod differs from desired,
// or "" when it is up to date. The hash the pod carries answers almost every
// sync from the cache, which keeps no pod spec (podspec.Trim). When the
// hashes differ, one read of the pod names the field, and is remembered for
// that pod and spec. A pod that differs in its hash only, as after an upgrade
// that builds pods differently, is stamped with the new hash, so that it is
// read once, not after every restart. A pod made before pods carried a hash
// is compared from the cache, which keeps its spec.
func (c *Controller) drift(ctx context.Context, key cache.ObjectName, desired, pod *corev1.Pod) (string, error) {
	have := podspec.Stamped(pod)
	if have == "" {
		return podspec.FirstDifference(desired, pod), nil
	}
	want := podspec.Hash(desired)
	if have == want {
		if c.knownDrift(key) != nil {
			c.update(key, func(s *taskState) { s.drift = nil })
		}
		return "", nil
	}
	check := driftCheck{podUID: pod.UID, podGeneration: pod.Generation, want: want}
	if known := c.knownDrift(key); known != nil && known.podUID == check.podUID &&
		known.podGeneration == check.podGeneration && known.want == check.want {
		return known.field, nil
	}
	live, err := c.kubeclientset.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && live.UID != pod.UID) {
		// The pod is gone; its delete event brings the task back.
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading pod %s to compare it with the spec: %w", klog.KObj(pod), err)
	}
	check.field = podspec.FirstDifference(desired, live)
	if check.field == "" {
		if err := mergeAnnotation(ctx, c.kubeclientset.CoreV1().Pods(pod.Namespace), pod.Name, gputaskv1.AnnotationPodSpecHash, want); err != nil {
			return "", fmt.Errorf("recording the spec's hash on pod %s: %w", klog.KObj(pod), err)
		}
		return "", nil
	}
	c.update(key, func(s *taskState) { s.drift = &check })
	return check.field, nil
}

func (c *Controller) knownDrift(key cache.ObjectName) *driftCheck {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.state[key]; s != nil {
		return s.drift
	}
	return nil
}

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

// applyStatus writes status when it differs from what the task shows; see
// writeStatus.
func (c *Controller) applyStatus(ctx context.Context, task *gputaskv1.GPUTask, status gputaskv1.GPUTaskStatus) error {
	_, err := c.writeStatus(ctx, task, status, "")
	return err
}

// applyCountedStatus writes status that counts a replacement in
// status.reschedules, on the condition that the task is still at the
// resourceVersion the count was made from: a count from a stale copy
// could undo a newer one. It reports whether the task now shows status.
func (c *Controller) applyCountedStatus(ctx context.Context, task *gputaskv1.GPUTask, status gputaskv1.GPUTaskStatus) (bool, error) {
	return c.writeStatus(ctx, task, status, task.ResourceVersion)
}

// writeStatus applies status with server-side apply, as this controller's
// field manager, when it differs from what the task has; a resourceVersion
// other than "" is a precondition of the write. It reports whether the
// task now shows status: false when the write waits, for the cache to show
// this controller's last write (whose update event brings the task back),
// or for its turn within the status client's rate limit (the key is queued
// for it). A worker never sits in the client's rate limiter, where it
// would hold up the pod creates of other tasks.
func (c *Controller) writeStatus(ctx context.Context, task *gputaskv1.GPUTask, status gputaskv1.GPUTaskStatus, resourceVersion string) (bool, error) {
	if equality.Semantic.DeepEqual(task.Status, status) {
		return true, nil
	}
	key := cache.MetaObjectToName(task)
	if c.cacheBehindStatusWrite(key, task.ResourceVersion) {
		// The cached task does not show the last write yet: a write from
		// it would send that same status again.
		klog.FromContext(ctx).V(4).Info("Status write waits for the cache to show the last one")
		return false, nil
	}
	if !c.statusWriteDue(key) {
		return false, nil
	}
	apply := applyv1.GPUTask(task.Name, task.Namespace).WithStatus(taskstatus.Apply(&status))
	if resourceVersion != "" {
		apply.WithResourceVersion(resourceVersion)
	}
	out, err := c.apply(ctx, apply)
	if err != nil {
		return false, err
	}
	if c.upgradeStatusOwner(ctx, out) {
		// The fields the Update owned are now this manager's, and the
		// same apply again removes those it does not set.
		apply.ResourceVersion = nil
		if out, err = c.apply(ctx, apply); err != nil {
			return false, err
		}
	}
	if out.ResourceVersion != task.ResourceVersion {
		// A write the API server found to change nothing keeps the version
		// and sends no event: then there is nothing to wait for.
		c.update(key, func(s *taskState) { s.statusWrittenFrom = ptr.To(task.ResourceVersion) })
	}
	return true, nil
}

func (c *Controller) apply(ctx context.Context, apply *applyv1.GPUTaskApplyConfiguration) (*gputaskv1.GPUTask, error) {
	out, err := c.gputaskclientset.GputaskV1().GPUTasks(*apply.Namespace).ApplyStatus(ctx, apply,
		metav1.ApplyOptions{FieldManager: ControllerName, Force: true})
	if err != nil {
		return nil, fmt.Errorf("applying status of gputask %s/%s: %w", *apply.Namespace, *apply.Name, err)
	}
	return out, nil
}

// updateManagers are the field managers under which versions before
// server-side apply wrote a task's status with Update: the API server names
// a manager after its client's user agent, up to the first "/".
var updateManagers = sets.New(ControllerName, strings.Split(rest.DefaultKubernetesUserAgent(), "/")[0])

// upgradeStatusOwner hands the status fields that an Update of an earlier
// version still owns to this controller's apply manager, as kubectl does
// for client-side apply (csaupgrade), and reports whether it did. Otherwise
// the Update entry would keep a field this controller no longer applies,
// and the task would show it for ever. The apply's answer tells whether
// there is anything to hand over, so a cluster that never ran such a
// version pays no read and no write; a failed hand-over is tried again
// after the next apply.
func (c *Controller) upgradeStatusOwner(ctx context.Context, task *gputaskv1.GPUTask) bool {
	patch, err := csaupgrade.UpgradeManagedFieldsPatch(task, updateManagers, ControllerName, csaupgrade.Subresource("status"))
	if err != nil || patch == nil {
		return false
	}
	if _, err := c.gputaskclientset.GputaskV1().GPUTasks(task.Namespace).Patch(ctx, task.Name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		klog.FromContext(ctx).V(2).Info("Handing the status fields of an earlier version to the apply manager failed; trying again after the next write", "err", err)
		return false
	}
	klog.FromContext(ctx).V(2).Info("Handed the status fields of an earlier version to the apply manager")
	return true
}

// statusWriteDue reports whether the task's status write may go now. When
// the status writes are at their rate limit it reserves the task's turn,
// once, and queues the key for then.
func (c *Controller) statusWriteDue(key cache.ObjectName) bool {
	if c.statusLimiter == nil {
		return true
	}
	now := c.clock.Now()
	var at time.Time
	c.update(key, func(s *taskState) {
		at = s.statusWriteAt
		if at.IsZero() {
			at = now.Add(c.statusLimiter.ReserveN(now, 1).DelayFrom(now))
		}
		s.statusWriteAt = time.Time{}
		if now.Before(at) {
			s.statusWriteAt = at
		}
	})
	if !now.Before(at) {
		return true
	}
	c.workqueue.AddAfter(key, at.Sub(now))
	return false
}

// cacheBehindStatusWrite reports whether resourceVersion, the task's in the
// cache, is the one this controller's last status write of the task
// replaced. A cache that shows any other version has caught up, and the
// note goes.
func (c *Controller) cacheBehindStatusWrite(key cache.ObjectName, resourceVersion string) bool {
	behind := false
	c.update(key, func(s *taskState) {
		behind = s.statusWrittenFrom != nil && *s.statusWrittenFrom == resourceVersion
		if !behind {
			s.statusWrittenFrom = nil
		}
	})
	return behind
}

// status is the task's status for view, with what the caches tell about
// the pod's node.
func (c *Controller) status(task *gputaskv1.GPUTask, view taskstatus.View) gputaskv1.GPUTaskStatus {
	if view.Pod != nil {
		if node := c.nodeOf(view.Pod); node != nil {
			view.GPUModel = node.Labels[c.opts.GPULabelKey]
		}
		if podspec.UsesDRA(&task.Spec, c.podOpts) {
			// The claim's allocation, not the node's label, says which
			// devices the pod got.
			var model string
			view.Devices, model = claims.Allocated(c.claimsLister, task, view.Pod)
			if model != "" || view.Devices != nil {
				view.GPUModel = model
			}
		}
		view.UntoleratedTaints = func() []string {
			nodes, err := c.nodesLister.List(labels.Everything())
			if err != nil {
				return nil
			}
			return podspec.UntoleratedTaints(view.Pod, nodes, c.opts.GPULabelKey, podspec.Models(&task.Spec), c.opts.GPUResourceName)
		}
	}
	return taskstatus.Compute(task, view, c.clock.Now())
}

// deletePodOfDeletedTask deletes the pod of a task that is gone, if that pod
// is controlled by the very task that was deleted. Garbage collection would
// delete it too; doing it here frees the GPUs without waiting for it.
func (c *Controller) deletePodOfDeletedTask(ctx context.Context, key cache.ObjectName) error {
	c.expectations.Delete(key.String())
	c.dropReplacement(key)
	var uid types.UID
	c.update(key, func(s *taskState) {
		uid = s.deletedUID
		s.warnedRestartedAt, s.statusWrittenFrom, s.statusWriteAt = "", nil, time.Time{}
	})
	if uid == "" {
		// Not a delete this controller saw: the pod may have outlived a
		// task deleted while it was down.
		_, err := c.orphans.DeleteOrphan(ctx, key)
		return err
	}
	if err := c.orphans.DeletePodOf(ctx, key, uid); err != nil {
		return err
	}
	c.forgetDeletedTask(key)
	return nil
}

func (c *Controller) forgetDeletedTask(key cache.ObjectName) {
	c.update(key, func(s *taskState) { s.deletedUID = "" })
}

// carryMarks carries the scale-in marks between a task and its pod, so that
// only this controller writes pods: the set controller marks a task
// draining, and the worker reads the mark from its pod (the downward API);
// a worker may mark its pod busy, and the set controller reads that from
// the task's gputask.io/pod-busy, which mirrors the pod's mark.
func (c *Controller) carryMarks(ctx context.Context, task *gputaskv1.GPUTask, pod *corev1.Pod) error {
	if draining := gputaskv1.IsDraining(task); draining != gputaskv1.IsDraining(pod) {
		if err := patchAnnotation(ctx, c.kubeclientset.CoreV1().Pods(pod.Namespace), pod.Name, gputaskv1.AnnotationDraining, draining); err != nil {
			return fmt.Errorf("marking pod %s draining=%v: %w", klog.KObj(pod), draining, err)
		}
		klog.FromContext(ctx).V(2).Info("Carried the draining mark to the pod", "pod", klog.KObj(pod), "draining", draining)
	}
	if busy := gputaskv1.IsBusy(pod); busy != (task.Annotations[gputaskv1.AnnotationPodBusy] == "true") {
		if err := patchAnnotation(ctx, c.gputaskclientset.GputaskV1().GPUTasks(task.Namespace), task.Name, gputaskv1.AnnotationPodBusy, busy); err != nil {
			return fmt.Errorf("marking gputask %s pod-busy=%v: %w", klog.KObj(task), busy, err)
		}
		klog.FromContext(ctx).V(4).Info("Carried the pod's busy mark to the task", "pod", klog.KObj(pod), "busy", busy)
	}
	return nil
}

// annotationPatcher is the one method of a typed client that
// patchAnnotation calls.
type annotationPatcher[T any] interface {
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// patchAnnotation sets key to "true" (on) or removes it, with a merge
// patch that touches nothing else. An object that is gone is no error: its
// delete event brings the next sync.
func patchAnnotation[T any](ctx context.Context, client annotationPatcher[T], name, key string, on bool) error {
	var value any // null removes the key
	if on {
		value = "true"
	}
	return mergeAnnotation(ctx, client, name, key, value)
}

// mergeAnnotation sets key to value, or removes it when value is nil.
func mergeAnnotation[T any](ctx context.Context, client annotationPatcher[T], name, key string, value any) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: value}}})
	if err != nil {
		return err
	}
	if _, err := client.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// queueWait is Kueue's reason and message for pod while it waits for
// admission, nil when Kueue is not installed, does not manage the pod, or
// has admitted it.
func (c *Controller) queueWait(pod *corev1.Pod) *taskstatus.QueueWait {
	if c.workloads == nil || pod.Spec.NodeName != "" || reschedule.QueueManager(pod) != "Kueue" {
		return nil
	}
	reason, msg, ok := c.workloads.Waiting(pod)
	if !ok {
		return nil
	}
	return &taskstatus.QueueWait{Reason: reason, Message: msg}
}
