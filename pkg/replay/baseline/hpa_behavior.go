package baseline

import (
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// This file models spec.behavior of an autoscaling/v2 HPA: the API
// server's defaulting and validation (pkg/apis/autoscaling/v2/defaults.go,
// pkg/apis/autoscaling/validation) and the controller's rules
// (pkg/controller/podautoscaler/horizontal.go), each named in its comment
// and in its test.

// GPUServingBehavior is the behavior an operator gives an HPA over workers
// that take minutes to start: scale up at once by whichever of 8 pods or
// 100 % per 15 s adds more, and scale down only after 5 minutes of lower
// recommendations, by at most 2 pods a minute, so that a dip does not
// throw away workers that cost minutes to bring back.
func GPUServingBehavior() *autoscalingv2.HorizontalPodAutoscalerBehavior {
	maxPolicy := autoscalingv2.MaxChangePolicySelect
	return &autoscalingv2.HorizontalPodAutoscalerBehavior{
		ScaleUp: &autoscalingv2.HPAScalingRules{
			StabilizationWindowSeconds: ptrTo[int32](0),
			SelectPolicy:               &maxPolicy,
			Policies: []autoscalingv2.HPAScalingPolicy{
				{Type: autoscalingv2.PodsScalingPolicy, Value: 8, PeriodSeconds: 15},
				{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15},
			},
		},
		ScaleDown: &autoscalingv2.HPAScalingRules{
			StabilizationWindowSeconds: ptrTo[int32](300),
			SelectPolicy:               &maxPolicy,
			Policies: []autoscalingv2.HPAScalingPolicy{
				{Type: autoscalingv2.PodsScalingPolicy, Value: 2, PeriodSeconds: 60},
			},
		},
	}
}

func ptrTo[T any](v T) *T { return &v }

// LoadHPABehavior reads spec.behavior of an HPA from a YAML file: either
// the behavior block itself (scaleUp, scaleDown) or a whole
// HorizontalPodAutoscaler, whose spec.behavior it takes.
func LoadHPABehavior(path string) (*autoscalingv2.HorizontalPodAutoscalerBehavior, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the HPA behavior: %w", err)
	}
	behavior, err := ParseHPABehavior(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return behavior, nil
}

// ParseHPABehavior decodes and validates spec.behavior as the API server
// would; see LoadHPABehavior.
func ParseHPABehavior(b []byte) (*autoscalingv2.HorizontalPodAutoscalerBehavior, error) {
	var probe map[string]any
	if err := yaml.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("decoding the HPA behavior: %w", err)
	}
	if len(probe) == 0 {
		return nil, errors.New("the HPA behavior is empty: want scaleUp and/or scaleDown, or a HorizontalPodAutoscaler with spec.behavior")
	}
	var behavior *autoscalingv2.HorizontalPodAutoscalerBehavior
	if _, whole := probe["spec"]; whole {
		var hpa autoscalingv2.HorizontalPodAutoscaler
		if err := yaml.UnmarshalStrict(b, &hpa); err != nil {
			return nil, fmt.Errorf("decoding the HorizontalPodAutoscaler: %w", err)
		}
		if hpa.Kind != "" && hpa.Kind != "HorizontalPodAutoscaler" {
			return nil, fmt.Errorf("kind is %q, want HorizontalPodAutoscaler", hpa.Kind)
		}
		if hpa.Spec.Behavior == nil {
			return nil, errors.New("the HorizontalPodAutoscaler has no spec.behavior")
		}
		behavior = hpa.Spec.Behavior
	} else {
		behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{}
		if err := yaml.UnmarshalStrict(b, behavior); err != nil {
			return nil, fmt.Errorf("decoding the HPA behavior: %w", err)
		}
	}
	if errs := validateBehavior(behavior, field.NewPath("spec", "behavior")); len(errs) > 0 {
		return nil, fmt.Errorf("invalid HPA behavior: %w", errs.ToAggregate())
	}
	return behavior, nil
}

