package v1

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Bounds of the duration and number fields, the same as the CRD's rules.
const (
	MinInterval                = time.Second
	MaxInterval                = time.Hour
	MaxMinTaskAge              = 24 * time.Hour
	MaxStabilizationWindow     = time.Hour
	MaxScaleUpPeriod           = time.Hour
	MaxSourceTimeout           = 30 * time.Second
	MaxStartupTimeout          = 24 * time.Hour
	MaxDrainTimeout            = 24 * time.Hour
	defaultUpThresholdMilli    = 800
	defaultDownThresholdMilli  = 500
	maxToleranceMilli          = 1000
	minBurstFactorMilli        = 1100
	maxBurstFactorMilli        = 100000
	MaxBurstWindow             = time.Hour
	durationMessage            = "must be a duration such as 30s, 5m or 1h30m"
	proportionalTargetRequired = "required by the Proportional policy"
)

// ValidateTaskSetSpec checks what the CRD's schema and rules check, for an
// object that was stored before they existed or while they were relaxed.
// The controllers report its errors as the set's InvalidSpec condition
// rather than quietly clamping or defaulting the values.
func ValidateTaskSetSpec(spec *GPUTaskSetSpec) field.ErrorList {
	path := field.NewPath("spec")
	errs := validateDuration(spec.MinTaskAge, path.Child("minTaskAge"), 0, true, MaxMinTaskAge)
	if spec.ScaleIn != nil {
		errs = append(errs, validateDuration(spec.ScaleIn.DrainTimeout, path.Child("scaleIn", "drainTimeout"), 0, true, MaxDrainTimeout)...)
	}
	if spec.Autoscaling != nil {
		errs = append(errs, validateAutoscaling(spec.Autoscaling, path.Child("autoscaling"))...)
	}
	return errs
}

func validateAutoscaling(as *AutoscalingSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if as.MaxReplicas < 1 {
		errs = append(errs, field.Invalid(path.Child("maxReplicas"), as.MaxReplicas, "must be at least 1"))
	}
	if as.MinReplicas != nil && *as.MinReplicas > as.MaxReplicas {
		errs = append(errs, field.Invalid(path.Child("minReplicas"), *as.MinReplicas, "must not exceed maxReplicas"))
	}
	errs = append(errs, validateDuration(as.Interval, path.Child("interval"), MinInterval, true, MaxInterval)...)
	errs = append(errs, validateDuration(as.ScaleDownStabilizationWindow, path.Child("scaleDownStabilizationWindow"), 0, true, MaxStabilizationWindow)...)
	errs = append(errs, validateDuration(as.StartupTimeout, path.Child("startupTimeout"), 0, false, MaxStartupTimeout)...)
	if as.ScaleUpLimit != nil {
		errs = append(errs, validateDuration(as.ScaleUpLimit.Period, path.Child("scaleUpLimit", "period"), 0, false, MaxScaleUpPeriod)...)
	}
	if b := as.Burst; b != nil {
		if f := b.Factor; f != nil && (f.MilliValue() < minBurstFactorMilli || f.MilliValue() > maxBurstFactorMilli) {
			errs = append(errs, field.Invalid(path.Child("burst", "factor"), f.String(), "must be between 1.1 and 100"))
		}
		errs = append(errs, validateDuration(b.Window, path.Child("burst", "window"), 0, true, MaxBurstWindow)...)
	}
	if pr := as.Predictive; pr != nil {
		if pr.Mode != "" && pr.Mode != PredictiveActive && pr.Mode != PredictivePreview {
			errs = append(errs, field.NotSupported(path.Child("predictive", "mode"), pr.Mode, []PredictiveMode{PredictiveActive, PredictivePreview}))
		}
		errs = append(errs, validateDuration(pr.LeadTime, path.Child("predictive", "leadTime"), 0, true, MaxLeadTime)...)
	}
	for i := range as.Schedules {
		errs = append(errs, validateSchedule(&as.Schedules[i], path.Child("schedules").Index(i))...)
	}
	if tol := as.Policy.Tolerance; tol != nil && (tol.Sign() < 0 || tol.MilliValue() > maxToleranceMilli) {
		errs = append(errs, field.Invalid(path.Child("policy", "tolerance"), tol.String(), "must be between 0 and 1"))
	}
	errs = append(errs, validateSLO(as, path)...)
	proportional := as.Policy.Type == ProportionalPolicy
	if len(as.Metrics) == 0 {
		errs = append(errs, field.Required(path.Child("metrics"), "at least one metric is needed"))
	}
	for i := range as.Metrics {
		errs = append(errs, validateMetric(&as.Metrics[i], path.Child("metrics").Index(i), proportional)...)
	}
	return errs
}

