// Package scaling is the autoscaler's decision: Decide turns what the loop
// observed (replicas, metric readings, history, limits) into a desired task
// count and a CamelCase reason, with no clock, client or randomness, so one
// table test covers it. pkg/autoscaler gathers the inputs and acts on it.
package scaling

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons of a decision. They are also used as condition reasons and event
// messages, in the HPA's CamelCase style.
const (
	ReasonScaleUpAboveThreshold   = "ScaleUpAboveThreshold"
	ReasonScaleDownBelowThreshold = "ScaleDownBelowThreshold"
	ReasonWithinThresholds        = "WithinThresholds"
	ReasonWithinTolerance         = "WithinTolerance"
	ReasonProportionalScaleUp     = "ProportionalScaleUp"
	ReasonProportionalScaleDown   = "ProportionalScaleDown"
	ReasonTooFewReplicas          = "TooFewReplicas"
	ReasonTooManyReplicas         = "TooManyReplicas"
	ReasonCapacityLimited         = "CapacityLimited"
	ReasonScaleUpLimited          = "ScaleUpLimited"
	ReasonScaleDownStabilized     = "ScaleDownStabilized"
	ReasonFailedGetLoadIndex      = "FailedGetLoadIndex"
	ReasonFallbackReplicas        = "FallbackReplicas"
	ReasonTasksTooYoung           = "TasksTooYoung"
	ReasonPaused                  = "Paused"
	ReasonStopped                 = "Stopped"
	// ReasonBurst: a reading reached the burst factor times its threshold
	// or target, and the set scales at once to what the load asks for.
	ReasonBurst = "BurstScaleUp"
	// ReasonHeldDuringBurst: a scale-down waits for the burst to pass.
	ReasonHeldDuringBurst = "HeldDuringBurst"
	// ReasonWaitingForStartingTasks: a scale-up waits because tasks added
	// earlier are not Ready yet; they are capacity on its way.
	ReasonWaitingForStartingTasks = "WaitingForStartingTasks"
	// ReasonWaitingForInterval: the count changed less than an interval ago,
	// and it changes at most once per interval.
	ReasonWaitingForInterval = "WaitingForInterval"
)