// The API server's bounds (pkg/apis/autoscaling/validation).
const (
	maxStabilizationWindowSeconds = 3600
	maxPeriodSeconds              = 1800
)

// validateBehavior follows validation.go's validateBehavior,
// validateScalingRules and validateScalingPolicy.
func validateBehavior(b *autoscalingv2.HorizontalPodAutoscalerBehavior, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateScalingRules(b.ScaleUp, path.Child("scaleUp"))...)
	errs = append(errs, validateScalingRules(b.ScaleDown, path.Child("scaleDown"))...)
	return errs
}

func validateScalingRules(r *autoscalingv2.HPAScalingRules, path *field.Path) field.ErrorList {
	if r == nil {
		return nil
	}
	var errs field.ErrorList
	if w := r.StabilizationWindowSeconds; w != nil && *w < 0 {
		errs = append(errs, field.Invalid(path.Child("stabilizationWindowSeconds"), *w, "must be greater than or equal to zero"))
	}
	if w := r.StabilizationWindowSeconds; w != nil && *w > maxStabilizationWindowSeconds {
		errs = append(errs, field.Invalid(path.Child("stabilizationWindowSeconds"), *w, fmt.Sprintf("must be less than or equal to %d", maxStabilizationWindowSeconds)))
	}
	if s := r.SelectPolicy; s != nil {
		switch *s {
		case autoscalingv2.MaxChangePolicySelect, autoscalingv2.MinChangePolicySelect, autoscalingv2.DisabledPolicySelect:
		default:
			errs = append(errs, field.NotSupported(path.Child("selectPolicy"), *s, []string{"Disabled", "Max", "Min"}))
		}
	}
	// Left out, policies take the default's; given empty, they are an error.
	if r.Policies != nil && len(r.Policies) == 0 {
		errs = append(errs, field.Required(path.Child("policies"), "must specify at least one Policy"))
	}
	for i, p := range r.Policies {
		pp := path.Child("policies").Index(i)
		if p.Type != autoscalingv2.PodsScalingPolicy && p.Type != autoscalingv2.PercentScalingPolicy {
			errs = append(errs, field.NotSupported(pp.Child("type"), p.Type, []string{"Percent", "Pods"}))
		}
		if p.Value <= 0 {
			errs = append(errs, field.Invalid(pp.Child("value"), p.Value, "must be greater than zero"))
		}
		if p.PeriodSeconds <= 0 {
			errs = append(errs, field.Invalid(pp.Child("periodSeconds"), p.PeriodSeconds, "must be greater than zero"))
		}
		if p.PeriodSeconds > maxPeriodSeconds {
			errs = append(errs, field.Invalid(pp.Child("periodSeconds"), p.PeriodSeconds, fmt.Sprintf("must be less than or equal to %d", maxPeriodSeconds)))
		}
	}
	if r.Tolerance != nil && r.Tolerance.Sign() < 0 {
		errs = append(errs, field.Invalid(path.Child("tolerance"), r.Tolerance.String(), "must be greater than or equal to 0"))
	}
	return errs
}

