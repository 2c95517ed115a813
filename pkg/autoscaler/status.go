package autoscaler

import (
	"context"
	"fmt"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	applyv1 "github.com/gputask/gputask-controller/pkg/generated/applyconfiguration/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/scaling"
)

// Condition reasons besides the decision reasons, following the HPA's.
const (
	ReasonReadyForNewScale   = "ReadyForNewScale"
	ReasonSucceededRescale   = "SucceededRescale"
	ReasonFailedUpdateScale  = "FailedUpdateScale"
	ReasonScalingDisabled    = "ScalingDisabled"
	ReasonBackoffUpscale     = "BackoffUpscale"
	ReasonValidMetricFound   = "ValidMetricFound"
	ReasonDesiredWithinRange = "DesiredWithinRange"
	ReasonLoadIndexAvailable = "LoadIndexAvailable"
)

// autoscalerConditions are the condition types this loop owns. The set
// controller owns ReplicaFailure. SpecValid is only present while the spec
// is invalid (see validate.go).
var autoscalerConditions = []string{
	gputaskv1.ConditionAbleToScale, gputaskv1.ConditionScalingActive,
	gputaskv1.ConditionScalingLimited, gputaskv1.ConditionFallback,
	gputaskv1.ConditionSpecValid,
}

// desiredStatus is the set's status with the autoscaler's fields as this
// evaluation found them, and every other field as it was.
func desiredStatus(set *gputaskv1.GPUTaskSet, in scaling.Inputs, d scaling.Decision, now time.Time, configErrs []error, scaledAt time.Time, scaleErr error) *gputaskv1.GPUTaskSetStatus {
	status := set.Status.DeepCopy()
	ts := metav1.NewTime(now)
	scaled := !scaledAt.IsZero()

	if d.Winner >= 0 {
		status.LoadIndex = scaling.FormatValue(d.Metrics[d.Winner].Value)
	}
	status.DesiredReplicas = &d.Desired
	status.CapacityReplicas = in.Capacity
	if scaled {
		status.LastScaleTime = &metav1.Time{Time: scaledAt}
	}
	status.LastDecision = scaling.LastDecision(in, d, ts)
	status.Metrics = scaling.MetricStatuses(d, ts)
	status.ConsecutiveFailures = d.ConsecutiveFailures
	status.Recommendations = d.Recommendations
	status.Predictive = scaling.PredictiveStatusOf(set, d)
	status.BurstUntil = nil
	if d.BurstUntil.After(now) {
		status.BurstUntil = &metav1.Time{Time: d.BurstUntil}
	}

	// Evaluated means the spec passed validation (see validate.go).
	meta.RemoveStatusCondition(&status.Conditions, gputaskv1.ConditionSpecValid)
	setCondition(status, ts, ableToScale(in, d, scaled, scaleErr))
	setCondition(status, ts, scalingActive(in, d, configErrs))
	setCondition(status, ts, scalingLimited(d))
	if set.Spec.Autoscaling.Fallback != nil {
		setCondition(status, ts, fallbackCondition(d))
	} else {
		meta.RemoveStatusCondition(&status.Conditions, gputaskv1.ConditionFallback)
	}
	return status
}

func setCondition(status *gputaskv1.GPUTaskSetStatus, ts metav1.Time, cond metav1.Condition) {
	cond.LastTransitionTime = ts
	meta.SetStatusCondition(&status.Conditions, cond)
}

func condition(condType string, ok bool, reason, message string) metav1.Condition {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	return metav1.Condition{Type: condType, Status: status, Reason: reason, Message: message}
}

