package scaling

import (
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// What a decision reads (Inputs) and what it gives back (Decision).

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
	// StartingFor is how long the Starting tasks serve, summed, before a
	// task asked for now is Ready (Startup.ServeFor at Startup and the
	// slowest recent start): the SLO policy counts what they work off of a
	// queue by then.
	StartingFor time.Duration

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
	// Engine is what the SLO policy knows of the tasks' engine and the
	// tokens they serve, or nil to size in request slots alone.
	Engine *Engine
	// EngineUnavailable, when set, says why the engine profile the set
	// names cannot be read: the SLO policy holds the count rather than
	// size without the engine it was told to size by.
	EngineUnavailable string

	// slotsFrom says where Policy.SLO.SlotsPerTask came from.
	slotsFrom string
	// kv is Queue.KV with this evaluation's reading (contextOf).
	kv KVReadings
}

// Engine is the SLO policy's view of the tasks' engine: the model that
// gives a task's capacity, and this evaluation's token readings. Every
// field is optional; a zero one is unknown.
type Engine struct {
	// Model is a measured engine profile. Without one the policy learns
	// a LinearITL from ITL and the running sequences (QueueState.ITL).
	Model EngineModel
	// KVTokens is how many tokens one task's KV cache holds.
	KVTokens float64
	// Context is the mean context of a running sequence, in tokens.
	Context float64
	// PromptTokens and GenerationTokens are the pool's prompt and output
	// token rates, per second.
	PromptTokens, GenerationTokens float64
	// GenerationMedian and PromptMedian are the median output and prompt
	// tokens of a request; 0 when unknown.
	GenerationMedian, PromptMedian float64
	// ITL is the mean inter-token latency the serving tasks show now.
	ITL time.Duration
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

	// relative is true when the policy's asks are relative to the count
	// (Step's): see restartStepWindow.
	relative bool
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