// Bounds of the SLO policy's fields.
const (
	MinSLOWait                  = time.Second
	MaxSLOWait                  = time.Hour
	MinSLOTTFT                  = 10 * time.Millisecond
	MaxSLOTTFT                  = time.Hour
	MinSLOITL                   = time.Millisecond
	MaxSLOITL                   = 10 * time.Second
	minSLOPercentileMilli       = 50000
	maxSLOPercentileMilli       = 99900
	maxSlotsPerTask             = 100000
	maxServiceVariabilityMilli  = 100000
	sloRunningAndArrivalsNeeded = "the SLO policy needs a metric of role Running and one of role Arrivals or Completions"
)

// validateSLO checks the SLO policy's objective and its metrics' roles,
// as the CRD's rules do.
func validateSLO(as *AutoscalingSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	policy := path.Child("policy")
	isSLO := as.Policy.Type == SLOPolicy
	switch {
	case isSLO && as.Policy.SLO == nil:
		errs = append(errs, field.Required(policy.Child("slo"), "required by the SLO policy"))
	case !isSLO && as.Policy.SLO != nil:
		errs = append(errs, field.Forbidden(policy.Child("slo"), "read by the SLO policy only"))
	}
	if slo := as.Policy.SLO; slo != nil {
		errs = append(errs, validateSLOSpec(slo, policy.Child("slo"))...)
		if v := slo.ServiceTimeVariability; v != nil && (v.Sign() < 0 || v.MilliValue() > maxServiceVariabilityMilli) {
			errs = append(errs, field.Invalid(policy.Child("slo", "serviceTimeVariability"), v.String(), "must be between 0 and 100"))
		}
	}
	if isSLO && as.Burst != nil {
		errs = append(errs, field.Forbidden(path.Child("burst"), "burst applies to the Step and Proportional policies"))
	}
	seen := map[MetricRole]bool{}
	for i, m := range as.Metrics {
		rolePath := path.Child("metrics").Index(i).Child("role")
		switch {
		case m.Role == "" && isSLO:
			errs = append(errs, field.Required(rolePath, "every metric needs a role with the SLO policy"))
		case m.Role != "" && !isSLO:
			errs = append(errs, field.Forbidden(rolePath, "metric roles are read by the SLO policy only"))
		case m.Role != "" && !knownRole(m.Role):
			errs = append(errs, field.NotSupported(rolePath, m.Role, Roles))
		case m.Role != "" && seen[m.Role]:
			errs = append(errs, field.Duplicate(rolePath, m.Role))
		}
		seen[m.Role] = true
	}
	if isSLO && len(as.Metrics) > 0 && (!seen[RoleRunning] || !(seen[RoleArrivals] || seen[RoleCompletions])) {
		errs = append(errs, field.Required(path.Child("metrics"), sloRunningAndArrivalsNeeded))
	}
	if slo := as.Policy.SLO; slo != nil {
		for _, need := range SLOMetricNeeds(slo, seen) {
			errs = append(errs, field.Required(path.Child("metrics"), need))
		}
	}
	return errs
}

// Messages of the SLO policy's needs, the same as the CRD's rules'.
const (
	TTFTNeedsPercentile   = "slo.ttft needs a metric of role TTFTPercentile: the observed TTFT corrects the model"
	ITLNeedsEngine        = "slo.itl needs an engine profile (slo.engine) or a metric of role InterTokenLatency to learn the engine from"
	PromptMedianNeedsMean = "a metric of role PromptTokensMedian needs one of role PromptTokens: the mean prompt tokens of a request, beside the median, give the mix of prompt lengths"
	MedianNeedsMean       = "a metric of role GenerationTokensMedian needs one of role GenerationTokens: the mean output tokens of a request, beside the median, give the mix of output lengths"
	ProfileNeedsKVCache   = "the capacity from an engine profile needs a metric of role KVCacheUsage: the context the running sequences hold sets the ITL at a batch (or set slo.slotsPerTask)"
	sloNeedsObjective     = "slo needs at least one of wait, ttft or itl"
	sloNeedsCapacity      = "without slotsPerTask a task's capacity comes from its engine at the ITL objective: set slo.itl or slo.slotsPerTask"
	engineNeedsOneSource  = "exactly one of profile or configMapRef must be set"
)