// ableToScale is False while the autoscaler may not or could not act.
func ableToScale(in scaling.Inputs, d scaling.Decision, scaled bool, scaleErr error) metav1.Condition {
	const t = gputaskv1.ConditionAbleToScale
	switch {
	case in.Stopped:
		return condition(t, false, scaling.ReasonStopped, d.Message)
	case in.Paused:
		return condition(t, false, ReasonScalingDisabled, d.Message)
	case scaleErr != nil:
		return condition(t, false, ReasonFailedUpdateScale, fmt.Sprintf("the autoscaler failed to update the scale subresource: %v", scaleErr))
	case scaled && d.Reason == scaling.ReasonBurst:
		return condition(t, true, d.Reason, fmt.Sprintf("the autoscaler set the size to %d at once: %s", d.Desired, d.Message))
	case scaled:
		return condition(t, true, ReasonSucceededRescale, fmt.Sprintf("the autoscaler set the size to %d", d.Desired))
	case d.Reason == scaling.ReasonScaleDownStabilized, d.Reason == scaling.ReasonTasksTooYoung, d.Reason == scaling.ReasonHeldDuringBurst,
		d.Reason == scaling.ReasonWaitingForInterval, d.Reason == scaling.ReasonWaitingForStartingTasks:
		return condition(t, false, d.Reason, d.Message)
	case d.Reason == scaling.ReasonScaleUpLimited && d.Desired == in.Current:
		// Waiting out the scale-up period, as the HPA's BackoffUpscale.
		return condition(t, false, ReasonBackoffUpscale, d.Message)
	default:
		return condition(t, true, ReasonReadyForNewScale, "recommended size matches current size")
	}
}

func scalingActive(in scaling.Inputs, d scaling.Decision, configErrs []error) metav1.Condition {
	const t = gputaskv1.ConditionScalingActive
	for _, err := range configErrs {
		if err != nil {
			return condition(t, false, gputaskv1.ReasonInvalidMetricSpec, err.Error())
		}
	}
	// Asked of the metrics, not of d.Reason, which a bound may have
	// replaced: the set is not scaled by its load either way.
	if reason, msg := scaling.CheckMetrics(in.Policy, in.Metrics); reason != "" {
		return condition(t, false, reason, fmt.Sprintf("%s; holding at %d", msg, in.Current))
	}
	if in.EngineUnavailable != "" {
		return condition(t, false, gputaskv1.ReasonEngineProfileUnavailable, fmt.Sprintf("%s; holding at %d", in.EngineUnavailable, in.Current))
	}
	for _, m := range d.Metrics {
		if m.Err != nil {
			return condition(t, false, scaling.ReasonFailedGetLoadIndex, fmt.Sprintf("metric %q: %v", m.Name, m.Err))
		}
	}
	// Only the SLO policy gives this reason: it holds until a request
	// has finished.
	for _, m := range d.Metrics {
		if m.Reason == scaling.ReasonServiceTimeUnknown {
			return condition(t, false, scaling.ReasonServiceTimeUnknown, d.Message)
		}
	}
	if len(d.Metrics) == 0 {
		return condition(t, false, gputaskv1.ReasonInvalidMetricSpec, "no metrics configured")
	}
	return condition(t, true, ReasonValidMetricFound, "the autoscaler read every load index: "+d.Inputs)
}

func scalingLimited(d scaling.Decision) metav1.Condition {
	const t = gputaskv1.ConditionScalingLimited
	if d.SLO != nil && d.SLO.Unmet {
		// Says what a bound alone would not: how far from the SLO the
		// reachable count leaves the pool.
		return condition(t, true, scaling.ReasonSLOOutOfReach, d.SLO.Message)
	}
	if len(d.Limits) == 0 {
		return condition(t, false, ReasonDesiredWithinRange, "the desired count is within the acceptable range")
	}
	return condition(t, true, d.Limits[len(d.Limits)-1], d.Message)
}

func fallbackCondition(d scaling.Decision) metav1.Condition {
	const t = gputaskv1.ConditionFallback
	if d.Fallback {
		return condition(t, true, scaling.ReasonFallbackReplicas, d.Message)
	}
	return condition(t, false, ReasonLoadIndexAvailable, "fallback is not in use")
}