// Decide computes the desired count. It is pure: the same inputs always give
// the same decision. It is a pipeline: the policy's rule, wrapped in its
// modifiers (a schedule, predictive pre-warming, bursts; see ruleFor),
// asks for a count from the readings; the bounds, the stabilization
// window, the rule's settling, the rate limit, the capacity, young tasks
// and one step per interval then shape it. The rules, in order:
//
//  1. Each metric that was read asks for a count: Step adds StepUp above
//     UpThreshold and removes StepDown below DownThreshold; Proportional asks
//     for ceil(serving × value / target) unless |value/target − 1| ≤ Tolerance,
//     where serving is Current − Starting while some of the tasks start and
//     one serves (the HPA's Ready pods), and Current otherwise.
//     A metric that failed, or whose value is not finite and ≥ 0, asks nothing.
//     With Current == 0 Proportional has no per-task base, so it reads the
//     value as total load and asks for ceil(value / target) tasks (0 for 0).
//  2. The largest count wins. If any metric failed, the others may scale up
//     but never down: a scale-down is held at Current.
//  3. If every metric failed the count is held, except that once
//     ConsecutiveFailures reaches FailureThreshold and a Fallback is set, the
//     count becomes the fallback. The fallback is the one way a failure may
//     change the count, because the user chose that number for this case.
//  4. The count is bounded by [Min, Max] and recorded as a recommendation.
//  5. A scale-down goes no lower than the highest recommendation within the
//     stabilization window (the HPA rule).
//  6. A scale-up adds at most ScaleUpLimit.Tasks, and none at all within
//     ScaleUpLimit.Period of LastScaleTime: so at most Tasks per Period.
//  7. With a Capacity, a scale-up stops at the tasks that fit; capacity never
//     causes a scale-down.
//  8. While HeldBack > 0 (young tasks kept by the last scale-in), a further
//     scale-down is held at Current.
//  9. [Min, Max] always applies last: the bounds are the user's own settings,
//     not a reading, so they hold even while metrics fail. A failure thus
//     never lowers the count; only Max and a configured fallback can.
//  10. Paused or Stopped keep Current, even outside [Min, Max], and the
//     message says what would have been done. Recommendations are still
//     recorded, so resuming does not forget a recent peak.
//  11. A Step scale-down clears the recommendations: the window demanded low
//     load throughout before the first step, and each further low reading
//     steps again, until a hold or scale-up ask starts a new window.
//  12. While tasks are starting (Starting > 0), a scale-up waits: Step adds
//     nothing, and Proportional, which counts only the serving tasks (rule
//     1), scales up only if what they ask for is still above Current. A
//     fallback is not held.
//  13. The count changes at most once per Interval: a change within Interval
//     of LastScaleTime is held at Current, whatever its cause (a reading,
//     a spec edit, a bound), and RetryAfter says when it may happen.
//  14. With a Burst, a reading at Factor times its metric's UpThreshold
//     (Step) or Target (Proportional) asks at once for what the load needs:
//     ceil(serving × value / level) from the Current − Starting tasks that
//     serve, beyond StepUp and rule 12, still within rules 6, 7, 9 and 13.
//     Until Window has passed since the last burst reading (BurstUntil) no
//     scale-down happens. A fallback is not affected.
//  15. A Schedule in force raises Min to its floor (at most Max) and
//     lowers Max to its ceiling; the bounds' messages name it.
//  16. With Predictive, each evaluation records the tasks the load asked
//     for (serving × value / level) in History by hour of the day, weekdays
//     apart from weekends; once that hour one Lead ahead was seen on an
//     earlier day, its forecast raises Min (unless Preview), and so only
//     ever raises the count.
//  17. The SLO policy replaces rules 1, 12, 14 and 16's count: the
//     metrics together, by role, feed one queueing model (sloStep), which
//     asks for the smallest count that meets the wait objective at the
//     load expected one Startup ahead, never shrinks below the count that
//     meets it at the highest load before then, and never goes below the
//     tasks the running requests occupy. Predictive history learns the
//     offered load and its forecast raises the expected arrivals. The
//     service time is learned only from readings where requests finish
//     about as fast as they arrive, the trend and the dispersion are read
//     since the last step of the rate, and bursts shorter than a quarter
//     of a start-up are absorbed by headroom learned from past rises
//     (see sloStep). Without
//     the roles it needs the count is held (MissingMetricRole); a failed
//     Running or arrivals reading is a failed read (rule 3).
func Decide(in Inputs) Decision {
	in = normalize(in)
	r := ruleFor(in)
	d := Decision{Winner: -1, Metrics: readMetrics(in)}

	s := r.ask(&in, &d)
	s = bound(in, &d, s)
	d.Recommended = s.desired
	if d.AllFailed {
		// A failed read says nothing about load, so it is not a recommendation.
		d.Recommendations = prune(in.Recommendations, in.Now, in.StabilizationWindow)
	} else {
		d.Recommendations = recordRecommendation(in.Recommendations, in.Now, in.StabilizationWindow, s.desired)
	}
	if !d.Fallback {
		s = stabilize(in, &d, s)
		s = r.settle(in, &d, s)
	}
	s = limitScaleUp(in, &d, s)
	s = capAtCapacity(in, &d, s)
	s = holdYoungTasks(in, s)
	s = bound(in, &d, s)
	s = oneStepPerInterval(in, &d, s)

	d.Desired, d.Reason, d.Message = s.desired, s.reason, s.message
	applyPauseAndStop(in, &d)
	if d.SLO != nil {
		d.SLO.finish(in, d.Desired)
	}
	restartStepWindow(in, &d)
	return d
}

// restartStepWindow starts a new stabilization window after a scale-down
// by relative asks (Step's). Step asks are relative: each one is "one task
// fewer than now". Kept after a step, the asks made before it (one task
// more than the new count) would hold every further step for a whole
// window, so a set would shed one task per window instead of one per
// interval. The window has done its job once load stayed low through it;
// from then on a step follows every low reading, and any hold or scale-up
// ask is recorded again and holds scale-in for a window.
func restartStepWindow(in Inputs, d *Decision) {
	if d.relative && d.Desired < in.Current {
		d.Recommendations = nil
	}
}

// step is the count under construction and why it is what it is.
type step struct {
	desired int32
	reason  string
	message string
}

// limited replaces the count and its reason, keeping the earlier message
// as context, e.g. "load 0.91 above up threshold 0.8; capped at maxReplicas 10".
func (s step) limited(desired int32, reason, why string) step {
	return step{desired: desired, reason: reason, message: s.message + "; " + why}
}

// Defaults documented on the API types, applied when an input is unset or invalid.
const (
	DefaultStepUp              = 3
	DefaultStepDown            = 1
	DefaultTolerance           = 0.1
	DefaultFailureThreshold    = 3
	DefaultScaleUpPeriod       = time.Minute
	DefaultUpThreshold         = 0.8
	DefaultDownThreshold       = 0.5
	DefaultMinReplicas         = 1
	DefaultStabilizationWindow = 5 * time.Minute
	DefaultInterval            = 30 * time.Second
	DefaultBurstFactor         = 2
	MinBurstFactor             = 1.1
	DefaultBurstWindow         = time.Minute
	// maxRecommendations bounds status.recommendations. Since recordRecommendation keeps
	// only entries larger than every later one, this is rarely reached.
	maxRecommendations = 100
)