// SLOMetricNeeds says which metrics the objectives of slo need that the
// roles in have lack, one message each: a TTFT objective the observed
// TTFT, an ITL objective an engine profile or the ITL to fit one from,
// a capacity read from a profile the KV cache's use, and the median
// output and prompt tokens the generation and prompt tokens' rates.
func SLOMetricNeeds(slo *SLOSpec, have map[MetricRole]bool) []string {
	var needs []string
	if slo.TTFT != nil && !have[RoleTTFTPercentile] {
		needs = append(needs, TTFTNeedsPercentile)
	}
	if slo.ITL != nil && slo.Engine == nil && !have[RoleInterTokenLatency] {
		needs = append(needs, ITLNeedsEngine)
	}
	if slo.ITL != nil && slo.Engine != nil && slo.SlotsPerTask < 1 && !have[RoleKVCacheUsage] {
		needs = append(needs, ProfileNeedsKVCache)
	}
	if have[RoleGenerationTokensMedian] && !have[RoleGenerationTokens] {
		needs = append(needs, MedianNeedsMean)
	}
	if have[RolePromptTokensMedian] && !have[RolePromptTokens] {
		needs = append(needs, PromptMedianNeedsMean)
	}
	return needs
}

// EngineProfiles are the profiles embedded in the controller
// (gpuprofile.Names), as the CRD's enum of slo.engine.profile lists them.
var EngineProfiles = []string{"h100-llama-3.1-8b", "h200-llama-3.1-8b"}

func validateSLOSpec(slo *SLOSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if slo.Wait == nil && slo.TTFT == nil && slo.ITL == nil {
		errs = append(errs, field.Required(path, sloNeedsObjective))
	}
	errs = append(errs, validateDuration(slo.Wait, path.Child("wait"), MinSLOWait, true, MaxSLOWait)...)
	errs = append(errs, validateDuration(slo.TTFT, path.Child("ttft"), MinSLOTTFT, true, MaxSLOTTFT)...)
	errs = append(errs, validateDuration(slo.ITL, path.Child("itl"), MinSLOITL, true, MaxSLOITL)...)
	if p := slo.Percentile; p != nil && (p.MilliValue() < minSLOPercentileMilli || p.MilliValue() > maxSLOPercentileMilli) {
		errs = append(errs, field.Invalid(path.Child("percentile"), p.String(), "must be between 50 and 99.9"))
	}
	if slo.SlotsPerTask < 0 || slo.SlotsPerTask > maxSlotsPerTask {
		errs = append(errs, field.Invalid(path.Child("slotsPerTask"), slo.SlotsPerTask, "must be between 0 and 100000"))
	}
	if slo.SlotsPerTask < 1 && slo.ITL == nil {
		errs = append(errs, field.Required(path.Child("itl"), sloNeedsCapacity))
	}
	if e := slo.Engine; e != nil {
		ep := path.Child("engine")
		switch {
		case (e.Profile != "") == (e.ConfigMapRef != nil):
			errs = append(errs, field.Invalid(ep, "", engineNeedsOneSource))
		case e.Profile != "" && !slices.Contains(EngineProfiles, e.Profile):
			errs = append(errs, field.NotSupported(ep.Child("profile"), e.Profile, EngineProfiles))
		case e.ConfigMapRef != nil && (e.ConfigMapRef.Name == "" || e.ConfigMapRef.Key == ""):
			errs = append(errs, field.Required(ep.Child("configMapRef"), "name and key are required"))
		}
	}
	return errs
}

// Roles are the metric roles the SLO policy reads.
var Roles = []MetricRole{RoleArrivals, RoleCompletions, RoleRunning, RoleWaiting, RoleWaitPercentile,
	RoleTTFTPercentile, RoleInterTokenLatency, RolePromptTokens, RoleGenerationTokens, RoleGenerationTokensMedian,
	RolePromptTokensMedian, RoleKVCacheUsage}

func knownRole(r MetricRole) bool {
	for _, k := range Roles {
		if r == k {
			return true
		}
	}
	return false
}

// MaxLeadTime bounds predictive.leadTime.
const MaxLeadTime = time.Hour

// MaxScheduleDuration bounds a schedule's window.
const MaxScheduleDuration = 7 * 24 * time.Hour

