package scaling

import (
	"fmt"
	"math"
	"strings"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/queueing"
)

// Reasons of the SLO policy's decisions and of its condition.
const (
	ReasonSLOScaleUp   = "SLOScaleUp"
	ReasonSLOScaleDown = "SLOScaleDown"
	ReasonWithinSLO    = "WithinSLO"
	// ReasonMissingMetricRole: the SLO policy lacks a metric it needs (a
	// set stored before the CRD's rules); the count is held.
	ReasonMissingMetricRole = "MissingMetricRole"
	// ReasonServiceTimeUnknown: no request has finished yet, so the
	// service time is unknown; the count only rises to the tasks the
	// requests already need.
	ReasonServiceTimeUnknown = "ServiceTimeUnknown"
	// ReasonSLOOutOfReach: the SLO cannot be met within maxReplicas or
	// the capacity (SLOOutcome.Unmet).
	ReasonSLOOutOfReach = "SLOOutOfReach"
)

// Defaults and bounds of the SLO policy.
const (
	DefaultSLOPercentile          = 95
	DefaultServiceTimeVariability = 1
	// ServiceTimeWindow is the time constant over which the service time
	// is smoothed.
	ServiceTimeWindow = 5 * time.Minute
	// MaxSLOTasks bounds the model's search, as the API bounds maxReplicas.
	MaxSLOTasks = 100000
	// maxRateSamples bounds QueueState.Rates.
	maxRateSamples = 120
	// maxTrendGrowth caps how far the trend may raise the expected rate
	// above the measured one, as a multiple of it: a few noisy readings
	// must not extrapolate to a pool many times the load.
	maxTrendGrowth = 1
	// BacklogClearing is the share of a start-up within which a queue is
	// to be cleared once the tasks asked for are Ready: the requests
	// still queued then have waited a start-up already, so every
	// interval of the clearing adds to the misses.
	BacklogClearing = 0.75
	// UnknownRise is how many headrooms above the sustained rate a rise
	// may go and still be absorbed as a burst the history knows.
	UnknownRise = 2
)

// SLO is the SLO policy's objective and pool shape, defaults applied.
type SLO struct {
	// Wait is how long a request may wait for a slot, at Percentile.
	Wait       time.Duration
	Percentile float64
	// SlotsPerTask is how many requests one task serves at once. Set, it
	// overrides the capacity an engine model gives (Inputs.Engine).
	SlotsPerTask int32
	// ServiceVariability is Cs².
	ServiceVariability float64
	// TTFT is the time to first token a request may see at Percentile:
	// its wait plus its prompt's prefill. 0 sets no such objective; the
	// wait objective is then Wait alone.
	TTFT time.Duration
	// ITL is the inter-token latency each sequence must keep: with an
	// engine model, it sets how many sequences a task serves, and bounds
	// how long a request holds its slot. 0 sets no such objective.
	ITL time.Duration
}

// QueueState is what the SLO policy carries from one evaluation to the
// next. The zero value is a fresh start.
type QueueState struct {
	// LastTime is the time of the last reading.
	LastTime time.Time
	// Little holds the smoothed running requests and completions, whose
	// ratio is the service time.
	Little queueing.Little
	// Rates are the recent arrival rates, oldest first: their trend and
	// their dispersion, and the pool's growth over CountWindow.
	Rates []RateSample
	// Correction is the factor on the arrival rate learned from the
	// observed wait percentile; 0 means 1.
	Correction float64
	// Jump is when the arrival rate last stepped (isJump): the trend and
	// the dispersion are read from the rates since.
	Jump time.Time
	// Rises is the history the burst headroom is sized from.
	Rises Rises
	// ITL is the online fit of the workers' inter-token latency against
	// their running sequences (Inputs.Engine.ITL).
	ITL ITLFit
	// Context is the mean context of a running sequence last known, in
	// tokens: the capacity is read at it while the pool is idle.
	Context float64
	// KV is the KV cache's tokens in use and the sequences that hold them,
	// smoothed: the context the capacity is read at (contextOf).
	KV KVReadings
	// Started is the last reading at which a task was starting.
	Started time.Time
	// AskedMore is the last reading at which the model asked for more
	// tasks than the pool had (see sloStep).
	AskedMore time.Time
}