// normalize makes Decide total: inputs the API would reject are mapped to the
// nearest sensible value instead of panicking or producing nonsense.
func normalize(in Inputs) Inputs {
	in.Current = max(in.Current, 0)
	in.Min = max(in.Min, 0)
	in.Max = max(in.Max, in.Min)
	// Only the SLO policy reads these; the others leave them as they are.
	if in.Policy.Type == gputaskv1.SLOPolicy {
		in = withRoleReadings(in)
	}
	in.Policy.SLO.SlotsPerTask, in.slotsFrom = sloSlots(in)
	in.Policy.SLO = normalizeSLO(in.Policy.SLO)
	if in.Startup <= 0 {
		in.Startup = DefaultStartupTimeout
	}
	if in.Policy.StepUp < 1 {
		in.Policy.StepUp = DefaultStepUp
	}
	if in.Policy.StepDown < 1 {
		in.Policy.StepDown = DefaultStepDown
	}
	if !(in.Policy.Tolerance >= 0) || math.IsInf(in.Policy.Tolerance, 0) {
		in.Policy.Tolerance = DefaultTolerance
	}
	if in.FailureThreshold < 1 {
		in.FailureThreshold = DefaultFailureThreshold
	}
	in.StabilizationWindow = max(in.StabilizationWindow, 0)
	if in.ScaleUpLimit != nil {
		limit := *in.ScaleUpLimit
		limit.Tasks = max(limit.Tasks, 1)
		if limit.Period <= 0 {
			limit.Period = DefaultScaleUpPeriod
		}
		in.ScaleUpLimit = &limit
	}
	in.HeldBack = max(in.HeldBack, 0)
	in.Starting = min(max(in.Starting, 0), in.Current)
	in.Interval = max(in.Interval, 0)
	if in.Burst != nil {
		b := *in.Burst
		if !(b.Factor >= MinBurstFactor) || math.IsInf(b.Factor, 0) {
			b.Factor = DefaultBurstFactor
		}
		b.Window = max(b.Window, 0)
		in.Burst = &b
	}
	return in
}

// readMetrics is each metric's reading, with the readings a source should
// never give turned into errors; the policy fills in what each asks for.
func readMetrics(in Inputs) []MetricOutcome {
	out := make([]MetricOutcome, len(in.Metrics))
	for i, m := range in.Metrics {
		out[i] = MetricOutcome{Name: m.Name, Value: m.Value, Err: m.Err}
		if out[i].Err == nil {
			out[i].Err = checkValue(m.Value)
		}
	}
	return out
}

// checkValue rejects readings a source should never have returned, so a
// buggy source cannot drive the count.
func checkValue(v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return fmt.Errorf("invalid load index %v: want a finite number >= 0", v)
	}
	return nil
}

// countFailures counts this evaluation in ConsecutiveFailures when a
// metric failed or none is configured, and returns the failed metrics'
// names.
func countFailures(in Inputs, d *Decision) []string {
	failed := failedNames(d.Metrics)
	d.ConsecutiveFailures = in.ConsecutiveFailures
	if len(failed) > 0 || len(d.Metrics) == 0 {
		d.ConsecutiveFailures = addSat(in.ConsecutiveFailures, 1)
	} else {
		d.ConsecutiveFailures = 0
	}
	return failed
}

// combine is rule 2 and 3 for the policies whose metrics each ask for a
// count: the largest ask among the metrics read wins, and the failure
// rules apply.
func combine(in Inputs, d *Decision) step {
	failed := countFailures(in, d)
	for i, m := range d.Metrics {
		if m.Err == nil && (d.Winner < 0 || m.Desired > d.Metrics[d.Winner].Desired) {
			d.Winner = i
		}
	}
	if d.Winner < 0 {
		d.AllFailed = true
		return allFailed(in, d)
	}
	w := d.Metrics[d.Winner]
	s := step{desired: w.Desired, reason: w.Reason, message: describeMetric(in.Metrics[d.Winner], w)}
	if len(failed) > 0 && s.desired < in.Current {
		return step{
			desired: in.Current,
			reason:  ReasonFailedGetLoadIndex,
			message: fmt.Sprintf("%s; not scaling down to %d while %s failed", s.message, s.desired, strings.Join(failed, ", ")),
		}
	}
	return s
}

