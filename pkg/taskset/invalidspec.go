package taskset

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// scaleInHeldSuffix ends the InvalidSpec message.
const scaleInHeldSuffix = "; scale-in is held until it is fixed"

// invalidOwnSpec validates the fields of the set that this controller reads.
// The autoscaling fields are left to the autoscaler, which reports them on
// its own SpecValid condition.
func invalidOwnSpec(set *gputaskv1.GPUTaskSet) field.ErrorList {
	spec := set.Spec
	spec.Autoscaling = nil
	return gputaskv1.ValidateTaskSetSpec(&spec)
}

// invalidSpecMessage is the ReplicaFailure message for errs. It depends on
// the spec alone, so a set that stays invalid costs no status write, and it
// is capped like the other ReplicaFailure messages.
func invalidSpecMessage(errs field.ErrorList) string {
	msg := errs.ToAggregate().Error()
	return gputaskv1.TruncateMessage(msg, maxFailureMessage-len(scaleInHeldSuffix)) + scaleInHeldSuffix
}

// holdScaleIn takes every removal out of plan: with the minimum age or the
// drain timeout unknown, no task can be chosen, drained or deleted safely.
// Creations and drains taken back still happen, since they remove nothing.
// The held removals count as held back, and no retry is due: only a change
// of the spec, which brings its own event, can release them.
func holdScaleIn(plan ScalePlan, active []*gputaskv1.GPUTask) ScalePlan {
	plan.HeldBack += int32(len(plan.Delete) + len(plan.Drain))
	plan.Delete, plan.Drain = nil, nil
	plan.RetryAfter = 0
	plan.Draining = 0
	for _, t := range withoutTasks(active, plan.Undrain) {
		if gputaskv1.IsDraining(t) {
			plan.Draining++
		}
	}
	return plan
}