// SLOOutcome explains an SLO decision: the model's inputs, what it asked
// for, and what it predicts at the chosen count.
type SLOOutcome struct {
	// Arrivals is the arrival rate measured now (requests/s), and
	// Expected the rate the count is sized for: the arrivals expected over
	// [now + startup, now + startup + interval], plus the backlog rate,
	// times the correction.
	Arrivals, Expected float64
	// completions is the rate requests finished at (read, or from the
	// arrivals and the pool's growth).
	completions float64
	// Backlog is the rate standing for the waiting requests that the
	// serving tasks cannot clear before a new task is Ready.
	Backlog float64
	// ServiceTime is the mean time a request holds a slot, to the
	// millisecond; 0 while unknown.
	ServiceTime time.Duration
	// service is the service time in seconds, unrounded, as the model
	// used it; serviceNow the one read now where the busy start-ups'
	// longer one was used instead (Rises.BusyService), 0 otherwise.
	service, serviceNow float64
	// Slots, Ca2 and Cs2 complete the model.
	Slots    int32
	Ca2, Cs2 float64
	// Correction is the factor from the observed wait percentile that
	// this decision used (1 without one); QueueState.Correction is the
	// factor for the next.
	Correction float64
	// Startup is the start-up time the count looks ahead by.
	Startup time.Duration
	// Tasks is the count the model asks for before any bound: the most of
	// the count for the expected load, the count that keeps the SLO at the
	// highest load until a new task could start (while shrinking), and
	// the tasks the running requests occupy.
	Tasks int32
	// SlotsFrom says where Slots came from: SlotsFromOverride,
	// SlotsFromProfile, SlotsFromFit or SlotsFromDefault.
	SlotsFrom string
	// Bursts is the rise of the arrival rate within one start-up that the
	// history shows (Rises.Headroom, each rise as it was seen; requests/s,
	// 0 until the history is long enough): a rise beyond it is a burst
	// that may pass, beyond twice it one the history does not know.
	// Headroom is the same at the rate the traffic holds (the rises of
	// busier hours scaled down), the capacity the pool keeps for it;
	// Sustained the rate the arrivals held
	// for a quarter of a start-up. Absorbed is true when the arrivals rose
	// further than Bursts above it: the count is sized for Sustained plus
	// Headroom until the rise has lasted that long.
	Bursts, Headroom, Sustained float64
	Absorbed                    bool
	// PredictedWait is the wait at the SLO's percentile with the chosen
	// count at the expected rate (for a count held at the pool's, the
	// rate of now and its queue, which the count is kept for); +Inf when
	// the slots cannot keep up.
	PredictedWait float64
	// PredictedTTFT is PredictedWait plus Prefill, in seconds; +Inf with
	// it. PredictedITL is the ITL the engine model gives at the chosen
	// count (predictedITL); 0 without a model.
	PredictedTTFT float64
	PredictedITL  time.Duration
	// Prefill is the mean prompt's prefill, in seconds (0 when unknown),
	// and Context the mean context of a running sequence, in tokens, that
	// the capacity was read at (0 when unknown).
	Prefill, Context float64
	// objective is the wait objective the count was sized for, in
	// seconds: Wait, or less with a TTFT objective (waitObjective).
	objective float64
	// heldFor is the rate a count held at the pool's serves: the
	// arrivals and the queue of now (held true); the predictions are at
	// it rather than at the look-ahead the count was held against.
	heldFor float64
	held    bool
	// Unmet is true when the SLO cannot be met within maxReplicas or the
	// capacity (Reachable tasks); Message says by how much.
	Unmet     bool
	Reachable int32
	Message   string
}

// CheckRoles says why the SLO policy cannot work from these metrics, as a
// condition reason and message, or returns empty strings when it can. The
// CRD refuses such sets; one stored before its rules holds its count.
func CheckRoles(metrics []MetricInput) (reason, message string) {
	have := map[gputaskv1.MetricRole]int{}
	for _, m := range metrics {
		have[m.Role]++
	}
	var missing []string
	if have[gputaskv1.RoleRunning] == 0 {
		missing = append(missing, string(gputaskv1.RoleRunning))
	}
	if have[gputaskv1.RoleArrivals]+have[gputaskv1.RoleCompletions] == 0 {
		missing = append(missing, string(gputaskv1.RoleArrivals)+" or "+string(gputaskv1.RoleCompletions))
	}
	if len(missing) > 0 {
		return ReasonMissingMetricRole, "the SLO policy needs a metric of role " + strings.Join(missing, " and one of role ")
	}
	for role, n := range have {
		if role != "" && n > 1 {
			return ReasonMissingMetricRole, fmt.Sprintf("the SLO policy reads one metric of role %s, %d have it", role, n)
		}
	}
	return "", ""
}

// sloRule is the SLO policy (rule 17): the metrics together, by role,
// feed one queueing model that asks for the smallest count meeting the
// SLO at the load expected one start-up ahead.
type sloRule struct{}

func (sloRule) ask(in *Inputs, d *Decision) step {
	if idlePool(*in) {
		// Nothing arrives, runs or waits: the percentiles, the ITL and
		// the KV cache have nothing to observe (histogram_quantile over
		// no observations is NaN), which is no failure of the source.
		// They read as nothing seen: no wait, no latency, an empty cache.
		for i := range d.Metrics {
			if d.Metrics[i].Err != nil && observational(in.Metrics[i].Role) {
				d.Metrics[i].Err, d.Metrics[i].Value = nil, 0
			}
		}
	}
	failed := countFailures(*in, d)
	d.Inputs = summarizeInputs(*in, d.Metrics, func(m MetricInput) string { return " role=" + string(m.Role) })
	return combineSLO(*in, d, failed)
}

// settle adds nothing: the count is already the whole pool one start-up
// ahead, the tasks on their way included.
func (sloRule) settle(_ Inputs, _ *Decision, s step) step { return s }

func (sloRule) checkMetrics(metrics []MetricInput) (reason, message string) {
	return CheckRoles(metrics)
}

func (sloRule) startupAhead() {}