// defaultBehavior follows defaults.go's SetDefaults_HorizontalPodAutoscalerBehavior:
// each field left out of a rule takes the value that repeats the HPA
// without behavior (scale up by max(4 pods, 100 %) per 15 s at once, scale
// down by 100 % per 15 s); then horizontal.go's
// maybeInitScaleDownStabilizationWindow gives a scale-down window left out
// the controller's --horizontal-pod-autoscaler-downscale-stabilization. It
// works on a copy.
func defaultBehavior(b *autoscalingv2.HorizontalPodAutoscalerBehavior, downscaleStabilization time.Duration) *autoscalingv2.HorizontalPodAutoscalerBehavior {
	maxPolicy := autoscalingv2.MaxChangePolicySelect
	up := &autoscalingv2.HPAScalingRules{
		StabilizationWindowSeconds: ptrTo[int32](0),
		SelectPolicy:               &maxPolicy,
		Policies: []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 15},
			{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15},
		},
	}
	down := &autoscalingv2.HPAScalingRules{
		SelectPolicy: &maxPolicy,
		Policies: []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15},
		},
	}
	out := &autoscalingv2.HorizontalPodAutoscalerBehavior{
		ScaleUp:   overlayScalingRules(b.ScaleUp, up),
		ScaleDown: overlayScalingRules(b.ScaleDown, down),
	}
	if out.ScaleDown.StabilizationWindowSeconds == nil {
		out.ScaleDown.StabilizationWindowSeconds = ptrTo(int32(downscaleStabilization.Seconds()))
	}
	return out
}

// overlayScalingRules is defaults.go's copyHPAScalingRules: the fields
// set in from replace those of to.
func overlayScalingRules(from, to *autoscalingv2.HPAScalingRules) *autoscalingv2.HPAScalingRules {
	if from == nil {
		return to
	}
	from = from.DeepCopy()
	if from.SelectPolicy != nil {
		to.SelectPolicy = from.SelectPolicy
	}
	if from.StabilizationWindowSeconds != nil {
		to.StabilizationWindowSeconds = from.StabilizationWindowSeconds
	}
	if from.Policies != nil {
		to.Policies = from.Policies
	}
	if from.Tolerance != nil {
		to.Tolerance = from.Tolerance
	}
	return to
}

// hpaTolerances is replica_calculator.go's Tolerances.
type hpaTolerances struct{ scaleDown, scaleUp float64 }

// isWithin follows Tolerances.isWithin.
func (t hpaTolerances) isWithin(ratio float64) bool {
	return 1-t.scaleDown <= ratio && ratio <= 1+t.scaleUp
}

// tolerances follows horizontal.go's tolerancesForHpa: the controller's
// tolerance, replaced in each direction by the behavior's own
// (HPAConfigurableTolerance, GA and locked on in v1.37).
func (c HPAConfig) tolerances() hpaTolerances {
	t := hpaTolerances{c.Tolerance, c.Tolerance}
	if c.Behavior == nil {
		return t
	}
	if r := c.Behavior.ScaleDown; r != nil && r.Tolerance != nil {
		t.scaleDown = r.Tolerance.AsApproximateFloat64()
	}
	if r := c.Behavior.ScaleUp; r != nil && r.Tolerance != nil {
		t.scaleUp = r.Tolerance.AsApproximateFloat64()
	}
	return t
}

// timestampedScaleEvent is horizontal.go's type of the same name.
type timestampedScaleEvent struct {
	replicaChange int32
	timestamp     time.Time
	outdated      bool
}

// olderThan reports whether a sample taken at ts falls out of a window
// that ends at cutoff. A sample exactly at the cutoff is out of it, for
// the reason stabilizeRecommendation gives: on a cluster each sync starts
// a full period after the last one ended, so it never sits on the cutoff.
func olderThan(ts, cutoff time.Time) bool { return !ts.After(cutoff) }

// normalizeDesiredReplicasWithBehaviors follows horizontal.go's function
// of the same name: stabilizeRecommendationWithBehaviors, then
// convertDesiredReplicasWithBehaviorRate. It replaces
// normalizeDesiredReplicas when the HPA has a behavior; the scale-up limit
// of max(2 × current, 4) is then gone, the policies take its place.
func (h *HPA) normalizeDesiredReplicasWithBehaviors(now time.Time, current, proposal int32) int32 {
	stabilized := h.stabilizeRecommendationWithBehaviors(now, current, proposal)
	return h.convertDesiredReplicasWithBehaviorRate(now, current, stabilized)
}

