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

// Policy is the resolved scaling policy, defaults applied.
type Policy struct {
	Type gputaskv1.ScalingPolicyType
	// StepUp and StepDown are the Step policy's increments.
	StepUp, StepDown int32
	// Tolerance is the Proportional policy's dead band around value/target = 1.
	Tolerance float64
	// SLO is the SLO policy's objective and pool shape.
	SLO SLO
}

// MetricInput is one metric's reading for this evaluation.
type MetricInput struct {
	Name string
	// Value is the reading; it is only used when Err is nil.
	Value float64
	// Err is why the reading failed.
	Err error
	// UpThreshold and DownThreshold drive the Step policy.
	UpThreshold, DownThreshold float64
	// Target drives the Proportional policy; it must be above 0.
	Target float64
	// Role is what the metric measures for the SLO policy.
	Role gputaskv1.MetricRole
}

// Burst is the fast path for bursts (autoscaling.burst).
type Burst struct {
	// Factor times a metric's UpThreshold (Step) or Target (Proportional)
	// is a burst reading.
	Factor float64
	// Window is how long a burst lasts after its last burst reading.
	Window time.Duration
}

// ScaleUpLimit allows at most Tasks to be added per Period.
type ScaleUpLimit struct {
	Tasks  int32
	Period time.Duration
}

// Inputs is everything a decision depends on.
type Inputs struct {
	// Now is the time of the decision; it stamps the recommendation and
	// measures the stabilization window and the scale-up period.
	Now time.Time
	// Current is spec.replicas.
	Current int32
	// Min and Max bound the result.
	Min, Max int32
	Policy   Policy
	Metrics  []MetricInput

	// Recommendations is status.recommendations from the last evaluation.
	Recommendations []gputaskv1.Recommendation
	// StabilizationWindow is the scale-down stabilization window; 0 disables it.
	StabilizationWindow time.Duration
	// ScaleUpLimit, when set, limits how fast tasks are added.
	ScaleUpLimit *ScaleUpLimit
	// LastScaleTime is when the autoscaler last changed the count (kept in
	// status.lastScaleTime); zero if never scaled.
	LastScaleTime time.Time
	// Interval is autoscaling.interval: the count changes at most once per
	// Interval after LastScaleTime. 0 disables the rule.
	Interval time.Duration

	// Starting counts the tasks on their way (see CountStarting). While it
	// is above 0, Step adds no tasks, and Proportional scales up from the
	// Current - Starting tasks that already serve.
	Starting int32

	// ConsecutiveFailures is status.consecutiveFailures before this evaluation.
	ConsecutiveFailures int32
	// FailureThreshold is how many failed evaluations in a row start the fallback.
	FailureThreshold int32
	// Fallback is fallback.replicas, or nil without a fallback.
	Fallback *int32

	// Schedule is the scheduled window in force, if any (ScheduleAt): its
	// floor raises Min and its ceiling lowers Max.
	Schedule *Window

	// Predictive, when set, turns predictive pre-warming on; History is
	// what it learned so far (status.predictive.history).
	Predictive *Predictive
	History    History

	// floorFrom and ceilingFrom say what set Min and Max: a schedule or the
	// predictive forecast.
	floorFrom, ceilingFrom string

	// Burst, when set, turns the fast path for bursts on; BurstUntil is
	// status.burstUntil, the end of the burst under way.
	Burst      *Burst
	BurstUntil time.Time

	// Capacity is how many of the set's tasks fit the GPU nodes, or nil when
	// capacityAware is off.
	Capacity *int32
	// CapacityLimit says what Capacity counts, for the decision's message:
	// empty means the GPU nodes; a queue's quota is named here.
	CapacityLimit string
	// HeldBack is status.heldBackReplicas: tasks a previous scale-in kept
	// because they were too young.
	HeldBack int32

	// Paused and Stopped come from the set's annotations; DryRun from its spec.
	Paused, Stopped, DryRun bool

	// Startup is how long a new task takes to be Ready: the SLO policy
	// sizes the pool for the load one Startup ahead. 0 means
	// DefaultStartupTimeout.
	Startup time.Duration
	// Queue is what the SLO policy kept from the last evaluation
	// (Decision.Queue); zero at first.
	Queue QueueState
}