// observational says whether a role reads what the requests saw (a
// percentile, the ITL, the KV cache's use) rather than how many there
// are: with no request, such a metric has no value.
func observational(role gputaskv1.MetricRole) bool {
	switch role {
	case gputaskv1.RoleWaitPercentile, gputaskv1.RoleTTFTPercentile, gputaskv1.RoleInterTokenLatency, gputaskv1.RoleKVCacheUsage,
		gputaskv1.RoleGenerationTokensMedian, gputaskv1.RolePromptTokensMedian:
		return true
	}
	return false
}

// idlePool says whether the readings of the counting roles were all read
// and all zero: no request arrives or finishes, and none runs or waits.
func idlePool(in Inputs) bool {
	counted := false
	for _, m := range in.Metrics {
		switch m.Role {
		case gputaskv1.RoleArrivals, gputaskv1.RoleCompletions, gputaskv1.RoleRunning, gputaskv1.RoleWaiting:
			if m.Err != nil || !(m.Value == 0) {
				return false
			}
			counted = counted || m.Role == gputaskv1.RoleRunning
		}
	}
	return counted
}

// roleReadings are the SLO policy's readings by role.
type roleReadings struct {
	value  map[gputaskv1.MetricRole]float64
	index  map[gputaskv1.MetricRole]int
	failed map[gputaskv1.MetricRole]bool
}

func readRoles(d *Decision, in Inputs) roleReadings {
	r := roleReadings{value: map[gputaskv1.MetricRole]float64{}, index: map[gputaskv1.MetricRole]int{}, failed: map[gputaskv1.MetricRole]bool{}}
	for i, m := range d.Metrics {
		role := in.Metrics[i].Role
		r.index[role] = i
		if m.Err != nil {
			r.failed[role] = true
			continue
		}
		r.value[role] = m.Value
	}
	return r
}

func (r roleReadings) has(role gputaskv1.MetricRole) bool {
	_, ok := r.value[role]
	return ok
}

// combineSLO is combine for the SLO policy: the model asks for one count
// from all the metrics together. A set without the roles it needs holds
// its count; a failed Running, Arrivals or Completions reading is a failed
// read (hold, or the fallback); a failed Waiting or WaitPercentile reading
// is left out, and while it fails the count does not go down.
func combineSLO(in Inputs, d *Decision, failed []string) step {
	if in.Predictive != nil {
		// Kept as it is unless this reading teaches it something.
		d.History = in.History
	}
	if reason, msg := CheckRoles(in.Metrics); reason != "" {
		d.AllFailed = true
		d.Queue = in.Queue
		return step{desired: in.Current, reason: reason, message: fmt.Sprintf("%s; holding at %d", msg, in.Current)}
	}
	if in.EngineUnavailable != "" {
		d.AllFailed = true
		d.Queue = in.Queue
		return step{desired: in.Current, reason: gputaskv1.ReasonEngineProfileUnavailable,
			message: fmt.Sprintf("%s; holding at %d", in.EngineUnavailable, in.Current)}
	}
	r := readRoles(d, in)
	required := r.failed[gputaskv1.RoleRunning] ||
		(!r.has(gputaskv1.RoleArrivals) && !r.has(gputaskv1.RoleCompletions))
	if required {
		d.AllFailed = true
		d.Queue = in.Queue
		return allFailed(in, d)
	}
	for _, role := range []gputaskv1.MetricRole{gputaskv1.RoleArrivals, gputaskv1.RoleCompletions} {
		if r.has(role) {
			d.Winner = r.index[role]
			break
		}
	}
	s := sloStep(in, d, r)
	for i := range d.Metrics {
		if d.Metrics[i].Err == nil {
			d.Metrics[i].Desired, d.Metrics[i].Reason = s.desired, s.reason
		}
	}
	if len(failed) > 0 && s.desired < in.Current {
		return step{
			desired: in.Current,
			reason:  ReasonFailedGetLoadIndex,
			message: fmt.Sprintf("%s; not scaling down to %d while %s failed", s.message, s.desired, strings.Join(failed, ", ")),
		}
	}
	return s
}

// settled says whether the observed percentile reads the pool as it is:
// no task is starting, the count has not changed within
// ServiceTimeWindow, the window of the percentile queries the docs give,
// and the queue that built while the last tasks started (started, the
// last reading that saw one) has had time to clear and leave that window.
// While tasks start the pool is short by design (the count was raised
// for load one start-up ahead), and the waits of that time say nothing
// of the model's error at the count that serves now; nor do those of the
// queue it left, which the new tasks clear within BacklogClearing of a
// start-up after they are Ready.
func settled(in Inputs, started time.Time) bool {
	cleared := ServiceTimeWindow + time.Duration(BacklogClearing*float64(in.Startup))
	return in.Starting == 0 && (in.LastScaleTime.IsZero() || in.Now.Sub(in.LastScaleTime) >= ServiceTimeWindow) &&
		(started.IsZero() || in.Now.Sub(started) >= cleared)
}

// sloReading is what one evaluation reads of the pool: the requests
// running and waiting, the arrival and completion rates (each derived
// from the other where only one is counted), and whether the arrivals
// are traffic starting from idle (riseWithin's onset).
type sloReading struct {
	running, waiting, arrivals, completions float64
	onset                                   bool
}