// stabilizeRecommendationWithBehaviors follows horizontal.go's function of
// the same name: the count moves up no further than the lowest
// recommendation within the scale-up window and down no further than the
// highest within the scale-down window, both including this one; this
// recommendation replaces one older than both windows (the last found), or
// is appended.
func (h *HPA) stabilizeRecommendationWithBehaviors(now time.Time, current, proposal int32) int32 {
	b := h.cfg.Behavior
	upCutoff := now.Add(-time.Duration(*b.ScaleUp.StabilizationWindowSeconds) * time.Second)
	downCutoff := now.Add(-time.Duration(*b.ScaleDown.StabilizationWindowSeconds) * time.Second)
	upRec, downRec := proposal, proposal
	foundOld, oldIndex := false, 0
	for i, rec := range h.recs {
		if !olderThan(rec.timestamp, upCutoff) {
			upRec = min(rec.recommendation, upRec)
		}
		if !olderThan(rec.timestamp, downCutoff) {
			downRec = max(rec.recommendation, downRec)
		}
		if olderThan(rec.timestamp, upCutoff) && olderThan(rec.timestamp, downCutoff) {
			foundOld, oldIndex = true, i
		}
	}
	recommendation := current
	if recommendation < upRec {
		recommendation = upRec
	}
	if recommendation > downRec {
		recommendation = downRec
	}
	if foundOld {
		h.recs[oldIndex] = timestampedRecommendation{proposal, now}
	} else {
		h.recs = append(h.recs, timestampedRecommendation{proposal, now})
	}
	return recommendation
}

// convertDesiredReplicasWithBehaviorRate follows horizontal.go's function
// of the same name: a scale-up stops at the lower of maxReplicas and the
// policies' limit (never below the current count), a scale-down at the
// higher of minReplicas and the policies' limit (never above it). A count
// that does not move is returned as it is, even outside [min, max].
func (h *HPA) convertDesiredReplicasWithBehaviorRate(now time.Time, current, desired int32) int32 {
	switch {
	case desired > current:
		limit := calculateScaleUpLimitWithScalingRules(now, current, h.scaleUpEvents, h.scaleDownEvents, h.cfg.Behavior.ScaleUp)
		limit = max(limit, current)
		maximum := min(h.cfg.Max, limit)
		if desired > maximum {
			return maximum
		}
	case desired < current:
		limit := calculateScaleDownLimitWithBehaviors(now, current, h.scaleUpEvents, h.scaleDownEvents, h.cfg.Behavior.ScaleDown)
		limit = min(limit, current)
		minimum := max(h.cfg.Min, limit)
		if desired < minimum {
			return minimum
		}
	}
	return desired
}

// calculateScaleUpLimitWithScalingRules follows horizontal.go's function
// of the same name: each policy allows, from the count at the start of its
// period (the current one less what was added in it, plus what was removed
// in it), Value more pods or Value % more (rounded up); selectPolicy Max
// takes the largest allowance, Min the smallest, Disabled none.
func calculateScaleUpLimitWithScalingRules(now time.Time, current int32, upEvents, downEvents []timestampedScaleEvent, rules *autoscalingv2.HPAScalingRules) int32 {
	if *rules.SelectPolicy == autoscalingv2.DisabledPolicySelect {
		return current
	}
	pick, result := maxInt32, int32(math.MinInt32)
	if *rules.SelectPolicy == autoscalingv2.MinChangePolicySelect {
		pick, result = minInt32, math.MaxInt32
	}
	for _, policy := range rules.Policies {
		added := getReplicasChangePerPeriod(now, policy.PeriodSeconds, upEvents)
		deleted := getReplicasChangePerPeriod(now, policy.PeriodSeconds, downEvents)
		periodStart := current - added + deleted
		var proposed int32
		switch policy.Type {
		case autoscalingv2.PodsScalingPolicy:
			proposed = periodStart + policy.Value
		case autoscalingv2.PercentScalingPolicy:
			proposed = int32(math.Ceil(float64(periodStart) * (1 + float64(policy.Value)/100)))
		}
		result = pick(result, proposed)
	}
	return result
}

