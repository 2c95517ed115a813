package taskset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// Event reasons of graceful scale-in.
const (
	ReasonDrainingTask = "DrainingTask"
	ReasonUndrainTask  = "UndrainedTask"
	ReasonFailedDrain  = "FailedDrain"
)

// busy reports whether a task's worker is busy: gputask.io/busy: "true" on
// the task, or on its pod when the controller watches pods.
func (c *Controller) busy(t *gputaskv1.GPUTask) bool {
	if gputaskv1.IsBusy(t) {
		return true
	}
	if c.podsLister == nil || t.Status.PodName == "" {
		return false
	}
	pod, err := c.podsLister.Pods(t.Namespace).Get(t.Status.PodName)
	return err == nil && gputaskv1.IsBusy(pod)
}

// drainingPatch marks (on) or unmarks a task or pod as draining. The start
// time is kept on the task only, where drainTimeout is measured.
func drainingPatch(on bool, withStart bool, now time.Time) ([]byte, error) {
	annotations := map[string]any{gputaskv1.AnnotationDraining: nil}
	if withStart {
		annotations[gputaskv1.AnnotationDrainStartedAt] = nil
	}
	if on {
		annotations[gputaskv1.AnnotationDraining] = "true"
		if withStart {
			annotations[gputaskv1.AnnotationDrainStartedAt] = now.UTC().Format(time.RFC3339Nano)
		}
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
}

// setDraining marks the tasks and their pods draining (on), or takes the
// mark back. The task is marked first: it is what the set counts, and the
// pod's mark is what the worker reads. A pod that is gone is no error.
func (c *Controller) setDraining(ctx context.Context, set *gputaskv1.GPUTaskSet, tasks []*gputaskv1.GPUTask, on bool) error {
	now := c.clock.Now()
	taskPatch, err := drainingPatch(on, true, now)
	if err != nil {
		return fmt.Errorf("building draining patch: %w", err)
	}
	podPatch, err := drainingPatch(on, false, now)
	if err != nil {
		return fmt.Errorf("building draining patch: %w", err)
	}
	reason, verb := ReasonDrainingTask, "Draining busy task"
	if !on {
		reason, verb = ReasonUndrainTask, "Took back draining task"
	}
	var errs []error
	for _, t := range tasks {
		_, err := c.gputaskclientset.GputaskV1().GPUTasks(t.Namespace).Patch(ctx, t.Name, types.MergePatchType, taskPatch, metav1.PatchOptions{})
		if err == nil && t.Status.PodName != "" {
			_, err = c.kubeclientset.CoreV1().Pods(t.Namespace).Patch(ctx, t.Status.PodName, types.MergePatchType, podPatch, metav1.PatchOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			c.recorder.Eventf(set, corev1.EventTypeWarning, ReasonFailedDrain, "Error marking task %s: %v", t.Name, err)
			errs = append(errs, fmt.Errorf("marking gputask %s draining=%v: %w", klog.KObj(t), on, err))
			continue
		}
		klog.FromContext(ctx).V(2).Info(verb, "gputask", klog.KObj(t))
		c.recorder.Eventf(set, corev1.EventTypeNormal, reason, "%s: %s", verb, t.Name)
	}
	if len(errs) > 0 {
		return &replicaError{reason: ReasonFailedDrain, err: errors.Join(errs...)}
	}
	return nil
}

// updatePod wakes a set when one of its pods turns busy or idle, since a
// draining task whose worker turned idle can go now. Pods carry the set's
// name in gputask.io/taskset; other pod changes reach the set through
// the task's status.
func (c *Controller) updatePod(logger klog.Logger, old, cur any) {
	oldPod, ok1 := old.(*corev1.Pod)
	curPod, ok2 := cur.(*corev1.Pod)
	if !ok1 || !ok2 || oldPod.Annotations[gputaskv1.AnnotationBusy] == curPod.Annotations[gputaskv1.AnnotationBusy] {
		return
	}
	name := curPod.Labels[gputaskv1.LabelTaskSet]
	if name == "" {
		return
	}
	logger.V(4).Info("Pod turned busy or idle", "pod", klog.KObj(curPod), "gputaskset", name)
	c.workqueue.Add(cache.ObjectName{Namespace: curPod.Namespace, Name: name})
}