// observe records a reading in the policy's state: the service time
// learned by Little's law, the rate history, its jumps and rises, the
// ITL against the running sequences, the context and the KV cache read.
func observe(in Inputs, r roleReadings) (QueueState, sloReading) {
	running, waiting := r.value[gputaskv1.RoleRunning], r.value[gputaskv1.RoleWaiting]
	inPool := running + waiting
	state := in.Queue
	arrivals, completions := r.value[gputaskv1.RoleArrivals], r.value[gputaskv1.RoleCompletions]
	counted := RateSample{Time: in.Now, Rate: arrivals, Recent: arrivals, OverService: arrivals, InPool: inPool}
	switch {
	case r.has(gputaskv1.RoleArrivals) && !r.has(gputaskv1.RoleCompletions):
		before, span := countedSince(state.Rates, in.Now, CountWindow, jitterOf(in))
		completions = queueing.CompletionsFromArrivals(arrivals, inPool, before, span)
	case !r.has(gputaskv1.RoleArrivals):
		counted.Rate, counted.Recent = arrivalsFromCompletions(state.Rates, in.Now, jitterOf(in), completions, inPool)
		counted.OverService = meanOfLast(state.Rates, counted.Recent, serviceIntervals(state.Little, in.Interval))
		// Sized for the higher: a step up shows in the last intervals'
		// growth a minute before the window's rate has taken it in.
		arrivals = max(counted.Rate, counted.OverService)
	}
	weight := readingWeight(in, ServiceTimeWindow)
	if state.LastTime.IsZero() && !r.has(gputaskv1.RoleCompletions) {
		// A first reading without a completions metric takes the
		// completions to be the arrivals, as in steady state; it may be
		// the first seconds of traffic, so it weighs as one interval's.
		weight = 1 - math.Exp(-max(in.Interval, time.Second).Seconds()/ServiceTimeWindow.Seconds())
	}
	if rate, learn := littleRate(completions, arrivals); learn {
		state.Little = state.Little.Observe(running, rate, weight)
	}
	state.LastTime = in.Now
	if in.Starting > 0 {
		state.Started = in.Now
	}
	jump := isJump(state.Rates, in.Now, trendWindow(in), counted.Rate)
	state.Rates = appendRate(state.Rates, counted, rateWindow(in))
	if jump {
		state.Jump = in.Now
	}
	// A rise from idle is traffic starting, sized for the rate it reads:
	// it says nothing of the bursts on top of a load that the headroom
	// absorbs, and counted there it would keep a second pool's worth of
	// headroom for the hours the history covers. Its start-up gets its
	// bucket, at 0.
	rise, low, began, from, onset := riseWithin(state.Rates, in.Now, in.Startup+jitterOf(in))
	if onset {
		rise = 0
	}
	state.Rises = state.Rises.Record(in.Now, began, from, rise, low, in.Startup)
	serving := max(in.Current-in.Starting, 0)
	if e := in.Engine; e != nil && e.ITL > 0 && serving > 0 {
		state.ITL = state.ITL.Observe(in.Now, running/float64(serving), e.ITL)
	}
	if e := in.Engine; e != nil && e.Context > 0 && !math.IsInf(e.Context, 0) {
		state.Context = e.Context
	}
	if in.kv.Sequences > 0 {
		state.KV = in.kv
	}
	return state, sloReading{running: running, waiting: waiting, arrivals: arrivals, completions: completions, onset: onset}
}