// applyStatus applies the autoscaler's fields when they changed in more
// than their timestamps, with server-side apply as this controller's field
// manager. The set controller applies its own fields as its own manager, so
// neither write can undo the other's and no write needs a fresh read.
func (c *Controller) applyStatus(ctx context.Context, set *gputaskv1.GPUTaskSet, want *gputaskv1.GPUTaskSetStatus) error {
	if sameIgnoringTimes(&set.Status, want) {
		return nil
	}
	apply := applyv1.GPUTaskSet(set.Name, set.Namespace).WithStatus(statusApply(want))
	_, err := c.gputaskclientset.GputaskV1().GPUTaskSets(set.Namespace).ApplyStatus(ctx, apply,
		metav1.ApplyOptions{FieldManager: ControllerName, Force: true})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("applying status: %w", err)
	}
	return nil
}

// statusApply is the autoscaler's part of status as an apply
// configuration: its fields only, so that the set controller's stay the set
// controller's. A field left empty is left out, as the status's JSON leaves
// it out, and the API server then removes it, as this manager no longer
// sets it.
func statusApply(status *gputaskv1.GPUTaskSetStatus) *applyv1.GPUTaskSetStatusApplyConfiguration {
	out := applyv1.GPUTaskSetStatus()
	if status.LoadIndex != "" {
		out.WithLoadIndex(status.LoadIndex)
	}
	if status.DesiredReplicas != nil {
		out.WithDesiredReplicas(*status.DesiredReplicas)
	}
	if status.CapacityReplicas != nil {
		out.WithCapacityReplicas(*status.CapacityReplicas)
	}
	if status.StartingReplicas != 0 {
		out.WithStartingReplicas(status.StartingReplicas)
	}
	if status.QueuedReplicas != 0 {
		out.WithQueuedReplicas(status.QueuedReplicas)
	}
	if status.LastScaleTime != nil {
		out.WithLastScaleTime(*status.LastScaleTime)
	}
	if d := status.LastDecision; d != nil {
		decision := applyv1.ScalingDecision().WithTime(d.Time).WithFrom(d.From).WithTo(d.To).WithReason(d.Reason)
		if d.Inputs != "" {
			decision.WithInputs(d.Inputs)
		}
		if d.Message != "" {
			decision.WithMessage(d.Message)
		}
		if d.PredictedWait != "" {
			decision.WithPredictedWait(d.PredictedWait)
		}
		if d.PredictedTTFT != "" {
			decision.WithPredictedTTFT(d.PredictedTTFT)
		}
		if d.PredictedITL != "" {
			decision.WithPredictedITL(d.PredictedITL)
		}
		if d.BurstHeadroom != "" {
			decision.WithBurstHeadroom(d.BurstHeadroom)
		}
		if c := d.Capacity; c != nil {
			capacity := applyv1.TaskCapacity().WithSlotsPerTask(c.SlotsPerTask).WithSource(c.Source)
			if c.Context != "" {
				capacity.WithContext(c.Context)
			}
			if f := c.Fit; f != nil {
				fit := applyv1.ITLFitStatus().WithReadings(f.Readings).WithLastReadingTime(f.LastReadingTime)
				if f.Alpha != "" {
					fit.WithAlpha(f.Alpha)
				}
				if f.Beta != "" {
					fit.WithBeta(f.Beta)
				}
				capacity.WithFit(fit)
			}
			decision.WithCapacity(capacity)
		}
		out.WithLastDecision(decision)
	}
	for _, m := range status.Metrics {
		metric := applyv1.MetricStatus().WithName(m.Name)
		if m.Value != "" {
			metric.WithValue(m.Value)
		}
		if m.DesiredReplicas != nil {
			metric.WithDesiredReplicas(*m.DesiredReplicas)
		}
		if m.Error != "" {
			metric.WithError(m.Error)
		}
		if m.LastReadTime != nil {
			metric.WithLastReadTime(*m.LastReadTime)
		}
		out.WithMetrics(metric)
	}
	if status.ConsecutiveFailures != 0 {
		out.WithConsecutiveFailures(status.ConsecutiveFailures)
	}
	if status.BurstUntil != nil {
		out.WithBurstUntil(*status.BurstUntil)
	}
	if p := status.Predictive; p != nil {
		predictive := applyv1.PredictiveStatus()
		if p.History != "" {
			predictive.WithHistory(p.History)
		}
		if p.ForecastReplicas != nil {
			predictive.WithForecastReplicas(*p.ForecastReplicas)
		}
		if p.Message != "" {
			predictive.WithMessage(p.Message)
		}
		out.WithPredictive(predictive)
	}
	for _, r := range status.Recommendations {
		out.WithRecommendations(applyv1.Recommendation().WithTime(r.Time).WithReplicas(r.Replicas))
	}
	for _, t := range autoscalerConditions {
		if c := meta.FindStatusCondition(status.Conditions, t); c != nil {
			cond := metav1apply.Condition().WithType(c.Type).WithStatus(c.Status).WithReason(c.Reason).
				WithMessage(c.Message).WithLastTransitionTime(c.LastTransitionTime)
			if c.ObservedGeneration != 0 {
				cond.WithObservedGeneration(c.ObservedGeneration)
			}
			out.WithConditions(cond)
		}
	}
	return out
}