func validateSchedule(sc *ScheduleSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if _, err := time.LoadLocation(sc.TimeZone); err != nil {
		errs = append(errs, field.Invalid(path.Child("timeZone"), sc.TimeZone, "must be an IANA time zone such as Europe/Berlin"))
	} else if _, err := ParseSchedule(sc); err != nil {
		errs = append(errs, field.Invalid(path.Child("start"), sc.Start, err.Error()))
	}
	if d := sc.Duration.Duration; d <= 0 || d > MaxScheduleDuration {
		errs = append(errs, field.Invalid(path.Child("duration"), sc.Duration.String(), "must be more than 0s and at most 168h"))
	}
	if sc.MinReplicas < 0 {
		errs = append(errs, field.Invalid(path.Child("minReplicas"), sc.MinReplicas, "must not be negative"))
	}
	if sc.MaxReplicas != nil && *sc.MaxReplicas < sc.MinReplicas {
		errs = append(errs, field.Invalid(path.Child("maxReplicas"), *sc.MaxReplicas, "must be at least minReplicas"))
	}
	return errs
}

// ParseSchedule reads a schedule's start, a standard cron expression of
// five fields, in its time zone.
func ParseSchedule(sc *ScheduleSpec) (cron.Schedule, error) {
	if strings.HasPrefix(sc.Start, "TZ=") || strings.HasPrefix(sc.Start, "CRON_TZ=") {
		return nil, errors.New("set the time zone in timeZone, not in start")
	}
	tz := sc.TimeZone
	if tz == "" {
		tz = "UTC"
	}
	return cron.ParseStandard("CRON_TZ=" + tz + " " + sc.Start)
}

func validateMetric(m *MetricSpec, path *field.Path, proportional bool) field.ErrorList {
	var errs field.ErrorList
	for _, q := range []struct {
		name string
		q    *resource.Quantity
	}{{"upThreshold", m.UpThreshold}, {"downThreshold", m.DownThreshold}} {
		if q.q != nil && q.q.Sign() < 0 {
			errs = append(errs, field.Invalid(path.Child(q.name), q.q.String(), "must not be negative"))
		}
	}
	up := resource.NewMilliQuantity(defaultUpThresholdMilli, resource.DecimalSI)
	if m.UpThreshold != nil {
		up = m.UpThreshold
	}
	down := resource.NewMilliQuantity(defaultDownThresholdMilli, resource.DecimalSI)
	if m.DownThreshold != nil {
		down = m.DownThreshold
	}
	if up.Cmp(*down) <= 0 {
		errs = append(errs, field.Invalid(path.Child("upThreshold"), up.String(),
			fmt.Sprintf("must be greater than downThreshold (%s)", down.String())))
	}
	switch {
	case m.Target != nil && m.Target.Sign() <= 0:
		errs = append(errs, field.Invalid(path.Child("target"), m.Target.String(), "must be greater than 0"))
	case m.Target == nil && proportional:
		errs = append(errs, field.Required(path.Child("target"), proportionalTargetRequired))
	}
	switch {
	case m.HTTP != nil:
		errs = append(errs, validateDuration(m.HTTP.Timeout, path.Child("http", "timeout"), 0, false, MaxSourceTimeout)...)
	case m.Prometheus != nil:
		errs = append(errs, validateDuration(m.Prometheus.Timeout, path.Child("prometheus", "timeout"), 0, false, MaxSourceTimeout)...)
	}
	return errs
}

// validateDuration checks that d parsed and lies within [lo, hi], or (lo, hi]
// when loInclusive is false. A nil d is valid: the default applies.
func validateDuration(d *Duration, path *field.Path, lo time.Duration, loInclusive bool, hi time.Duration) field.ErrorList {
	if d == nil {
		return nil
	}
	if !d.Valid() {
		// Show "abc" rather than the JSON text "\"abc\"".
		var shown any = d.Unparsed
		_ = json.Unmarshal([]byte(d.Unparsed), &shown)
		return field.ErrorList{field.Invalid(path, shown, durationMessage)}
	}
	tooLow := d.Duration < lo || (!loInclusive && d.Duration == lo)
	if tooLow || d.Duration > hi {
		lower := "at least " + lo.String()
		if !loInclusive {
			lower = "more than " + lo.String()
		}
		return field.ErrorList{field.Invalid(path, d.Duration.String(), fmt.Sprintf("must be %s and at most %s", lower, hi))}
	}
	return nil
}