// sloStep runs the model on this evaluation's readings and updates the
// policy's state in d.Queue.
func sloStep(in Inputs, d *Decision, r roleReadings) step {
	slo := in.Policy.SLO
	state, read := observe(in, r)
	running, waiting, inPool := read.running, read.waiting, read.running+read.waiting
	arrivals, completions, onset := read.arrivals, read.completions, read.onset
	serving := max(in.Current-in.Starting, 0)
	d.Queue = state

	o := &SLOOutcome{Arrivals: arrivals, completions: completions, Slots: slo.SlotsPerTask, SlotsFrom: in.slotsFrom, Cs2: slo.ServiceVariability, Startup: in.Startup, Correction: correctionOf(state.Correction)}
	if in.Engine != nil {
		o.Context = in.Engine.Context
	}
	d.SLO = o
	occupied := ceilSat(running / float64(slo.SlotsPerTask))
	service, ok := state.Little.ServiceTime()
	if !ok && arrivals == 0 && inPool == 0 {
		// No request, ever: whatever a request takes, none needs a slot.
		o.Tasks = 0
		d.Inputs = o.inputs()
		return step{desired: 0, reason: sloReason(0, in.Current), message: "no requests arrive, run or wait: no task is needed"}
	}
	if !ok {
		// Without a finished request there is no service time to size by;
		// what is known is that the requests in the pool need slots.
		need := max(occupied, ceilSat(inPool/float64(slo.SlotsPerTask)))
		if need == 0 && arrivals > 0 {
			need = 1
		}
		o.Tasks = max(need, in.Current)
		if nearZero(arrivals) {
			// A trickle too thin to learn from: the requests in the pool
			// are all the load there is, and holding the count until it
			// thickens would keep an idle pool up all night.
			o.Tasks = need
		}
		d.Inputs = o.inputs()
		return step{desired: o.Tasks, reason: ReasonServiceTimeUnknown,
			message: fmt.Sprintf("no request has finished yet, so the service time is unknown; %d tasks for the %s requests in the pool", o.Tasks, FormatValue(inPool))}
	}
	if bound, ok := engineServiceTime(in, arrivals); ok {
		service = min(service, bound)
	}
	// Capacity is read at the service time of the pool's busy start-ups
	// (Rises.BusyService), not at the shorter one of a quiet minute: the
	// burst that lengthens it comes before the tasks asked for it. Read
	// per output token too, longer requests of the last hours are not
	// taken for a busy service.
	if tokens, ok := tokensPerRequest(in, completions); ok {
		state.Rises = state.Rises.Served(in.Now, service, service/tokens)
		if busy, perToken, ok := state.Rises.BusyService(in.Now, in.Startup); ok && min(busy, perToken*tokens) > service {
			o.serviceNow, service = service, min(busy, perToken*tokens)
		}
	}
	d.Queue = state
	o.ServiceTime, o.service = seconds(service), service
	// A step in the rate is not burstiness: the dispersion, as the trend,
	// is read from the rates since the last jump, so traffic coming back
	// after idle is not sized as if it were a storm.
	o.Ca2 = queueing.ArrivalVariability(countsOf(ratesSince(state.Rates, state.Jump)))
	model := queueing.Model{ServiceTime: service, Slots: slo.SlotsPerTask, Ca2: o.Ca2, Cs2: slo.ServiceVariability}
	objective := queueing.SLO{Wait: waitObjective(in, arrivals).Seconds(), Percentile: slo.Percentile}
	o.objective, o.Prefill = objective.Wait, prefillSeconds(in, arrivals)

	observed, ok := r.value[gputaskv1.RoleWaitPercentile]
	if ttft, has := r.value[gputaskv1.RoleTTFTPercentile]; !ok && has && slo.TTFT > 0 {
		// The observed TTFT less the mean prompt's prefill is the wait
		// the requests saw, against the wait the TTFT leaves.
		observed, ok = max(ttft-o.Prefill, 0), true
	}
	if ok && serving > 0 && settled(in, state.Started) {
		// The error corrects the next evaluations, not this one: sized by
		// the factor learned so far, a count never falls because the load
		// rose and the model's prediction came nearer the observed wait.
		predicted := model.WaitPercentile(serving, arrivals*o.Correction, objective)
		state.Correction = queueing.Correct(o.Correction, observed, predicted, objective.Wait)
		d.Queue = state
	}

	startup := max(in.Startup, in.Interval, time.Second).Seconds()
	interval := in.Interval.Seconds()
	// A step in the rate is not a trend: the trend is read from the
	// rates since the last jump. Nor is traffic starting from idle, whose
	// rate over the counting window climbs for a window after the step:
	// within a start-up of idle the pool is sized for the rate it reads.
	var slope float64
	if !onset {
		slope = queueing.Trend(trendSamples(state.Rates, in.Now, trendWindow(in), state.Jump))
	}
	sizing, unknown := arrivals, false
	level := sustainedRate(state.Rates, in.Now, in.Startup+jitterOf(in))
	if h, known := state.Rises.Headroom(in.Now, in.Startup, math.Inf(1)); known {
		// A rise beyond the headroom that has not lasted a quarter of a
		// start-up may be a burst that is gone before a new task is
		// Ready: the pool is sized for the sustained rate and its
		// headroom until the rise has lasted, and then follows it. A
		// quarter lets a burst of one or two readings pass at a 2-minute
		// start-up and follows a step within two intervals; waiting half
		// a start-up lets the queue of a real step outgrow the SLO. A
		// rise beyond the sustained rate by more than twice the headroom
		// is none the history knows (a flash crowd, a new client): it is
		// followed at once, since every interval it waits grows the queue
		// the new tasks must clear. Nor does the history say where it
		// ends: one that is a step too, more than doubling the sustained
		// rate, is taken to go on by as much again within a start-up
		// until it has lasted a quarter of one (the trend's cap bounds it
		// at maxTrendGrowth), since the tasks asked for now are Ready only
		// then. Traffic back from idle is sized for the rate it reads, and
		// a smaller rise is no step: with little or no headroom, a reading
		// a little above the last ones would otherwise read as a trend.
		// The rises tell the bursts the history knows as they were seen;
		// the capacity kept for them is taken at the rate the traffic
		// holds (see Rises.Headroom): a burst of the afternoon is no burst of the
		// evening's traffic, yet a rise that large is still one the
		// history knows, not a crowd to follow at once.
		o.Bursts = h
		o.Headroom, _ = state.Rises.Headroom(in.Now, in.Startup, level)
		o.Sustained = sustainedRate(state.Rates, in.Now, sustainWindow(in))
		switch {
		case arrivals > o.Sustained+h && arrivals <= o.Sustained+UnknownRise*h:
			sizing, slope, o.Absorbed = o.Sustained, 0, true
		case arrivals > max(o.Sustained+UnknownRise*h, 2*o.Sustained) && !onset && !nearZero(o.Sustained):
			slope, unknown = max(slope, (arrivals-o.Sustained)/startup), true
		}
	}
	ahead := func(h float64) float64 {
		return max(0, sizing+min(slope*h, maxTrendGrowth*sizing))
	}
	// The headroom is a floor: the pool serves, without a new task, the
	// lowest rate of the last start-up plus the rise the traffic shows
	// within one. It is not added to the rate the model sizes for, whose
	// Ca² already covers the variability from one reading to the next.
	future := ahead(startup + interval/2)
	if o.Bursts > 0 {
		future = max(future, level+o.Headroom)
	}
	keep := max(arrivals, ahead(startup))
	if rate, known, act := forecastRate(in, d, service); known {
		forecast, _ := model.Tasks(rate*o.Correction, objective, MaxSLOTasks)
		d.Forecast = &forecast
		if act {
			future, keep = max(future, rate), max(keep, rate)
		}
	}
	// A queue is cleared within BacklogClearing of a start-up after the
	// tasks asked for now are Ready, or one service time if longer (a
	// waiting request needs one slot at most, however long it holds it),
	// counting what arrives beyond what the serving tasks complete until
	// then: the rate expected a quarter of a start-up ahead (no lower
	// than now's), the mean until the first new tasks are Ready (the
	// quickest start in about half the median). While a burst is absorbed it is taken to pass:
	// the arrivals counted are the sustained rate and its headroom.
	queued := max(arrivals, ahead(startup/4))
	if o.Absorbed {
		queued = min(arrivals, sizing+o.Bursts)
	}
	capacity := servingCapacity(in, serving, completions, service)
	o.Backlog = queueing.BacklogRate(waiting, queued, capacity+startingCapacity(in, serving, capacity, startup),
		startup, max(BacklogClearing*startup, service))
	o.Expected = (future + o.Backlog) * o.Correction
	forFuture, _ := model.Tasks(o.Expected, objective, MaxSLOTasks)
	forNow, _ := model.Tasks((keep+o.Backlog)*o.Correction, objective, MaxSLOTasks)
	forITL := itlTasks(in, o)
	o.Tasks = max(forFuture, min(forNow, in.Current), occupied, forITL)
	// One task more that only the look-ahead asks for (the trend, the
	// headroom, the rate expected a start-up on) is added only when a
	// reading of the last CountWindow asked for more too. Around a
	// small pool a single interval's rate can ask for one task more
	// with nothing the pool needs behind it, and each task added is paid
	// for through minTaskAge and the scale-down window. A rise of two
	// tasks or more is followed at once, as is one the arrivals and the
	// queue of now need (the first task for traffic that reaches an
	// empty pool among them); one asked for again within the minute is
	// followed then. So is one that only the requests running occupy
	// (an engine running more sequences than the capacity its tasks are
	// read at): held, the pool keeps its count, and the next reading
	// that still finds them asks again. A pool of one task does not hold
	// its second where a task takes at least the scale-down window to
	// start (startsSlowly).
	asked := o.Tasks
	if asked > in.Current {
		d.Queue.AskedMore = in.Now
	}
	now := (arrivals + o.Backlog) * o.Correction
	held := asked == in.Current+1 && !(in.Current == 1 && startsSlowly(in)) && !within(state.AskedMore, in.Now, CountWindow) &&
		tasksNow(in, o, model, objective, now) <= in.Current
	if held {
		o.Tasks, o.held, o.heldFor = in.Current, true, now
	}
	d.Inputs = o.inputs()

	reason := sloReason(o.Tasks, in.Current)
	msg := fmt.Sprintf("%s/s expected (%s/s now) at %s per request need %d tasks of %d slots for a p%s wait within %v",
		FormatValue(o.Expected), FormatValue(arrivals), o.ServiceTime, forFuture, slo.SlotsPerTask, FormatValue(slo.Percentile), seconds(objective.Wait))
	switch {
	case o.Tasks == occupied && occupied > forFuture && occupied > min(forNow, in.Current):
		msg += fmt.Sprintf("; %d tasks for the %s running requests", occupied, FormatValue(running))
	case o.Tasks == forITL && forITL > forFuture && forITL > min(forNow, in.Current):
		msg += fmt.Sprintf("; %d tasks keep the ITL within %v with the prompts' prefill", forITL, slo.ITL)
	case o.Tasks > forFuture:
		msg += fmt.Sprintf("; %d kept for the load until a new task could start", o.Tasks)
	}
	if o.serviceNow > 0 {
		msg += fmt.Sprintf("; %v per request is the p%d of the last start-ups' longest, where %v is read now",
			o.ServiceTime, BusyServicePercentile, seconds(o.serviceNow))
	}
	if held {
		msg += fmt.Sprintf("; %d tasks asked for by this reading alone: held at %d unless another within %v asks for more too", asked, in.Current, CountWindow)
	}
	if unknown {
		msg += fmt.Sprintf("; the rise to %s/s, beyond twice the rises of %s/s the last hours show above the %s/s sustained, is taken to go on to %s/s within a start-up",
			FormatValue(arrivals), FormatValue(o.Bursts), FormatValue(o.Sustained), FormatValue(ahead(startup)))
	}
	if o.Absorbed {
		msg += fmt.Sprintf("; the rise to %s/s, within twice the rises of %s/s the last hours show, is absorbed by the headroom of %s/s above the %s/s sustained until it lasts %v",
			FormatValue(arrivals), FormatValue(o.Bursts), FormatValue(o.Headroom), FormatValue(o.Sustained), in.Startup/4)
	}
	return step{desired: o.Tasks, reason: reason, message: msg}
}

