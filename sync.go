package main

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/expectations"
	"github.com/gputask/gputask-controller/pkg/podspec"
)

// syncMissingPod creates the task's pod, unless the spec is invalid or a
// creation is already on its way.
func (c *Controller) syncMissingPod(ctx context.Context, key cache.ObjectName, task *gputaskv1.GPUTask) error {
	logger := klog.FromContext(ctx)
	desired, specErr := podspec.Build(task, c.podOpts)
	if specErr != nil {
		c.dropReplacement(key)
		c.warnOnTransition(task, gputaskv1.ConditionSpecValid, ReasonInvalidSpec, specErr.Error(), ReasonInvalidSpec)
		// An invalid spec does not heal by retrying; the update that fixes it
		// enqueues the task again.
		return c.updateStatus(ctx, task, c.computeStatus(task, statusView{specErr: specErr}))
	}
	if !c.expectations.Satisfied(key.String()) {
		// The pod was created and the informer has not delivered it yet; a
		// create now would fail or, worse, race. Look again when it expires.
		logger.V(4).Info("Waiting for the pod creation to be observed")
		c.workqueue.AddAfter(key, expectations.DefaultTTL)
		return nil
	}

	c.expectations.ExpectCreations(key.String(), 1)
	created, err := c.kubeclientset.CoreV1().Pods(task.Namespace).Create(ctx, desired, metav1.CreateOptions{})
	if err != nil {
		// No pod is coming from this call, so nothing is to be observed.
		c.expectations.CreationObserved(key.String())
		if apierrors.IsAlreadyExists(err) {
			return c.handleCreateConflict(ctx, key, task)
		}
		c.recorder.Eventf(task, corev1.EventTypeWarning, ReasonFailedCreate, "Error creating pod %s: %v", desired.Name, err)
		err = fmt.Errorf("creating pod for gputask %s: %w", key, err)
		if isRefused(err) {
			// The error makes the queue back off; the condition tells the
			// user why, and is written once, as its message is stable.
			return errors.Join(err, c.updateStatus(ctx, task, c.computeStatus(task, statusView{createErr: err})))
		}
		return err
	}
	// No Normal event: one per task would cost as many writes as the pods,
	// on the client that creates them. The set's events count the tasks,
	// and this log line names the pod.
	logger.V(2).Info("Created pod", "pod", klog.KObj(created))

	r := c.markReplacementCreated(key, task)
	if r == nil {
		// The pod's add event brings the sync that writes the status, once
		// the pod has settled (settle.go), so a throttled status write never
		// holds up this worker's next create.
		return nil
	}
	c.recordReplacement(task, r, created)
	if err := c.updateStatus(ctx, task, c.computeStatus(task, statusView{pod: created, replaced: r})); err != nil {
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
	c.warnOnTransition(task, gputaskv1.ConditionPodOwned, ReasonPodConflict, msg, ReasonPodConflict)
	_, specErr := podspec.Build(task, c.podOpts)
	return c.updateStatus(ctx, task, c.computeStatus(task, statusView{conflict: msg, specErr: specErr}))
}

// syncOwnedPod mirrors the pod and replaces it when it must be placed again.
func (c *Controller) syncOwnedPod(ctx context.Context, key cache.ObjectName, task *gputaskv1.GPUTask, pod *corev1.Pod) error {
	desired, specErr := podspec.Build(task, c.podOpts)
	view := statusView{pod: pod, specErr: specErr}
	if specErr != nil {
		c.warnOnTransition(task, gputaskv1.ConditionSpecValid, ReasonInvalidSpec, specErr.Error(), ReasonInvalidSpec)
	} else {
		// A spec change is shown, never applied to the running pod: the
		// pod is replaced only when gputask.io/restartedAt asks for it.
		view.stale = podspec.FirstDifference(desired, pod)
	}

	if r := c.replacementFor(key); r != nil {
		if !r.created && pod.UID == r.oldPodUID {
			// Our delete is under way: the pod terminates or the cache has
			// not caught up yet. Never create in the same sync.
			c.workqueue.AddAfter(key, replacementPoll)
			if err := c.forceDeleteIfUnreachable(ctx, task, pod, r.reason); err != nil {
				return err
			}
			return c.updateStatus(ctx, task, c.computeStatus(task, view))
		}
		// The replacement exists; what is left is to count it.
		if !r.created {
			r = c.markReplacementCreated(key, task)
		}
		view.replaced = r
		if err := c.updateStatus(ctx, task, c.computeStatus(task, view)); err != nil {
			return err
		}
		c.finishReplacement(key)
		return nil
	}

	if pod.DeletionTimestamp != nil {
		// Someone else deletes the pod; it is created again once it is gone.
		c.workqueue.AddAfter(key, replacementPoll)
		if deleteInterrupted(pod) {
			if err := c.completeDelete(ctx, pod); err != nil {
				return err
			}
		}
		return c.updateStatus(ctx, task, c.computeStatus(task, view))
	}

	// A pod whose replacement cannot be built is kept, whatever its state.
	if specErr == nil {
		if reason, ok := c.replacementReason(ctx, key, task, pod); ok {
			return c.startReplacement(ctx, key, task, pod, reason, view)
		}
	}
	want := c.computeStatus(task, view)
	if wait := settleTime(pod, c.clock.Now()); wait > 0 && specErr == nil && mayWait(&task.Status, &want) {
		// The pod is on its way; its next state, or this timer, brings
		// the write.
		c.workqueue.AddAfter(key, wait)
		return nil
	}
	return c.updateStatus(ctx, task, want)
}
