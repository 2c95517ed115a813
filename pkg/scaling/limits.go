package scaling

import (
	"fmt"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// The rules that bound, hold or cap the count Decide computed from the
// metrics, in the order Decide applies them.

// bound applies [Min, Max] and notes the limit that applied.
func bound(in Inputs, d *Decision, s step) step {
	switch {
	case s.desired < in.Min:
		d.addLimit(ReasonTooFewReplicas)
		return s.limited(in.Min, ReasonTooFewReplicas, fmt.Sprintf("raised to minReplicas %d%s", in.Min, ofSchedule(in.floorFrom)))
	case s.desired > in.Max:
		d.addLimit(ReasonTooManyReplicas)
		return s.limited(in.Max, ReasonTooManyReplicas, fmt.Sprintf("capped at maxReplicas %d%s", in.Max, ofSchedule(in.ceilingFrom)))
	}
	return s
}

func ofSchedule(from string) string {
	if from == "" {
		return ""
	}
	return " of " + from
}

// stabilize keeps a scale-down at or above the highest recommendation within
// the window, so a short dip in load removes nothing.
func stabilize(in Inputs, d *Decision, s step) step {
	if s.desired >= in.Current || in.StabilizationWindow == 0 {
		return s
	}
	highest := s.desired
	for _, r := range d.Recommendations {
		highest = max(highest, r.Replicas)
	}
	floor := min(highest, in.Current)
	if floor <= s.desired {
		return s
	}
	d.Stabilized = true
	return s.limited(floor, ReasonScaleDownStabilized,
		fmt.Sprintf("scale-down held at %d, the highest recommendation within the last %v", floor, in.StabilizationWindow))
}

// oneStepPerInterval holds any change of the count within Interval of the
// last one. Evaluations may come sooner than every interval (a spec edit is
// evaluated at once, an error is retried); the steps may not.
func oneStepPerInterval(in Inputs, d *Decision, s step) step {
	if s.desired == in.Current {
		return s
	}
	ok, wait := NextStep(in.LastScaleTime, in.Interval, in.Now)
	if ok {
		return s
	}
	d.RetryAfter = wait
	return s.limited(in.Current, ReasonWaitingForInterval,
		fmt.Sprintf("change to %d waits %v: at most one step per interval of %v", s.desired, wait, in.Interval))
}

// limitScaleUp allows at most Tasks more per Period: one scale-up of at most
// Tasks, then none until Period has passed since the last scale.
func limitScaleUp(in Inputs, d *Decision, s step) step {
	limit := in.ScaleUpLimit
	if limit == nil || s.desired <= in.Current {
		return s
	}
	if !in.LastScaleTime.IsZero() {
		if wait := in.LastScaleTime.Add(limit.Period).Sub(in.Now); wait > 0 {
			d.addLimit(ReasonScaleUpLimited)
			return s.limited(in.Current, ReasonScaleUpLimited,
				fmt.Sprintf("scale-up to %d waits %v: at most %d tasks per %v", s.desired, wait, limit.Tasks, limit.Period))
		}
	}
	if ceiling := addSat(in.Current, int64(limit.Tasks)); s.desired > ceiling {
		d.addLimit(ReasonScaleUpLimited)
		return s.limited(ceiling, ReasonScaleUpLimited,
			fmt.Sprintf("scale-up limited to %d: at most %d tasks per %v", ceiling, limit.Tasks, limit.Period))
	}
	return s
}

// capAtCapacity stops a scale-up at the tasks that fit. It never lowers the
// count below Current: tasks that already run keep their GPUs.
func capAtCapacity(in Inputs, d *Decision, s step) step {
	if in.Capacity == nil || s.desired <= in.Current || s.desired <= *in.Capacity {
		return s
	}
	capped := max(in.Current, *in.Capacity)
	d.addLimit(ReasonCapacityLimited)
	limit := in.CapacityLimit
	if limit == "" {
		limit = "the GPU nodes"
	}
	verb := "capped"
	if capped > *in.Capacity {
		verb = "held"
	}
	return s.limited(capped, ReasonCapacityLimited,
		fmt.Sprintf("%s at %d: only %d tasks fit %s", verb, capped, *in.Capacity, limit))
}

// holdYoungTasks waits for the last scale-in to finish: while it keeps
// tasks younger than minTaskAge, lowering the count further only piles up
// removals that cannot happen yet.
func holdYoungTasks(in Inputs, s step) step {
	if in.HeldBack == 0 || s.desired >= in.Current {
		return s
	}
	return s.limited(in.Current, ReasonTasksTooYoung,
		fmt.Sprintf("scale-down to %d waits: %d tasks are younger than minTaskAge", s.desired, in.HeldBack))
}

func applyPauseAndStop(in Inputs, d *Decision) {
	var reason, why string
	switch {
	case in.Stopped:
		reason, why = ReasonStopped, "set is stopped ("+gputaskv1.AnnotationStopped+"=true)"
	case in.Paused:
		reason, why = ReasonPaused, "autoscaling is paused ("+gputaskv1.AnnotationPaused+"=true)"
	default:
		return
	}
	d.Message = fmt.Sprintf("%s; would scale to %d: %s", why, d.Desired, d.Message)
	d.Desired, d.Reason = in.Current, reason
}
