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
	"github.com/gputask/gputask-controller/pkg/setplan"
)

// drainingPatch marks (on) or unmarks a task as draining, with the time
// the drain started, from which drainTimeout is measured.
func drainingPatch(startedAt string) ([]byte, error) {
	annotations := map[string]any{gputaskv1.AnnotationDraining: nil, gputaskv1.AnnotationDrainStartedAt: nil}
	if startedAt != "" {
		annotations[gputaskv1.AnnotationDraining] = "true"
		annotations[gputaskv1.AnnotationDrainStartedAt] = startedAt
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
}

// setDraining marks the busy scale-in victims draining (on), or takes the
// mark back, with one event per task. Each event names the task's node and
// the set's GPUs in use on it (use), as the ranking saw them.
func (c *Controller) setDraining(ctx context.Context, set *gputaskv1.GPUTaskSet, tasks []*gputaskv1.GPUTask, on bool, use setplan.NodeGPUs) error {
	reason, verb := gputaskv1.ReasonDrainingTask, "Draining busy task"
	if !on {
		reason, verb = gputaskv1.ReasonUndrainTask, "Took back draining task"
	}
	marked, err := c.markDraining(ctx, set, tasks, on)
	for _, t := range marked {
		msg := fmt.Sprintf("%s: %s", verb, t.Name)
		if n := t.Status.NodeName; n != "" {
			msg += fmt.Sprintf(" on %s (%d GPUs of the set in use)", n, use[n])
		}
		c.recorder.Event(set, corev1.EventTypeNormal, reason, msg)
	}
	return err
}

// markDraining patches the draining mark onto the tasks (on), or takes it
// back, and returns the tasks it patched. The GPUTask controller carries the
// mark to each task's pod, where the worker reads it. A task that is gone is
// no error, and is not returned.
func (c *Controller) markDraining(ctx context.Context, set *gputaskv1.GPUTaskSet, tasks []*gputaskv1.GPUTask, on bool) ([]*gputaskv1.GPUTask, error) {
	if len(tasks) == 0 {
		return nil, nil
	}
	// startedAt is the mark's time, "" when the mark is taken back.
	startedAt := ""
	if on {
		startedAt = c.clock.Now().UTC().Format(time.RFC3339Nano)
	}
	taskPatch, err := drainingPatch(startedAt)
	if err != nil {
		return nil, fmt.Errorf("building draining patch: %w", err)
	}
	// Expect before patching: until the cache shows the mark, the next sync
	// must not pick the same task again (one patch, one event per drain).
	key := cache.MetaObjectToName(set).String()
	var (
		marked []*gputaskv1.GPUTask
		errs   []error
	)
	for _, t := range tasks {
		c.expectations.ExpectAnnotation(key, t.Name, gputaskv1.AnnotationDrainStartedAt, startedAt)
		_, err := c.gputaskclientset.GputaskV1().GPUTasks(t.Namespace).Patch(ctx, t.Name, types.MergePatchType, taskPatch, metav1.PatchOptions{})
		if err != nil {
			c.expectations.ForgetAnnotation(key, t.Name, gputaskv1.AnnotationDrainStartedAt)
		}
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			c.recorder.Eventf(set, corev1.EventTypeWarning, gputaskv1.ReasonFailedDrain, "Error marking task %s: %v", t.Name, err)
			errs = append(errs, fmt.Errorf("marking gputask %s draining=%v: %w", klog.KObj(t), on, err))
		default:
			klog.FromContext(ctx).V(2).Info("Marked task", "gputask", klog.KObj(t), "draining", on)
			marked = append(marked, t)
		}
	}
	if len(errs) > 0 {
		return marked, &replicaError{reason: gputaskv1.ReasonFailedDrain, err: errors.Join(errs...)}
	}
	return marked, nil
}
