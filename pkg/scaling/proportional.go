package scaling

import (
	"fmt"
	"math"
)

// proportionalRule is the Proportional policy, the HPA's rule: each metric
// asks for ceil(serving × value / target) tasks unless |value/target − 1|
// ≤ Tolerance (rule 1).
type proportionalRule struct{}

func (proportionalRule) ask(in *Inputs, d *Decision) step {
	for i, m := range in.Metrics {
		if d.Metrics[i].Err == nil {
			d.Metrics[i].Desired, d.Metrics[i].Reason, d.Metrics[i].Err = proportional(in.Current, perTaskBase(*in), m, in.Policy.Tolerance)
		}
	}
	d.Inputs = summarizeInputs(*in, d.Metrics, func(m MetricInput) string { return " target=" + FormatValue(m.Target) })
	return combine(*in, d)
}

// settle holds a scale-up while tasks are starting, unless the serving
// tasks alone already ask for more than Current (rule 12).
func (proportionalRule) settle(in Inputs, d *Decision, s step) step {
	return waitForStartingTasks(in, d, s, func(serving int32) int32 { return proportionalFromServing(in, d, serving) })
}

// burstLevel: a Proportional reading is a burst at Factor times its target.
func (proportionalRule) burstLevel(m MetricInput) (float64, string) { return m.Target, "target" }

// demandLevel: the target is the load one task carries.
func (proportionalRule) demandLevel(m MetricInput) float64 { return m.Target }

// perTaskBase is the task count a Proportional reading is multiplied by:
// the tasks that serve. A load index is measured over the workers that
// take work, so while tasks are starting the HPA's rule for a metric of
// the Ready pods applies (getUsageRatioReplicaCount multiplies by the
// Ready pods, not by spec.replicas). Multiplied by Current instead, a
// reading taken while half the set is still loading would ask for twice
// the tasks the load needs, and that ask, recorded as a recommendation,
// would hold the overshoot through the whole stabilization window. With no
// task serving yet the reading says nothing per task, and Current stays
// the base.
func perTaskBase(in Inputs) int32 {
	if serving := in.Current - in.Starting; in.Starting > 0 && serving > 0 {
		return serving
	}
	return in.Current
}

func proportional(current, base int32, m MetricInput, tolerance float64) (int32, string, error) {
	if !(m.Target > 0) || math.IsInf(m.Target, 0) {
		return 0, "", fmt.Errorf("target must be a finite number above 0, got %v", m.Target)
	}
	ratio := m.Value / m.Target
	if current == 0 {
		// No tasks means no per-task load; read the value as the total load
		// and start as many tasks as it takes to bring each to the target.
		desired := ceilSat(ratio)
		if desired == 0 {
			return 0, ReasonWithinTolerance, nil
		}
		return desired, ReasonProportionalScaleUp, nil
	}
	if math.Abs(ratio-1) <= tolerance {
		return current, ReasonWithinTolerance, nil
	}
	desired := ceilSat(float64(base) * ratio)
	switch {
	case desired > current:
		return desired, ReasonProportionalScaleUp, nil
	case desired < current:
		return desired, ReasonProportionalScaleDown, nil
	default:
		return current, ReasonWithinTolerance, nil
	}
}

// proportionalFromServing is the largest ceil(serving × value / target)
// over the metrics that were read.
func proportionalFromServing(in Inputs, d *Decision, serving int32) int32 {
	var best int32
	for i, m := range d.Metrics {
		target := in.Metrics[i].Target
		if m.Err != nil || !(target > 0) || math.IsInf(target, 0) {
			continue
		}
		best = max(best, ceilSat(float64(serving)*m.Value/target))
	}
	return best
}