// calculateScaleDownLimitWithBehaviors follows horizontal.go's function of
// the same name: each policy allows, from the count at the start of its
// period, Value fewer pods or Value % fewer (rounded down, so toward
// keeping pods); selectPolicy Max takes the largest change (the lowest
// count), Min the smallest, Disabled none.
func calculateScaleDownLimitWithBehaviors(now time.Time, current int32, upEvents, downEvents []timestampedScaleEvent, rules *autoscalingv2.HPAScalingRules) int32 {
	if *rules.SelectPolicy == autoscalingv2.DisabledPolicySelect {
		return current
	}
	pick, result := minInt32, int32(math.MaxInt32)
	if *rules.SelectPolicy == autoscalingv2.MinChangePolicySelect {
		pick, result = maxInt32, math.MinInt32
	}
	for _, policy := range rules.Policies {
		added := getReplicasChangePerPeriod(now, policy.PeriodSeconds, upEvents)
		deleted := getReplicasChangePerPeriod(now, policy.PeriodSeconds, downEvents)
		periodStart := current - added + deleted
		var proposed int32
		switch policy.Type {
		case autoscalingv2.PodsScalingPolicy:
			proposed = periodStart - policy.Value
		case autoscalingv2.PercentScalingPolicy:
			proposed = int32(float64(periodStart) * (1 - float64(policy.Value)/100))
		}
		result = pick(result, proposed)
	}
	return result
}

// getReplicasChangePerPeriod follows horizontal.go's function of the same
// name: the change summed over the events within the last periodSeconds.
func getReplicasChangePerPeriod(now time.Time, periodSeconds int32, events []timestampedScaleEvent) int32 {
	cutoff := now.Add(-time.Duration(periodSeconds) * time.Second)
	var replicas int32
	for _, e := range events {
		if e.timestamp.After(cutoff) {
			replicas += e.replicaChange
		}
	}
	return replicas
}

// storeScaleEvent follows horizontal.go's function of the same name,
// called after each rescale: with a behavior, the change is recorded as a
// scale-up or scale-down event, in the slot of an event older than the
// direction's longest policy period (the last found), or appended.
func (h *HPA) storeScaleEvent(now time.Time, prev, next int32) {
	b := h.cfg.Behavior
	if b == nil {
		return
	}
	events, rules, change := &h.scaleDownEvents, b.ScaleDown, prev-next
	if next > prev {
		events, rules, change = &h.scaleUpEvents, b.ScaleUp, next-prev
	}
	markScaleEventsOutdated(now, *events, getLongestPolicyPeriod(rules))
	foundOld, oldIndex := false, 0
	for i, e := range *events {
		if e.outdated {
			foundOld, oldIndex = true, i
		}
	}
	event := timestampedScaleEvent{change, now, false}
	if foundOld {
		(*events)[oldIndex] = event
	} else {
		*events = append(*events, event)
	}
}

// markScaleEventsOutdated follows horizontal.go's function of the same
// name: events older than the longest policy period count for no policy,
// and their slots are reused.
func markScaleEventsOutdated(now time.Time, events []timestampedScaleEvent, longestPolicyPeriod int32) {
	cutoff := now.Add(-time.Duration(longestPolicyPeriod) * time.Second)
	for i, e := range events {
		if olderThan(e.timestamp, cutoff) {
			events[i].outdated = true
		}
	}
}

// getLongestPolicyPeriod follows horizontal.go's function of the same name.
func getLongestPolicyPeriod(rules *autoscalingv2.HPAScalingRules) int32 {
	var longest int32
	for _, p := range rules.Policies {
		longest = max(longest, p.PeriodSeconds)
	}
	return longest
}

func minInt32(a, b int32) int32 { return min(a, b) }
func maxInt32(a, b int32) int32 { return max(a, b) }
