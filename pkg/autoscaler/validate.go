package autoscaler

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/scaling"
)

// maxSpecMessage keeps the list of field errors well below the API's
// 32768-character limit on a condition message.
const maxSpecMessage = 4096

// reportInvalidSpec checks a set's spec as the CRD's rules do. A set that
// fails (one stored before the rules existed, or under a relaxed CRD) is not
// evaluated: its autoscaler status is cleared, it gets SpecValid=False and
// ScalingActive=False with reason InvalidSpec naming the fields. It is
// checked again when its autoscaling changes and at the default interval,
// which costs no write while it stays the same. Values are never clamped or
// defaulted in its place. It returns whether the spec was invalid.
func (c *Controller) reportInvalidSpec(ctx context.Context, set *gputaskv1.GPUTaskSet) (bool, error) {
	errs := gputaskv1.ValidateTaskSetSpec(&set.Spec)
	if len(errs) == 0 {
		return false, nil
	}
	c.forget(cache.MetaObjectToName(set))
	msg := errs.ToAggregate().Error()
	if len(msg) > maxSpecMessage {
		msg = msg[:maxSpecMessage-3] + "..."
	}
	want := invalidSpecStatus(&set.Status, msg, metav1.NewTime(c.opts.Clock.Now()))
	if reason, why := missingRoles(set); reason != "" {
		// The HPA's users look for why scaling is inactive in ScalingActive:
		// it names what the SLO policy lacks, SpecValid every field.
		meta.SetStatusCondition(&want.Conditions, metav1.Condition{Type: gputaskv1.ConditionScalingActive, Status: metav1.ConditionFalse,
			Reason: reason, Message: fmt.Sprintf("%s; holding at %d", why, currentReplicas(set)), LastTransitionTime: metav1.NewTime(c.opts.Clock.Now())})
	}
	if sameIgnoringTimes(&set.Status, want) {
		return true, nil
	}
	c.recorder.Event(set, corev1.EventTypeWarning, gputaskv1.ReasonInvalidSpec, msg)
	if err := c.applyStatus(ctx, set, want); err != nil {
		return true, fmt.Errorf("reporting the invalid spec of gputaskset %s/%s: %w", set.Namespace, set.Name, err)
	}
	return true, nil
}

// invalidSpecStatus is status with the autoscaler's fields cleared, and
// SpecValid and ScalingActive False with reason InvalidSpec.
func invalidSpecStatus(status *gputaskv1.GPUTaskSetStatus, msg string, ts metav1.Time) *gputaskv1.GPUTaskSetStatus {
	out := withoutAutoscalerStatus(status)
	for _, t := range []string{gputaskv1.ConditionSpecValid, gputaskv1.ConditionScalingActive} {
		cond := metav1.Condition{Type: t, Status: metav1.ConditionFalse, Reason: gputaskv1.ReasonInvalidSpec, Message: msg, LastTransitionTime: ts}
		if old := meta.FindStatusCondition(status.Conditions, t); old != nil && old.Status == cond.Status {
			cond.LastTransitionTime = old.LastTransitionTime
		}
		meta.SetStatusCondition(&out.Conditions, cond)
	}
	return out
}

// missingRoles is scaling.CheckMetrics for a set's policy and metrics:
// why the policy cannot work from them (an SLO set without its roles), or
// empty strings.
func missingRoles(set *gputaskv1.GPUTaskSet) (reason, message string) {
	as := set.Spec.Autoscaling
	metrics := make([]scaling.MetricInput, len(as.Metrics))
	for i, m := range as.Metrics {
		metrics[i] = scaling.MetricFor(m)
	}
	return scaling.CheckMetrics(scaling.Policy{Type: as.Policy.Type}, metrics)
}
