package taskset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	applyv1 "github.com/gputask/gputask-controller/pkg/generated/applyconfiguration/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/setplan"
)

// ownStatus holds the status fields this controller owns as its field
// manager. The autoscaler owns the others (loadIndex, desiredReplicas,
// lastDecision, metrics, recommendations and its conditions) as its own
// manager; they are never read or written here. Each applies only its own
// fields, so neither write can undo the other's.
type ownStatus struct {
	Replicas           int32
	RunningReplicas    int32
	PendingReplicas    int32
	ReadyReplicas      int32
	DrainingReplicas   int32
	HeldBackReplicas   int32
	Nodes              int32
	Selector           string
	ObservedGeneration int64
	// ReplicaFailure is the wanted condition; nil means absent.
	ReplicaFailure *metav1.Condition
}

// calculateStatus computes the owned status fields from the active tasks and
// the outcome of this sync. The ReplicaFailure condition is set by a failed
// create or delete, then by an invalid spec (reason InvalidSpec, as long as
// the spec stays invalid), cleared by a sync that managed replicas without
// error, and otherwise left as it was by a sync that did not act.
func calculateStatus(set *gputaskv1.GPUTaskSet, active []*gputaskv1.GPUTask, plan setplan.Plan, acted bool, manageErr error, now time.Time) ownStatus {
	s := ownStatus{
		Replicas:           int32(len(active)),
		HeldBackReplicas:   plan.HeldBack,
		Nodes:              int32(len(plan.NodeGPUs)),
		Selector:           taskSelector(set).String(),
		ObservedGeneration: set.Generation,
		ReplicaFailure:     meta.FindStatusCondition(set.Status.Conditions, gputaskv1.ConditionReplicaFailure),
	}
	if acted {
		s.DrainingReplicas = plan.Draining
	}
	for _, t := range active {
		if !acted && gputaskv1.IsDraining(t) {
			s.DrainingReplicas++
		}
		if meta.IsStatusConditionTrue(t.Status.Conditions, gputaskv1.ConditionReady) {
			s.ReadyReplicas++
		}
		switch t.Status.Phase {
		case gputaskv1.GPUTaskRunning:
			s.RunningReplicas++
		case gputaskv1.GPUTaskPending, gputaskv1.GPUTaskScheduled, "":
			s.PendingReplicas++
		}
	}
	var rerr *replicaError
	invalid := setplan.InvalidSpec(set)
	switch {
	case errors.As(manageErr, &rerr):
		s.ReplicaFailure = &metav1.Condition{
			Type:               gputaskv1.ConditionReplicaFailure,
			Status:             metav1.ConditionTrue,
			Reason:             rerr.reason,
			Message:            failureMessage(set, rerr),
			ObservedGeneration: set.Generation,
			LastTransitionTime: metav1.NewTime(now),
		}
	case len(invalid) > 0:
		s.ReplicaFailure = &metav1.Condition{
			Type:               gputaskv1.ConditionReplicaFailure,
			Status:             metav1.ConditionTrue,
			Reason:             gputaskv1.ReasonInvalidSpec,
			Message:            invalidSpecMessage(invalid),
			ObservedGeneration: set.Generation,
			LastTransitionTime: metav1.NewTime(now),
		}
	case acted && manageErr == nil,
		s.ReplicaFailure != nil && s.ReplicaFailure.Reason == gputaskv1.ReasonInvalidSpec:
		// The spec is valid again: its InvalidSpec goes even when this
		// sync could not act.
		s.ReplicaFailure = nil
	}
	return s
}

// ownStatusOf reads the owned fields from a set's status.
func ownStatusOf(set *gputaskv1.GPUTaskSet) ownStatus {
	st := set.Status
	return ownStatus{
		Replicas:           st.Replicas,
		RunningReplicas:    st.RunningReplicas,
		PendingReplicas:    st.PendingReplicas,
		ReadyReplicas:      st.ReadyReplicas,
		DrainingReplicas:   st.DrainingReplicas,
		HeldBackReplicas:   st.HeldBackReplicas,
		Nodes:              st.Nodes,
		Selector:           st.Selector,
		ObservedGeneration: st.ObservedGeneration,
		ReplicaFailure:     meta.FindStatusCondition(st.Conditions, gputaskv1.ConditionReplicaFailure),
	}
}