// startsSlowly reports whether a task takes at least the scale-down
// window to start (Inputs.Startup, startupTimeout until a task has been
// Ready). A second task asked for by one reading around a pool of one
// costs about that window when it is not needed (and minTaskAge); held,
// the pool meets a step with one task, and the step's queue grows on it
// for a whole start-up, at least as long as the window the task would
// have cost.
func startsSlowly(in Inputs) bool {
	return in.Startup >= in.StabilizationWindow
}

// within reports whether t is set and no more than window before now.
func within(t, now time.Time, window time.Duration) bool {
	return !t.IsZero() && now.Sub(t) <= window
}

// tasksNow is the count that keeps the wait and the ITL within their
// objectives at rate, without looking ahead.
func tasksNow(in Inputs, o *SLOOutcome, model queueing.Model, objective queueing.SLO, rate float64) int32 {
	wait, _ := model.Tasks(rate, objective, MaxSLOTasks)
	now := *o
	now.Expected = rate
	return max(wait, itlTasks(in, &now))
}

// servingCapacity is the rate the serving tasks complete requests at
// while a queue waits: their slots over the service time for tasks of
// fixed slots, and for an engine what it completes. An engine that
// prefills a queue carries a chunk of prompt tokens in every step, so
// its steps are long and it finishes far fewer requests than its slots
// say; the completions read then are its capacity (or less, while they
// still show the time before the queue).
func servingCapacity(in Inputs, serving int32, completions, service float64) float64 {
	if engineModel(in) != nil {
		return completions
	}
	return float64(serving) * float64(in.Policy.SLO.SlotsPerTask) / service
}

