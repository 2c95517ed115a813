package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/csaupgrade"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/claims"
	applyv1 "github.com/gputask/gputask-controller/pkg/generated/applyconfiguration/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/podspec"
	"github.com/gputask/gputask-controller/pkg/reschedule"
	"github.com/gputask/gputask-controller/pkg/taskplan"
	"github.com/gputask/gputask-controller/pkg/taskstatus"
)

// syncStatus writes the task's status in the way out says (the plan's, or
// the one acting chose), computed from what acting found out: a failed
// create, a conflicting pod, a drift found by a read, a replacement to
// count. It records in out what the write leaves to remember and when to
// look again. A failed create is returned after the write, so that the
// queue backs off.
func (c *Controller) syncStatus(ctx context.Context, s *taskSync, out *outcome) error {
	view := taskstatus.View{Pod: out.mirrored, SpecErr: s.plan.SpecErr, Stale: out.stale, Conflict: out.conflict, CreateErr: out.createErr}
	if out.conflict != "" && !taskplan.Warned(s.task, gputaskv1.ConditionPodOwned, gputaskv1.ReasonPodConflict, out.conflict) {
		c.recorder.Event(s.task, corev1.EventTypeWarning, gputaskv1.ReasonPodConflict, out.conflict)
	}
	var err error
	switch out.status {
	case taskplan.WriteStatus:
		_, err = c.applyStatus(ctx, s, out, c.status(s.task, view, out.node), "")
	case taskplan.WriteCounted:
		// A count from a stale copy could undo a newer one: the write is
		// conditional on the version the count was made from, and the
		// replacement stays until a status counts it.
		view.Replaced = &out.memory.Replacement.Counted
		var shown bool
		if shown, err = c.applyStatus(ctx, s, out, c.status(s.task, view, out.node), s.task.ResourceVersion); shown {
			out.memory.Replacement = nil
		}
	case taskplan.WriteUnlessSettling:
		view.Queue = c.queueWait(s.pod)
		want := c.status(s.task, view, out.node)
		if wait := taskstatus.SettleTime(s.pod, c.clock.Now()); wait > 0 && s.plan.SpecErr == nil && taskstatus.MayWait(&s.task.Status, &want) {
			// The pod is on its way; its next state, or this timer, brings
			// the write.
			out.lookAgainIn(wait)
			break
		}
		_, err = c.applyStatus(ctx, s, out, want, "")
	}
	return errors.Join(out.createErr, err)
}

// applyStatus applies status with server-side apply, as this controller's
// field manager, when it differs from what the task has; a resourceVersion
// other than "" is a precondition of the write. It reports whether the
// task now shows status: false when the write waits, for the cache to show
// this controller's last write (whose update event brings the task back),
// or for its turn within the status client's rate limit (out then looks
// again when the turn comes). A worker never sits in the client's rate limiter, where it
// would hold up the pod creates of other tasks.
func (c *Controller) applyStatus(ctx context.Context, s *taskSync, out *outcome, status gputaskv1.GPUTaskStatus, resourceVersion string) (bool, error) {
	task := s.task
	if equality.Semantic.DeepEqual(task.Status, status) {
		return true, nil
	}
	if c.cacheBehindStatusWrite(&s.state, task.ResourceVersion) {
		// The cached task does not show the last write yet: a write from
		// it would send that same status again.
		klog.FromContext(ctx).V(4).Info("Status write waits for the cache to show the last one")
		return false, nil
	}
	if wait := c.statusWriteWait(&s.state); wait > 0 {
		out.lookAgainIn(wait)
		return false, nil
	}
	apply := applyv1.GPUTask(task.Name, task.Namespace).WithStatus(taskstatus.Apply(&status))
	if resourceVersion != "" {
		apply.WithResourceVersion(resourceVersion)
	}
	written, err := c.apply(ctx, apply)
	if err != nil {
		return false, err
	}
	if c.upgradeStatusOwner(ctx, written) {
		// The fields the Update owned are now this manager's, and the
		// same apply again removes those it does not set.
		apply.ResourceVersion = nil
		if written, err = c.apply(ctx, apply); err != nil {
			return false, err
		}
	}
	if written.ResourceVersion != task.ResourceVersion {
		// A write the API server found to change nothing keeps the version
		// and sends no event: then there is nothing to wait for.
		s.state.statusWrittenFrom = ptr.To(task.ResourceVersion)
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

// statusWriteWait returns how long the task's status write must wait for
// its turn within the status writes' rate limit, 0 when it may go now. The
// turn is reserved once, and kept in the task's state until it comes.
func (c *Controller) statusWriteWait(s *taskState) time.Duration {
	if c.statusLimiter == nil {
		return 0
	}
	now := c.clock.Now()
	at := s.statusWriteAt
	if at.IsZero() {
		at = now.Add(c.statusLimiter.ReserveN(now, 1).DelayFrom(now))
	}
	s.statusWriteAt = time.Time{}
	if !now.Before(at) {
		return 0
	}
	s.statusWriteAt = at
	return at.Sub(now)
}

// cacheBehindStatusWrite reports whether resourceVersion, the task's in the
// cache, is the one this controller's last status write of the task
// replaced. A cache that shows any other version has caught up, and the
// note goes.
func (c *Controller) cacheBehindStatusWrite(s *taskState, resourceVersion string) bool {
	behind := s.statusWrittenFrom != nil && *s.statusWrittenFrom == resourceVersion
	if !behind {
		s.statusWrittenFrom = nil
	}
	return behind
}

// status is the task's status for view, with what node, the pod's node
// in the cache, tells.
func (c *Controller) status(task *gputaskv1.GPUTask, view taskstatus.View, node *corev1.Node) gputaskv1.GPUTaskStatus {
	if view.Pod != nil {
		if node != nil {
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