// MetricOutcome is what one metric asked for.
type MetricOutcome struct {
	Name string
	// Value is the reading, valid when Err is nil.
	Value float64
	Err   error
	// Desired is the count this metric alone asked for, before any bound;
	// valid when Err is nil.
	Desired int32
	Reason  string
}

// Decision is the outcome of Decide.
type Decision struct {
	// Desired is the count to set. When Paused or Stopped it equals Current.
	Desired int32
	// Recommended is what the policy asked for, bounded by Min and Max but
	// before stabilization and rate limits. While paused or stopped it is what
	// the autoscaler would have done.
	Recommended int32
	// Reason is the CamelCase word that best explains Desired.
	Reason string
	// Message explains the decision in a sentence.
	Message string
	// Inputs summarizes what the decision saw, such as "load=0.91 up=0.8 down=0.5".
	Inputs string
	// Limits are the reasons that bounded Desired: TooFewReplicas,
	// TooManyReplicas, CapacityLimited, ScaleUpLimited.
	Limits []string
	// Stabilized is true when the stabilization window held back a scale-down.
	Stabilized bool
	// Metrics are the per-metric outcomes, in input order.
	Metrics []MetricOutcome
	// Winner is the index in Metrics of the metric that asked for the most
	// tasks, or -1 when none was read.
	Winner int
	// ConsecutiveFailures is the new status.consecutiveFailures.
	ConsecutiveFailures int32
	// Fallback is true when Desired came from fallback.replicas.
	Fallback bool
	// AllFailed is true when no metric could be read.
	AllFailed bool
	// Recommendations is the new status.recommendations.
	Recommendations []gputaskv1.Recommendation
	// RetryAfter, when above 0, is when the rule that held the count
	// (WaitingForInterval) allows a step again.
	RetryAfter time.Duration
	// BurstUntil is the new status.burstUntil: zero, or the end of the
	// burst under way.
	BurstUntil time.Time
	// History is what predictive pre-warming knows after this evaluation;
	// Forecast is the count it forecasts one lead time ahead (nil without
	// enough history), and ForecastMessage says which.
	History         History
	Forecast        *int32
	ForecastMessage string
	// Queue is the SLO policy's state after this evaluation, for the next
	// one's Inputs.Queue; SLO explains its decision (nil for the other
	// policies, and while the SLO policy's metrics could not be read).
	Queue QueueState
	SLO   *SLOOutcome
}

// Direction is "up", "down" or "hold", for metrics and events.
func (d Decision) Direction(current int32) string {
	switch {
	case d.Desired > current:
		return "up"
	case d.Desired < current:
		return "down"
	default:
		return "hold"
	}
}

// Decide computes the desired count. It is pure: the same inputs always give
// the same decision. The rules, in order:
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
//     offered load and its forecast raises the expected arrivals. Without
//     the roles it needs the count is held (MissingMetricRole); a failed
//     Running or arrivals reading is a failed read (rule 3).
func Decide(in Inputs) Decision {
	in = normalize(in)
	d := Decision{Winner: -1}
	if in.Policy.Type != gputaskv1.SLOPolicy {
		in = predict(in, &d)
	}
	d.Metrics = evaluateMetrics(in)
	d.Inputs = summarizeInputs(in, d.Metrics)

	s := combine(in, &d)
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
	}
	if !d.Fallback && in.Policy.Type != gputaskv1.SLOPolicy {
		s = waitForStartingTasks(in, &d, s)
		s = burst(in, &d, s)
	}
	s = limitScaleUp(in, &d, s)
	s = capAtCapacity(in, &d, s)
	s = holdYoungTasks(in, s)
	s = bound(in, &d, s)
	s = oneStepPerInterval(in, &d, s)

	d.Desired, d.Reason, d.Message = s.desired, s.reason, s.message
	applyPauseAndStop(in, &d)
	finishSLO(in, &d)
	restartStepWindow(in, &d)
	return d
}

