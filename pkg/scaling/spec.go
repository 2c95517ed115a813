package scaling

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// MinInterval keeps a tiny spec.autoscaling.interval from turning the loop
// into a busy loop against the load-index endpoint.
const MinInterval = time.Second

// IntervalOf is autoscaling.interval, defaulted and floored at MinInterval.
func IntervalOf(spec *gputaskv1.AutoscalingSpec) time.Duration {
	if spec.Interval == nil {
		return DefaultInterval
	}
	return max(spec.Interval.Duration, MinInterval)
}

// StartupTimeoutOf is autoscaling.startupTimeout, defaulted.
func StartupTimeoutOf(spec *gputaskv1.AutoscalingSpec) time.Duration {
	if spec.StartupTimeout == nil || spec.StartupTimeout.Duration <= 0 {
		return DefaultStartupTimeout
	}
	return spec.StartupTimeout.Duration
}

// TaskStarts is what startup holding counts of a set's live tasks: those
// that are neither draining nor finished.
func TaskStarts(tasks []*gputaskv1.GPUTask) []TaskStart {
	starts := make([]TaskStart, 0, len(tasks))
	for _, t := range tasks {
		if t.DeletionTimestamp != nil || gputaskv1.IsDraining(t) ||
			t.Status.Phase == gputaskv1.GPUTaskSucceeded || t.Status.Phase == gputaskv1.GPUTaskFailed {
			continue
		}
		starts = append(starts, TaskStart{
			Name:    t.Name,
			Created: t.CreationTimestamp.Time,
			Ready:   meta.IsStatusConditionTrue(t.Status.Conditions, gputaskv1.ConditionReady),
		})
	}
	return starts
}

// MetricFor is a metric's thresholds and target, defaults applied.
func MetricFor(spec gputaskv1.MetricSpec) MetricInput {
	return MetricInput{
		Name:          spec.Name,
		UpThreshold:   quantityOr(spec.UpThreshold, DefaultUpThreshold),
		DownThreshold: quantityOr(spec.DownThreshold, DefaultDownThreshold),
		Target:        quantityOr(spec.Target, 0),
		Role:          spec.Role,
	}
}

func quantityOr(q *resource.Quantity, def float64) float64 {
	if q == nil {
		return def
	}
	return q.AsApproximateFloat64()
}

// InputsFor gathers everything Decide needs from the set, defaults
// applied: the autoscaler and the replay read a set the same way.
func InputsFor(set *gputaskv1.GPUTaskSet, now time.Time, readings []MetricInput, capacity *int32, recs []gputaskv1.Recommendation) Inputs {
	spec := set.Spec.Autoscaling
	in := Inputs{
		Now:     now,
		Current: ptrOr(set.Spec.Replicas, 1),
		Min:     ptrOr(spec.MinReplicas, DefaultMinReplicas),
		Max:     spec.MaxReplicas,
		Policy: Policy{
			Type:      spec.Policy.Type,
			StepUp:    ptrOr(spec.Policy.StepUp, DefaultStepUp),
			StepDown:  ptrOr(spec.Policy.StepDown, DefaultStepDown),
			Tolerance: quantityOr(spec.Policy.Tolerance, DefaultTolerance),
			SLO:       SLOOf(spec.Policy.SLO),
		},
		Interval:            IntervalOf(spec),
		Metrics:             readings,
		Recommendations:     recs,
		StabilizationWindow: DefaultStabilizationWindow,
		ConsecutiveFailures: set.Status.ConsecutiveFailures,
		FailureThreshold:    ptrOr(spec.FailureThreshold, DefaultFailureThreshold),
		Capacity:            capacity,
		HeldBack:            set.Status.HeldBackReplicas,
		Paused:              gputaskv1.IsPaused(set),
		Stopped:             gputaskv1.IsStopped(set),
		DryRun:              spec.DryRun,
	}
	if _, ok := policyRule(in.Policy).(looksAhead); ok {
		// Until the set has measured its starts, a task is assumed to take
		// its whole start-up timeout.
		in.Startup = StartupTimeoutOf(spec)
	}
	if spec.ScaleDownStabilizationWindow != nil {
		in.StabilizationWindow = spec.ScaleDownStabilizationWindow.Duration
	}
	if l := spec.ScaleUpLimit; l != nil {
		in.ScaleUpLimit = &ScaleUpLimit{Tasks: l.Tasks, Period: DefaultScaleUpPeriod}
		if l.Period != nil {
			in.ScaleUpLimit.Period = l.Period.Duration
		}
	}
	if set.Status.LastScaleTime != nil {
		in.LastScaleTime = set.Status.LastScaleTime.Time
	}
	if b := spec.Burst; b != nil {
		in.Burst = &Burst{Factor: quantityOr(b.Factor, DefaultBurstFactor), Window: DefaultBurstWindow}
		if b.Window != nil {
			in.Burst.Window = b.Window.Duration
		}
	}
	if set.Status.BurstUntil != nil {
		in.BurstUntil = set.Status.BurstUntil.Time
	}
	in.Schedule = ScheduleAt(spec.Schedules, now)
	if pr := spec.Predictive; pr != nil {
		in.Predictive = &Predictive{Lead: StartupTimeoutOf(spec), Preview: pr.Mode == gputaskv1.PredictivePreview}
		if pr.LeadTime != nil {
			in.Predictive.Lead = max(pr.LeadTime.Duration, 0)
		}
		if set.Status.Predictive != nil {
			in.History = DecodeHistory(set.Status.Predictive.History)
		}
	}
	if spec.Fallback != nil {
		in.Fallback = &spec.Fallback.Replicas
	}
	return in
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// PredictiveStatusOf is status.predictive after decision d, or nil when
// predictive pre-warming is off.
func PredictiveStatusOf(set *gputaskv1.GPUTaskSet, d Decision) *gputaskv1.PredictiveStatus {
	if set.Spec.Autoscaling == nil || set.Spec.Autoscaling.Predictive == nil {
		return nil
	}
	return &gputaskv1.PredictiveStatus{History: d.History.Encode(), ForecastReplicas: d.Forecast, Message: d.ForecastMessage}
}
