package taskset

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// A rolling restart: `kubectl annotate gts/x gputask.io/restartedAt=<RFC 3339
// time T>` asks for every task's pod to be replaced, one task at a time
// (maxUnavailable 1). The set copies T onto one task; the task controller
// replaces that task's pod because T is newer than the pod, and stamps
// status.lastRescheduleTime. Once the task is Running again, the set copies T
// onto the next task.

// restartStep is the pure decision of one sync about a restart.
type restartStep struct {
	// Next is the task to annotate now, or nil.
	Next *gputaskv1.GPUTask
	// InProgress is the task that is mid-restart, which blocks Next.
	InProgress *gputaskv1.GPUTask
	// Done and Total count the tasks restarted so far, out of those that
	// need it, for events and logs.
	Done, Total int
}

// planRestart decides which task to restart next for a restart requested at
// at. Times are compared at whole seconds, because that is all
// metav1.Time keeps of a task's creation and reschedule times.
//
// A task created at or after T, or without a pod yet, needs no restart: its
// pod is, or will be, newer than the request. A task is restarted once it carries T (or a later request),
// has been rescheduled at or after T, and runs. A task that carries T but is
// not restarted yet is in progress, and nothing else starts until it is done,
// even if it never gets there: like a Deployment's rollout, a restart stalls
// rather than taking more tasks down. Candidates go oldest first.
func planRestart(tasks []*gputaskv1.GPUTask, at time.Time) restartStep {
	at = at.Truncate(time.Second)
	var step restartStep
	var candidates []*gputaskv1.GPUTask
	for _, t := range tasks {
		switch {
		case !t.CreationTimestamp.Time.Before(at):
			// Created after the request: its pod is newer than T already.
		case isRestarted(t, at):
			step.Total++
			step.Done++
		case carriesRestart(t, at):
			step.Total++
			if step.InProgress == nil || t.Name < step.InProgress.Name {
				step.InProgress = t
			}
		case t.Status.PodName == "":
			// No pod yet: the one the task controller creates will be newer
			// than T, so there is nothing to replace.
		default:
			step.Total++
			candidates = append(candidates, t)
		}
	}
	if step.InProgress != nil || len(candidates) == 0 {
		return step
	}
	sort.Slice(candidates, func(i, j int) bool {
		a, b := candidates[i], candidates[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
	step.Next = candidates[0]
	return step
}

// carriesRestart reports whether the task's own restartedAt asks for a
// restart at or after at.
func carriesRestart(t *gputaskv1.GPUTask, at time.Time) bool {
	v, ok := t.Annotations[gputaskv1.AnnotationRestartedAt]
	if !ok {
		return false
	}
	taskAt, err := time.Parse(time.RFC3339, v)
	return err == nil && !taskAt.Truncate(time.Second).Before(at)
}

// isRestarted reports whether the task finished a restart requested at at.
func isRestarted(t *gputaskv1.GPUTask, at time.Time) bool {
	last := t.Status.LastRescheduleTime
	return carriesRestart(t, at) && last != nil && !last.Time.Before(at) &&
		t.Status.Phase == gputaskv1.GPUTaskRunning
}

// rollRestart moves the set's restart, if any, one task further.
func (c *Controller) rollRestart(ctx context.Context, set *gputaskv1.GPUTaskSet, tasks []*gputaskv1.GPUTask) error {
	value, ok := set.Annotations[gputaskv1.AnnotationRestartedAt]
	if !ok || value == "" {
		return nil
	}
	logger := klog.FromContext(ctx)
	at, err := time.Parse(time.RFC3339, value)
	if err != nil {
		// A retry cannot fix the value, so this is no error for the queue:
		// the user is told, and fixing the annotation brings a new sync.
		c.recorder.Eventf(set, corev1.EventTypeWarning, gputaskv1.ReasonInvalidRestartedAt,
			"Annotation %s=%q is not an RFC 3339 time; no restart", gputaskv1.AnnotationRestartedAt, value)
		return nil
	}
	step := planRestart(tasks, at)
	if step.InProgress != nil {
		logger.V(4).Info("Restart waits for a task", "gputask", klog.KObj(step.InProgress), "restarted", step.Done, "total", step.Total)
	}
	if step.Next == nil {
		return nil
	}
	return c.annotateForRestart(ctx, set, step, value)
}

// annotateForRestart copies the set's restartedAt onto the step's next task.
// A merge patch of one annotation touches neither the spec nor anything
// another writer may have changed, so it needs no read-modify-write.
func (c *Controller) annotateForRestart(ctx context.Context, set *gputaskv1.GPUTaskSet, step restartStep, value string) error {
	task := step.Next
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{
			"annotations": map[string]string{gputaskv1.AnnotationRestartedAt: value},
		},
	})
	if err != nil {
		return fmt.Errorf("building restart patch for gputask %s: %w", klog.KObj(task), err)
	}
	key := cache.MetaObjectToName(set).String()
	// Expect before patching: the next sync must not pick another task
	// until the cache shows this one annotated.
	c.expectations.ExpectAnnotation(key, task.Name, gputaskv1.AnnotationRestartedAt, value)
	_, err = c.gputaskclientset.GputaskV1().GPUTasks(task.Namespace).Patch(ctx, task.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		c.expectations.ForgetAnnotation(key, task.Name, gputaskv1.AnnotationRestartedAt)
		if apierrors.IsNotFound(err) {
			return nil
		}
		c.recorder.Eventf(set, corev1.EventTypeWarning, gputaskv1.ReasonFailedRestart, "Error restarting task %s: %v", task.Name, err)
		return fmt.Errorf("annotating gputask %s for restart: %w", klog.KObj(task), err)
	}
	klog.FromContext(ctx).V(2).Info("Restarting task", "gputask", klog.KObj(task), "restartedAt", value)
	c.recorder.Eventf(set, corev1.EventTypeNormal, gputaskv1.ReasonRestartingTask,
		"Restarting task %s (%d of %d tasks restarted)", task.Name, step.Done, step.Total)
	return nil
}