// equal reports whether two owned statuses would read the same to a user.
// A condition's transition time is not compared: it only moves when the
// condition's status does.
func (s ownStatus) equal(o ownStatus) bool {
	if s.Replicas != o.Replicas || s.RunningReplicas != o.RunningReplicas ||
		s.PendingReplicas != o.PendingReplicas || s.HeldBackReplicas != o.HeldBackReplicas ||
		s.ReadyReplicas != o.ReadyReplicas || s.DrainingReplicas != o.DrainingReplicas ||
		s.Nodes != o.Nodes || s.Selector != o.Selector || s.ObservedGeneration != o.ObservedGeneration {
		return false
	}
	a, b := s.ReplicaFailure, o.ReplicaFailure
	if a == nil || b == nil {
		return a == b
	}
	return a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message && a.ObservedGeneration == b.ObservedGeneration
}

// countsDifferOnly reports whether o differs from s in its counts alone.
func (s ownStatus) countsDifferOnly(o ownStatus) bool {
	if s.equal(o) {
		return false
	}
	counts := s
	counts.Replicas, counts.RunningReplicas, counts.PendingReplicas = o.Replicas, o.RunningReplicas, o.PendingReplicas
	counts.ReadyReplicas, counts.DrainingReplicas, counts.HeldBackReplicas = o.ReadyReplicas, o.DrainingReplicas, o.HeldBackReplicas
	counts.Nodes = o.Nodes
	return counts.equal(o)
}

// applyStatus writes the owned fields with server-side apply, as this
// controller's field manager, and only when they differ from what the set
// shows. The autoscaler applies its own fields as its own manager, so
// neither write can undo the other's and no write needs a fresh read.
func (c *Controller) applyStatus(ctx context.Context, cached *gputaskv1.GPUTaskSet, want ownStatus) error {
	if ownStatusOf(cached).equal(want) {
		return nil
	}
	status := applyv1.GPUTaskSetStatus().
		WithReplicas(want.Replicas).
		WithRunningReplicas(want.RunningReplicas).
		WithPendingReplicas(want.PendingReplicas).
		WithReadyReplicas(want.ReadyReplicas).
		WithDrainingReplicas(want.DrainingReplicas).
		WithHeldBackReplicas(want.HeldBackReplicas).
		WithNodes(want.Nodes).
		WithSelector(want.Selector).
		WithObservedGeneration(want.ObservedGeneration)
	if want.ReplicaFailure != nil {
		// SetStatusCondition keeps the old transition time when the status
		// does not change, as the API conventions ask.
		conds := slices.Clone(cached.Status.Conditions)
		meta.SetStatusCondition(&conds, *want.ReplicaFailure)
		cond := meta.FindStatusCondition(conds, gputaskv1.ConditionReplicaFailure)
		status.WithConditions(metav1apply.Condition().
			WithType(cond.Type).WithStatus(cond.Status).WithReason(cond.Reason).WithMessage(cond.Message).
			WithObservedGeneration(cond.ObservedGeneration).WithLastTransitionTime(cond.LastTransitionTime))
	}
	apply := applyv1.GPUTaskSet(cached.Name, cached.Namespace).WithStatus(status)
	_, err := c.statusclientset.GputaskV1().GPUTaskSets(cached.Namespace).ApplyStatus(ctx, apply,
		metav1.ApplyOptions{FieldManager: ControllerName, Force: true})
	switch {
	case apierrors.IsNotFound(err):
		// The set is gone; the delete event brings a sync that cleans up.
		return nil
	case err != nil:
		return fmt.Errorf("applying status of gputaskset %s: %w", klog.KObj(cached), err)
	}
	c.statusPacer.wrote(cache.MetaObjectToName(cached))
	return nil
}
