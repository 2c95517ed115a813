package scaling

import (
	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// rule is one scaling policy: how the readings become a count. Step,
// Proportional and SLO each implement it in their own file; burst,
// predictive pre-warming and schedules are modifiers that wrap a rule
// (burst.go, predict.go, schedule.go). Decide runs the rules every policy
// shares (bounds, stabilization, rate limits, capacity, one step per
// interval) around it, so a new policy is a new file, not a new branch in
// the loop.
type rule interface {
	// ask is the count the readings ask for, before any bound. It fills
	// d's per-metric asks, Winner, Inputs, ConsecutiveFailures and
	// AllFailed, and whatever the policy explains (SLO, Queue, History).
	// A modifier may tighten in's bounds (a schedule's floor, a forecast).
	ask(in *Inputs, d *Decision) step
	// settle is the policy's say once the stabilization window has had
	// its own, before the rate limits: Step and Proportional wait for
	// the tasks on their way, a burst asks at once for what it needs.
	settle(in Inputs, d *Decision, s step) step
}

// levels is what a policy that aims each metric at a load index level
// tells the modifiers that work from that level.
type levels interface {
	// burstLevel is the reading that Burst.Factor multiplies into a
	// burst, and its name for messages.
	burstLevel(m MetricInput) (float64, string)
	// demandLevel is the reading at which one task carries its share:
	// the forecast learns serving × value / demandLevel tasks.
	demandLevel(m MetricInput) float64
}

// policyRule is the policy's rule, without modifiers. It is the one place
// that tells the policies apart by their type; an unknown type is Step,
// the API's default.
func policyRule(p Policy) rule {
	switch p.Type {
	case gputaskv1.ProportionalPolicy:
		return proportionalRule{}
	case gputaskv1.SLOPolicy:
		return sloRule{}
	default:
		return stepRule{}
	}
}

// ruleFor is the policy's rule wrapped in the modifiers the inputs turn
// on. Burst and predictive pre-warming work from a load index level, so
// they wrap the policies that have one; the SLO policy forecasts arrivals
// and absorbs bursts inside its own model.
func ruleFor(in Inputs) rule {
	r := policyRule(in.Policy)
	if l, ok := r.(levels); ok {
		if in.Predictive != nil {
			r = forecasting{inner: r, levels: l}
		}
		if in.Burst != nil {
			r = bursting{inner: r, levels: l}
		}
	}
	if in.Schedule != nil {
		r = scheduled{inner: r}
	}
	return r
}

// looksAhead is a policy that sizes the pool for the load one start-up
// ahead (Inputs.Startup); the others leave Startup unset.
type looksAhead interface{ startupAhead() }

// metricsChecker is a policy that needs its metrics in a certain shape
// (the SLO policy's roles).
type metricsChecker interface {
	checkMetrics(metrics []MetricInput) (reason, message string)
}

// CheckMetrics says why policy p cannot work from these metrics, as a
// condition reason and message, or returns empty strings when it can.
// The CRD refuses such sets; one stored before its rules holds its count.
func CheckMetrics(p Policy, metrics []MetricInput) (reason, message string) {
	if c, ok := policyRule(p).(metricsChecker); ok {
		return c.checkMetrics(metrics)
	}
	return "", ""
}