// withoutAutoscalerStatus is status with every autoscaler field cleared.
func withoutAutoscalerStatus(status *gputaskv1.GPUTaskSetStatus) *gputaskv1.GPUTaskSetStatus {
	out := status.DeepCopy()
	applyAutoscalerStatus(out, &gputaskv1.GPUTaskSetStatus{})
	return out
}

// applyAutoscalerStatus copies the autoscaler's fields from src to dst and
// leaves the set controller's fields alone.
func applyAutoscalerStatus(dst, src *gputaskv1.GPUTaskSetStatus) {
	dst.LoadIndex = src.LoadIndex
	dst.DesiredReplicas = src.DesiredReplicas
	dst.CapacityReplicas = src.CapacityReplicas
	dst.StartingReplicas = src.StartingReplicas
	dst.QueuedReplicas = src.QueuedReplicas
	dst.LastScaleTime = src.LastScaleTime
	dst.LastDecision = src.LastDecision
	dst.Metrics = src.Metrics
	dst.ConsecutiveFailures = src.ConsecutiveFailures
	dst.BurstUntil = src.BurstUntil
	dst.Predictive = src.Predictive
	dst.Recommendations = src.Recommendations
	for _, t := range autoscalerConditions {
		if cond := meta.FindStatusCondition(src.Conditions, t); cond != nil {
			meta.SetStatusCondition(&dst.Conditions, *cond)
		} else {
			meta.RemoveStatusCondition(&dst.Conditions, t)
		}
	}
}

// sameIgnoringTimes compares the autoscaler's fields, leaving out the times
// that move at every evaluation: the decision time, each metric's read time,
// the ITL fit's last reading and the recommendations' times. A steady set therefore causes no writes;
// the times are written along with the next real change. The loop keeps the
// exact recommendation times in memory; only after a restart does it fall
// back to the written ones, which may be older and so expire a little early.
func sameIgnoringTimes(a, b *gputaskv1.GPUTaskSetStatus) bool {
	return apiequality.Semantic.DeepEqual(timeless(a), timeless(b))
}

func timeless(s *gputaskv1.GPUTaskSetStatus) gputaskv1.GPUTaskSetStatus {
	var out gputaskv1.GPUTaskSetStatus
	applyAutoscalerStatus(&out, s)
	out = *out.DeepCopy()
	if out.LastDecision != nil {
		out.LastDecision.Time = metav1.Time{}
		if c := out.LastDecision.Capacity; c != nil && c.Fit != nil {
			c.Fit.LastReadingTime = metav1.Time{}
		}
	}
	for i := range out.Metrics {
		out.Metrics[i].LastReadTime = nil
	}
	for i := range out.Recommendations {
		out.Recommendations[i].Time = metav1.Time{}
	}
	for i := range out.Conditions {
		out.Conditions[i].LastTransitionTime = metav1.Time{}
	}
	if len(out.Conditions) == 0 {
		out.Conditions = nil
	}
	if len(out.Metrics) == 0 {
		out.Metrics = nil
	}
	if len(out.Recommendations) == 0 {
		out.Recommendations = nil
	}
	return out
}