// startingCapacity is what the tasks on their way work off of a queue
// before a task asked for now is Ready, as a rate over that start-up: each
// at the capacity a serving task has, for as long as it serves by then
// (Inputs.StartingFor). Without it each reading while they start would
// count the queue growing for a whole start-up again, as if none were
// coming, and ask for tasks that arrive after the queue is gone.
func startingCapacity(in Inputs, serving int32, capacity, startup float64) float64 {
	if serving <= 0 || in.Starting <= 0 || !(startup > 0) {
		return 0
	}
	return capacity / float64(serving) * in.StartingFor.Seconds() / startup
}

// tokensPerRequest is the output tokens a finished request has: the
// generated tokens a second over the completions a second. ok is false
// without the token metrics or with too few completions to tell.
func tokensPerRequest(in Inputs, completions float64) (float64, bool) {
	e := in.Engine
	if e == nil || !(e.GenerationTokens > 0) || math.IsInf(e.GenerationTokens, 1) || nearZero(completions) {
		return 0, false
	}
	return e.GenerationTokens / completions, true
}

// nearZero is a rate of fewer than one request per ServiceTimeWindow: too
// few finished requests for Little's law to say anything.
func nearZero(rate float64) bool { return !(rate*ServiceTimeWindow.Seconds() >= 1) }

// littleRate is the completion rate Little's law divides the running
// requests by for this reading, and whether the reading teaches the
// service time at all. It never divides by a near-zero completion rate:
// a reading where fewer than half the arrivals finish, or fewer than one
// request per ServiceTimeWindow, is the pool idle, filling (onset, after
// idle, after a restart) or overloaded, and running ÷ completions there
// is the time the pool has been busy over a trickle, not a service time.
// Such a reading teaches nothing: the estimate learned before keeps its
// weight through an idle spell and is there when traffic comes back, and
// without one the policy sizes for the requests in the pool
// (ServiceTimeUnknown) until requests finish.
//
// So the estimate after a reading is at most the one before it or
// running ÷ max(completions, arrivals/2, one per ServiceTimeWindow).
func littleRate(completions, arrivals float64) (float64, bool) {
	return completions, !nearZero(completions) && completions >= arrivals/2
}

func sloReason(tasks, current int32) string {
	switch {
	case tasks > current:
		return ReasonSLOScaleUp
	case tasks < current:
		return ReasonSLOScaleDown
	}
	return ReasonWithinSLO
}

