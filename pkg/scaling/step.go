package scaling

import "fmt"

// stepRule is the Step policy: each metric adds StepUp tasks above its
// UpThreshold and removes StepDown below its DownThreshold (rule 1).
type stepRule struct{}

func (stepRule) ask(in *Inputs, d *Decision) step {
	for i, m := range in.Metrics {
		if d.Metrics[i].Err == nil {
			d.Metrics[i].Desired, d.Metrics[i].Reason = stepDesired(in.Current, m, in.Policy)
		}
	}
	d.Inputs = summarizeInputs(*in, d.Metrics, func(m MetricInput) string {
		return " up=" + FormatValue(m.UpThreshold) + " down=" + FormatValue(m.DownThreshold)
	})
	// A Step ask is relative to the count: see restartStepWindow.
	d.relative = true
	return combine(*in, d)
}

// settle holds a scale-up while tasks are starting (rule 12).
func (stepRule) settle(in Inputs, d *Decision, s step) step {
	return waitForStartingTasks(in, d, s, nil)
}

// burstLevel: a Step reading is a burst at Factor times its up threshold.
func (stepRule) burstLevel(m MetricInput) (float64, string) { return m.UpThreshold, "upThreshold" }

// demandLevel: a Step set is content between its thresholds, so their
// middle is the load one task carries.
func (stepRule) demandLevel(m MetricInput) float64 { return (m.UpThreshold + m.DownThreshold) / 2 }

func stepDesired(current int32, m MetricInput, p Policy) (int32, string) {
	switch {
	case m.Value > m.UpThreshold:
		return addSat(current, int64(p.StepUp)), ReasonScaleUpAboveThreshold
	case m.Value < m.DownThreshold:
		return max(current-p.StepDown, 0), ReasonScaleDownBelowThreshold
	default:
		return current, ReasonWithinThresholds
	}
}

// waitForStartingTasks holds a scale-up while tasks added earlier are still
// starting. GPU workers load a model for minutes; a load index that has not
// felt them yet would otherwise ask for the same tasks again every interval.
// fromServing, when set, is what the serving tasks alone ask for: a policy
// whose asks scale with the tasks still scales up when they ask for more
// than Current.
func waitForStartingTasks(in Inputs, d *Decision, s step, fromServing func(serving int32) int32) step {
	if in.Starting == 0 || s.desired <= in.Current {
		return s
	}
	if fromServing != nil {
		serving := in.Current - in.Starting
		if n := fromServing(serving); n > in.Current {
			return step{desired: min(n, s.desired), reason: s.reason,
				message: fmt.Sprintf("%s; computed from the %d serving tasks, as %d are starting", s.message, serving, in.Starting)}
		}
	}
	return s.limited(in.Current, ReasonWaitingForStartingTasks,
		fmt.Sprintf("scale-up to %d waits: %d tasks are starting", s.desired, in.Starting))
}