// restartStepWindow starts a new stabilization window after a Step scale-down.
// Step asks are relative: each one is "one task fewer than now". Kept after a
// step, the asks made before it (one task more than the new count) would hold
// every further step for a whole window, so a set would shed one task per
// window instead of one per interval. The window has done its job once load
// stayed low through it; from then on a step follows every low reading, and
// any hold or scale-up ask is recorded again and holds scale-in for a window.
func restartStepWindow(in Inputs, d *Decision) {
	if in.Policy.Type == gputaskv1.StepPolicy && d.Desired < in.Current {
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
	switch in.Policy.Type {
	case gputaskv1.ProportionalPolicy:
	case gputaskv1.SLOPolicy:
		in.Policy.SLO = normalizeSLO(in.Policy.SLO)
		in.Burst = nil
	default:
		in.Policy.Type = gputaskv1.StepPolicy
	}
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
	if w := in.Schedule; w != nil {
		if floor := min(max(w.Min, 0), in.Max); floor > in.Min {
			in.Min, in.floorFrom = floor, "schedule "+w.Name
		}
		if w.Max != nil && *w.Max < in.Max {
			in.Max, in.ceilingFrom = max(*w.Max, in.Min), "schedule "+w.Name
		}
	}
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

// evaluateMetrics asks each metric for a count.
func evaluateMetrics(in Inputs) []MetricOutcome {
	out := make([]MetricOutcome, len(in.Metrics))
	for i, m := range in.Metrics {
		out[i] = MetricOutcome{Name: m.Name, Value: m.Value, Err: m.Err}
		if out[i].Err == nil {
			out[i].Err = checkValue(m.Value)
		}
		if out[i].Err != nil || in.Policy.Type == gputaskv1.SLOPolicy {
			continue
		}
		if in.Policy.Type == gputaskv1.ProportionalPolicy {
			out[i].Desired, out[i].Reason, out[i].Err = proportional(in.Current, perTaskBase(in), m, in.Policy.Tolerance)
		} else {
			out[i].Desired, out[i].Reason = stepDesired(in.Current, m, in.Policy)
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

// combine picks the largest count among the metrics read and applies the
// failure rules.
func combine(in Inputs, d *Decision) step {
	failed := failedNames(d.Metrics)
	d.ConsecutiveFailures = in.ConsecutiveFailures
	if len(failed) > 0 || len(d.Metrics) == 0 {
		d.ConsecutiveFailures = addSat(in.ConsecutiveFailures, 1)
	} else {
		d.ConsecutiveFailures = 0
	}
	if in.Policy.Type == gputaskv1.SLOPolicy {
		return combineSLO(in, d, failed)
	}
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
// "queue: load=0.91 up=0.8 down=0.5" or "util: load=0.6 target=0.5".
func summarizeInputs(in Inputs, metrics []MetricOutcome) string {
	parts := make([]string, 0, len(metrics))
	for i, m := range metrics {
		part := m.Name + ": "
		if m.Err != nil {
			part += "error"
		} else {
			part += "load=" + FormatValue(m.Value)
		}
		switch in.Policy.Type {
		case gputaskv1.SLOPolicy:
			part += " role=" + string(in.Metrics[i].Role)
		case gputaskv1.ProportionalPolicy:
			part += " target=" + FormatValue(in.Metrics[i].Target)
		default:
			part += " up=" + FormatValue(in.Metrics[i].UpThreshold) + " down=" + FormatValue(in.Metrics[i].DownThreshold)
		}
		parts = append(parts, part)
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