// finish reports what the model predicts at the count chosen, and
// whether maxReplicas or the capacity keep it from the SLO.
func (o *SLOOutcome) finish(in Inputs, desired int32) {
	if o.service == 0 {
		return
	}
	slo := in.Policy.SLO
	model := queueing.Model{ServiceTime: o.service, Slots: slo.SlotsPerTask, Ca2: o.Ca2, Cs2: slo.ServiceVariability}
	objective := queueing.SLO{Wait: o.objective, Percentile: slo.Percentile}
	at := *o
	if o.held {
		at.Expected = o.heldFor
	}
	o.PredictedWait = model.WaitPercentile(desired, at.Expected, objective)
	o.PredictedTTFT = o.PredictedWait + o.Prefill
	o.PredictedITL = predictedITL(in, &at, desired)
	o.Reachable = in.Max
	limit := fmt.Sprintf("maxReplicas %d", in.Max)
	if in.Capacity != nil && max(*in.Capacity, in.Current) < in.Max {
		o.Reachable = max(*in.Capacity, in.Current)
		limit = fmt.Sprintf("the capacity of %d tasks", o.Reachable)
	}
	need, met := model.Tasks(o.Expected, objective, MaxSLOTasks)
	if !met || need > o.Reachable {
		o.Unmet = true
		at := model.WaitPercentile(o.Reachable, o.Expected, objective)
		needs := fmt.Sprintf("%d tasks, %d more than %s", need, need-o.Reachable, limit)
		if !met {
			needs = fmt.Sprintf("more than %d tasks", need)
		}
		o.Message = fmt.Sprintf("the SLO needs %s; with %d the p%s wait is %s, above the SLO of %v",
			needs, o.Reachable, FormatValue(slo.Percentile), formatWait(at), seconds(objective.Wait))
	}
}

// inputs renders the model's inputs for status.lastDecision.inputs.
func (o *SLOOutcome) inputs() string {
	service := "unknown"
	if o.service > 0 {
		service = o.ServiceTime.String()
	}
	return fmt.Sprintf("arrivals=%s/s expected=%s/s backlog=%s/s service=%s slots=%d ca2=%s cs2=%s correction=%s startup=%v",
		FormatValue(o.Arrivals), FormatValue(o.Expected), FormatValue(o.Backlog), service, o.Slots,
		FormatValue(o.Ca2), FormatValue(o.Cs2), FormatValue(o.Correction), o.Startup)
}

func formatWait(w float64) string {
	if math.IsInf(w, 1) {
		return "unbounded (the slots cannot keep up)"
	}
	return seconds(w).String()
}

// seconds converts to a Duration rounded to the millisecond, as messages show it.
func seconds(s float64) time.Duration {
	if s >= math.MaxInt64/float64(time.Second) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond)
}

func correctionOf(c float64) float64 {
	if !(c >= queueing.MinCorrection && c <= queueing.MaxCorrection) {
		return 1
	}
	return c
}

// forecastRate is predictive pre-warming for the SLO policy: History
// learns the offered load in tasks at full use (arrivals × service time /
// slots), and the forecast one lead time ahead becomes an arrival rate the
// count is sized for. known is false without enough history; act is false
// in Preview, where the forecast is reported, not used.
func forecastRate(in Inputs, d *Decision, service float64) (rate float64, known, act bool) {
	if in.Predictive == nil {
		return 0, false, false
	}
	slots := float64(in.Policy.SLO.SlotsPerTask)
	h := in.History
	if !in.Paused && !in.Stopped {
		h.Learn(in.Now, d.SLO.Arrivals*service/slots)
	}
	d.History = h
	at := in.Now.Add(in.Predictive.Lead)
	load, ok := h.Forecast(at)
	if !ok {
		d.ForecastMessage = fmt.Sprintf("not enough history yet: no load learned for %s on a day before", slotName(at))
		return 0, false, false
	}
	rate = load * slots / service
	mode := "acting on it"
	if in.Predictive.Preview {
		mode = "preview: not acting on it"
	}
	d.ForecastMessage = fmt.Sprintf("%s/s arrivals forecast for %s (%s), %s", FormatValue(rate), at.UTC().Format("15:04 MST"), slotName(at), mode)
	return rate, true, !in.Predictive.Preview
}

// SLOOf is policy.slo, defaults applied; the zero SLO without one.
func SLOOf(spec *gputaskv1.SLOSpec) SLO {
	if spec == nil {
		return SLO{}
	}
	return SLO{
		Wait:               durationOr(spec.Wait),
		TTFT:               durationOr(spec.TTFT),
		ITL:                durationOr(spec.ITL),
		Percentile:         quantityOr(spec.Percentile, DefaultSLOPercentile),
		SlotsPerTask:       spec.SlotsPerTask,
		ServiceVariability: quantityOr(spec.ServiceTimeVariability, DefaultServiceTimeVariability),
	}
}

// durationOr is d, or 0 (no such objective) without one.
func durationOr(d *gputaskv1.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.Duration
}

// normalizeSLO maps SLO settings the API would reject to their defaults.
func normalizeSLO(s SLO) SLO {
	s.TTFT, s.ITL = max(s.TTFT, 0), max(s.ITL, 0)
	if !(s.Wait > 0) {
		// A TTFT objective alone bounds the wait too.
		s.Wait = max(s.TTFT, gputaskv1.MinSLOWait)
	}
	if !(s.Percentile >= queueing.MinPercentile && s.Percentile <= queueing.MaxPercentile) {
		s.Percentile = DefaultSLOPercentile
	}
	s.SlotsPerTask = min(max(s.SlotsPerTask, 1), queueing.MaxSlots)
	if !(s.ServiceVariability >= 0) || math.IsInf(s.ServiceVariability, 1) {
		s.ServiceVariability = DefaultServiceTimeVariability
	}
	return s
}