func allFailed(in Inputs, d *Decision) step {
	cause := "no metrics configured"
	if len(d.Metrics) > 0 {
		cause = firstError(d.Metrics)
	}
	if in.Fallback != nil && d.ConsecutiveFailures >= in.FailureThreshold {
		d.Fallback = true
		return step{
			desired: max(*in.Fallback, 0),
			reason:  ReasonFallbackReplicas,
			message: fmt.Sprintf("load index failed %d times in a row (%s); running fallback of %d tasks", d.ConsecutiveFailures, cause, *in.Fallback),
		}
	}
	return step{
		desired: in.Current,
		reason:  ReasonFailedGetLoadIndex,
		message: fmt.Sprintf("load index failed (%s); holding at %d", cause, in.Current),
	}
}

func (d *Decision) addLimit(reason string) {
	for _, l := range d.Limits {
		if l == reason {
			return
		}
	}
	d.Limits = append(d.Limits, reason)
}

// recordRecommendation adds the new recommendation and drops what the window no longer
// needs: entries older than the window, and entries no larger than a later
// one (the later one outlives them in the window and is at least as high).
// The result is ordered by time with strictly falling counts.
func recordRecommendation(recs []gputaskv1.Recommendation, now time.Time, window time.Duration, replicas int32) []gputaskv1.Recommendation {
	if window == 0 {
		return nil
	}
	recs = append(prune(recs, now, window), gputaskv1.Recommendation{Time: metav1.NewTime(now), Replicas: replicas})
	var kept []gputaskv1.Recommendation
	for _, r := range recs {
		for len(kept) > 0 && kept[len(kept)-1].Replicas <= r.Replicas {
			kept = kept[:len(kept)-1]
		}
		kept = append(kept, r)
	}
	if len(kept) > maxRecommendations {
		kept = kept[len(kept)-maxRecommendations:]
	}
	return kept
}

// prune returns the recommendations within the window, oldest first, in a
// new slice so that the caller's status is never modified.
func prune(recs []gputaskv1.Recommendation, now time.Time, window time.Duration) []gputaskv1.Recommendation {
	if window == 0 {
		return nil
	}
	cutoff := now.Add(-window)
	var kept []gputaskv1.Recommendation
	for _, r := range recs {
		if r.Time.Time.After(cutoff) {
			kept = append(kept, r)
		}
	}
	sort.SliceStable(kept, func(i, j int) bool { return kept[i].Time.Before(&kept[j].Time) })
	return kept
}

func failedNames(metrics []MetricOutcome) []string {
	var names []string
	for _, m := range metrics {
		if m.Err != nil {
			names = append(names, strconv.Quote(m.Name))
		}
	}
	return names
}

func firstError(metrics []MetricOutcome) string {
	for _, m := range metrics {
		if m.Err != nil {
			return fmt.Sprintf("metric %q: %v", m.Name, m.Err)
		}
	}
	return ""
}

// describeMetric says in words why a metric asked for its count.
func describeMetric(in MetricInput, m MetricOutcome) string {
	v := FormatValue(m.Value)
	switch m.Reason {
	case ReasonScaleUpAboveThreshold:
		return fmt.Sprintf("load %s above up threshold %s", v, FormatValue(in.UpThreshold))
	case ReasonScaleDownBelowThreshold:
		return fmt.Sprintf("load %s below down threshold %s", v, FormatValue(in.DownThreshold))
	case ReasonWithinThresholds:
		return fmt.Sprintf("load %s within thresholds [%s, %s]", v, FormatValue(in.DownThreshold), FormatValue(in.UpThreshold))
	default:
		return fmt.Sprintf("load %s against target %s asks for %d tasks", v, FormatValue(in.Target), m.Desired)
	}
}

// summarizeInputs renders what the decision saw, such as
// "queue: load=0.91 up=0.8 down=0.5" or "util: load=0.6 target=0.5":
// each metric's reading, then what the policy compares it with (of).
func summarizeInputs(in Inputs, metrics []MetricOutcome, of func(MetricInput) string) string {
	parts := make([]string, 0, len(metrics))
	for i, m := range metrics {
		part := m.Name + ": "
		if m.Err != nil {
			part += "error"
		} else {
			part += "load=" + FormatValue(m.Value)
		}
		parts = append(parts, part+of(in.Metrics[i]))
	}
	if w := in.Schedule; w != nil {
		parts = append(parts, "schedule "+w.Name)
	}
	return strings.Join(parts, ", ")
}

// FormatValue writes a load index as status and messages show it: the
// shortest decimal, at most six significant digits.
func FormatValue(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

// addSat adds without overflowing int32.
func addSat(a int32, b int64) int32 {
	return int32(min(max(int64(a)+b, math.MinInt32), math.MaxInt32))
}

// ceilSat rounds up, saturating at the int32 range.
func ceilSat(v float64) int32 {
	c := math.Ceil(v)
	switch {
	case math.IsNaN(c) || c <= 0:
		return 0
	case c >= math.MaxInt32:
		return math.MaxInt32
	}
	return int32(c)
}
