package scaling

import (
	"math"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/queueing"
)

// What the SLO policy takes from the engine model (Inputs.Engine): a
// task's capacity in slots, a bound on the service time, and the wait a
// TTFT objective leaves.

// engineServiceTime bounds the time a request holds its slot by what the
// engine allows: its prompt prefilled and its output tokens decoded at the
// ITL target, which a task within its capacity keeps. The tokens per
// request are the token rates over the arrival rate. ok is false without
// an ITL target and the token rates.
func engineServiceTime(in Inputs, arrivals float64) (float64, bool) {
	e, slo := in.Engine, in.Policy.SLO
	if e == nil || slo.ITL <= 0 || !(e.GenerationTokens > 0) || nearZero(arrivals) || math.IsInf(e.GenerationTokens, 1) {
		return 0, false
	}
	s := e.GenerationTokens / arrivals * slo.ITL.Seconds()
	if p := prefillRate(in); p > 0 && e.PromptTokens > 0 && !math.IsInf(e.PromptTokens, 1) {
		s += e.PromptTokens / arrivals / p
	}
	return s, s > 0
}

// prefillRate is the engine model's prefill rate, or 0 when unknown.
func prefillRate(in Inputs) float64 {
	if m := engineModel(in); m != nil {
		if p := m.PrefillTokensPerSecond(); p > 0 && !math.IsInf(p, 1) {
			return p
		}
	}
	return 0
}

// engineModel is the engine model the policy sizes by: the profile given,
// or the online fit once it has enough readings, or nil.
func engineModel(in Inputs) EngineModel {
	if in.Engine == nil {
		return nil
	}
	if in.Engine.Model != nil {
		return in.Engine.Model
	}
	if l, ok := in.Queue.ITL.Usable(); ok {
		return l
	}
	return nil
}

// waitObjective is the wait a request may see at the percentile: Wait,
// and with a TTFT objective no more than the TTFT less the mean prompt's
// prefill (at least a tenth of the TTFT, so that a prompt longer than the
// TTFT allows still leaves the queue an objective).
func waitObjective(in Inputs, arrivals float64) time.Duration {
	slo := in.Policy.SLO
	w := slo.Wait
	if slo.TTFT <= 0 {
		return w
	}
	left := slo.TTFT
	if e, p := in.Engine, prefillRate(in); e != nil && p > 0 && e.PromptTokens > 0 && !nearZero(arrivals) {
		left -= time.Duration(e.PromptTokens / arrivals / p * float64(time.Second))
	}
	return min(w, max(left, slo.TTFT/10))
}

// Where SLOOutcome.Slots came from.
const (
	SlotsFromOverride = "override"
	SlotsFromProfile  = "profile"
	SlotsFromFit      = "fit"
	SlotsFromDefault  = "default"
)

// maxPrefillShare is the most of a task's time the capacity reads as
// prefill (sloSlots).
const maxPrefillShare = 0.8

// sloSlots is how many requests a task serves at once: SlotsPerTask when
// set; else, with an ITL target and an engine model, the engine's
// capacity (Capacity) at the context served and the prompt tokens
// arriving at each task of the pool; else one.
func sloSlots(in Inputs) (int32, string) {
	slo := in.Policy.SLO
	if slo.SlotsPerTask >= 1 {
		return slo.SlotsPerTask, SlotsFromOverride
	}
	m := engineModel(in)
	if m == nil || slo.ITL <= 0 {
		return 1, SlotsFromDefault
	}
	from := SlotsFromProfile
	if in.Engine.Model == nil {
		from = SlotsFromFit
	}
	e := in.Engine
	// The prompts are spread over the pool the count sizes, the tasks on
	// their way included, and over no fewer tasks than prefill them in
	// maxPrefillShare of their time: read at a pool too small for the
	// prompts (one task at onset, or every task still starting), every
	// step would be prefill, the capacity one sequence, and the count
	// the whole prompt load in single slots. The count itself is held
	// to what prefilling the expected prompts needs (itlTasks).
	tasks := float64(max(in.Current, 1))
	if p := m.PrefillTokensPerSecond(); p > 0 && e.PromptTokens > 0 && !math.IsInf(e.PromptTokens, 0) {
		tasks = max(tasks, math.Ceil(e.PromptTokens/(p*maxPrefillShare)))
	}
	c := Capacity(m, CapacityInputs{ITLTarget: slo.ITL, Context: e.Context, KVTokens: e.KVTokens, PromptTokensPerSecond: e.PromptTokens / tasks})
	// No batch meets the target: one sequence a task is the nearest.
	return int32(min(max(c, 1), queueing.MaxSlots)), from
}

// withRoleReadings is in with the engine's readings taken from the
// metrics of the engine's roles that were read: the token rates, the ITL,
// and the context the running sequences hold (from the KV cache's use and
// the profile's KV size). A value given in Engine stays where no metric of
// its role was read, so a caller that knows the engine otherwise (the
// replay) keeps it. A set with such a metric and no engine model gets an
// Engine, for the fit to learn from.
func withRoleReadings(in Inputs) Inputs {
	value := map[gputaskv1.MetricRole]float64{}
	for _, m := range in.Metrics {
		if m.Err == nil && m.Role != "" && !math.IsNaN(m.Value) && !math.IsInf(m.Value, 0) {
			value[m.Role] = m.Value
		}
	}
	read := func(role gputaskv1.MetricRole) (float64, bool) {
		v, ok := value[role]
		return v, ok && v >= 0
	}
	var e Engine
	if in.Engine != nil {
		e = *in.Engine
	} else if !anyEngineRole(value) {
		return in
	}
	if v, ok := read(gputaskv1.RolePromptTokens); ok {
		e.PromptTokens = v
	}
	if v, ok := read(gputaskv1.RoleGenerationTokens); ok {
		e.GenerationTokens = v
	}
	if v, ok := read(gputaskv1.RoleGenerationTokensMedian); ok {
		e.GenerationMedian = v
	}
	if v, ok := read(gputaskv1.RolePromptTokensMedian); ok {
		e.PromptMedian = v
	}
	if v, ok := read(gputaskv1.RoleInterTokenLatency); ok && v < maxITLSeconds {
		e.ITL = time.Duration(v * float64(time.Second))
	}
	if e.Context <= 0 {
		e.Context, in.kv = contextOf(in, e, value)
	}
	in.Engine = &e
	return in
}

// maxITLSeconds bounds an ITL reading: beyond it the reading is no
// engine's, and its Duration would overflow.
const maxITLSeconds = 3600

func anyEngineRole(value map[gputaskv1.MetricRole]float64) bool {
	for _, r := range []gputaskv1.MetricRole{gputaskv1.RolePromptTokens, gputaskv1.RoleGenerationTokens, gputaskv1.RoleGenerationTokensMedian,
		gputaskv1.RolePromptTokensMedian,
		gputaskv1.RoleInterTokenLatency, gputaskv1.RoleKVCacheUsage} {
		if _, ok := value[r]; ok {
			return true
		}
	}
	return false
}

// contextOf is the mean context of a running sequence: with a reading of
// the KV cache's use, the tokens in use over the sequences running, each
// smoothed over ContextWindow (kv, with this reading: KVCacheUsage, a
// share averaged over the serving tasks, times the tokens a task's cache
// holds and the serving tasks); else a request's prompt plus half its
// output, from the token rates; else the context known last
// (QueueState.Context), as while the pool is idle; else 0, unknown.
func contextOf(in Inputs, e Engine, value map[gputaskv1.MetricRole]float64) (float64, KVReadings) {
	usage, hasUsage := value[gputaskv1.RoleKVCacheUsage]
	running := value[gputaskv1.RoleRunning]
	serving := float64(max(in.Current-in.Starting, 0))
	kv := in.Queue.KV
	if hasUsage && usage > 0 && usage <= 1 && running >= 1 && !math.IsInf(running, 0) && serving > 0 && e.KVTokens > 0 && !math.IsInf(e.KVTokens, 0) {
		kv = kv.observe(usage*e.KVTokens*serving, running, readingWeight(in, ContextWindow))
		if c, ok := kv.context(); ok {
			return c, kv
		}
	}
	arrivals, ok := value[gputaskv1.RoleArrivals]
	if !ok {
		arrivals = value[gputaskv1.RoleCompletions]
	}
	if !nearZero(arrivals) && e.PromptTokens > 0 && !math.IsInf(e.PromptTokens, 0) && !math.IsInf(e.GenerationTokens, 0) {
		return (e.PromptTokens + max(e.GenerationTokens, 0)/2) / arrivals, kv
	}
	return in.Queue.Context, kv
}

// ContextWindow is the time constant over which the KV cache's readings
// are smoothed: the mean context is read over the sequences of many
// readings, not one. One reading of a few sequences, or of a usage
// scraped before new tasks joined the serving count, gave a context
// twice to ten times the pool's, and a capacity of a fraction of its
// slots: a pool of 6 asked for 26 on a bursty day, between bursts.
const ContextWindow = time.Minute

// KVReadings are the KV cache's tokens in use over the pool and the
// sequences running, each smoothed.
type KVReadings struct{ Tokens, Sequences float64 }

func (k KVReadings) observe(tokens, sequences, w float64) KVReadings {
	if !(w > 0) {
		return k
	}
	w = min(w, 1)
	return KVReadings{Tokens: k.Tokens*(1-w) + tokens*w, Sequences: k.Sequences*(1-w) + sequences*w}
}

// context is the mean context of a running sequence; ok once a reading
// of a running sequence is kept.
func (k KVReadings) context() (float64, bool) {
	c := k.Tokens / k.Sequences
	return c, k.Sequences > 0 && c > 0 && !math.IsInf(c, 0)
}

// readingWeight is the share a reading taken at in.Now gets against
// what was smoothed over window: all of it at the first reading, none at
// one taken at the instant of the last one or before it (a clock stepped
// back), which adds no time to learn over: weighed as a first reading,
// it would replace all that was learned.
func readingWeight(in Inputs, window time.Duration) float64 {
	last := in.Queue.LastTime
	switch {
	case last.IsZero():
		return 1
	case !in.Now.After(last):
		return 0
	}
	return 1 - math.Exp(-in.Now.Sub(last).Seconds()/window.Seconds())
}

// prefillSeconds is the mean prompt's prefill at the engine's prefill
// rate, or 0 when unknown.
func prefillSeconds(in Inputs, arrivals float64) float64 {
	e, p := in.Engine, prefillRate(in)
	if e == nil || p <= 0 || !(e.PromptTokens > 0) || math.IsInf(e.PromptTokens, 0) || nearZero(arrivals) {
		return 0
	}
	return e.PromptTokens / arrivals / p
}

// predictedITL is the ITL the engine model gives at count tasks, at the
// SLO's percentile: the running sequences the expected rate keeps
// (Little's law), spread over them and at most their slots each,
// stretched by the share of each task's time that prefilling the
// expected rate's prompts takes (itlAtCount), plus the spread of that
// prefill over the requests: with the mix of request lengths read, the
// mix's percentile (outputMix.percentile), where short requests see the
// prompts' prefill over few tokens; else over a request of the mean
// output (prefillSpread). 0 without a model; the largest Duration when
// the prompts alone take more than the tasks' whole time.
func predictedITL(in Inputs, o *SLOOutcome, count int32) time.Duration {
	a, ok := itlAtCount(in, o, count)
	switch {
	case !ok:
		return 0
	case a.saturated:
		return time.Duration(math.MaxInt64)
	}
	itl := a.mean
	if mix, ok := outputMixOf(in, o); ok {
		itl = mix.percentile(a, in.Policy.SLO.Percentile)
	} else {
		itl += prefillSpread(in, o, count, a.mean)
	}
	if !(itl*float64(time.Second) < math.MaxInt64) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(itl * float64(time.Second))
}

// itlAt is the engine model's ITL at a count of tasks (itlAtCount), in
// seconds: decode is a step's without prompts, mean with the expected
// prompts' prefill spread over the steps; prompts is the prompts a
// second that reach a task, prefill the seconds one takes. saturated
// when the prompts alone take more than the tasks' whole time.
type itlAt struct {
	decode, mean, prompts, prefill float64
	saturated                      bool
}

// itlAtCount is itlAt at count tasks: the running sequences the expected
// rate keeps (Little's law), spread over them and at most their slots
// each, stretched by the share of each task's time that prefilling the
// expected rate's prompts takes. ok is false without a model.
func itlAtCount(in Inputs, o *SLOOutcome, count int32) (itlAt, bool) {
	m := engineModel(in)
	if m == nil || count < 1 || o.service <= 0 {
		return itlAt{}, false
	}
	batch := min(math.Ceil(o.Expected*o.service/float64(count)), float64(o.Slots))
	if !(batch >= 1) {
		batch = 1
	}
	var a itlAt
	stretch := 1.0
	if p, prompt := m.PrefillTokensPerSecond(), expectedPromptTokens(in, o); p > 0 && prompt > 0 {
		share := prompt / float64(count) / p
		if share >= 1 {
			return itlAt{saturated: true}, true
		}
		stretch = 1 / (1 - share)
		if served := servedRate(o); !nearZero(served) && o.Expected > 0 {
			a.prompts = o.Expected / float64(count)
			a.prefill = share / a.prompts
		}
	}
	a.decode = m.ITL(int(min(batch, maxBatch)), max(in.Engine.Context, 0)).Seconds()
	a.mean = a.decode * stretch
	return a, true
}

// prefillSpread is how much more than the mean ITL a request at the SLO's
// percentile sees, in seconds, from the prompts its task prefills while
// it decodes. A step that carries a prompt's chunk holds every decoding
// sequence for the chunk's prefill, so a request's ITL is the decode
// step plus the prefill of the prompts that reach its task during its
// life, over its tokens. Those prompts are a Poisson count of mean
// μ = (requests a second a task) × (tokens a request) × (mean ITL); at
// the percentile, z standard deviations above it, a request of the mean
// output sees z · (a prompt's prefill) · √μ ÷ (its tokens) more than the
// mean, and at most μ · (a prompt's prefill) ÷ (its tokens) more, the
// mean's own prefill again: where fewer than z² prompts reach a task in
// a request's life the normal approximation of their count is too wide,
// and a prompt whose prefill alone is over the objective would ask for
// tasks until hardly any prompt reaches one. Short requests on
// prompt-heavy traffic see the most: on m-small's later days the mean
// alone left 94.75 % of the requests within a 50 ms ITL at the 95th
// percentile. 0 without the token rates or a prefill rate.
func prefillSpread(in Inputs, o *SLOOutcome, count int32, itl float64) float64 {
	e, p, served := in.Engine, prefillRate(in), servedRate(o)
	z := math.Sqrt2 * math.Erfinv(2*in.Policy.SLO.Percentile/100-1)
	if e == nil || !(p > 0) || count < 1 || nearZero(served) || !(o.Expected > 0) || !(itl > 0) ||
		!(e.PromptTokens > 0) || !(e.GenerationTokens > 0) || math.IsInf(e.PromptTokens, 0) || math.IsInf(e.GenerationTokens, 0) ||
		!(z > 0) || math.IsInf(z, 0) {
		return 0
	}
	tokens := max(e.GenerationTokens/served, 1)
	prefill := e.PromptTokens / served / p
	mu := o.Expected / float64(count) * tokens * itl
	return min(z*math.Sqrt(mu), mu) * prefill / tokens
}

// servedRate is the rate the token rates are counted over: the requests
// finished, or the arrivals while too few finish.
func servedRate(o *SLOOutcome) float64 {
	if nearZero(o.completions) {
		return o.Arrivals
	}
	return o.completions
}

// expectedPromptTokens is the prompt tokens per second the expected rate
// brings: the prompt tokens read per request, times the expected rate.
// While a backlog builds, the tokens the workers prefill are what they
// can do, not what arrives, and so are the requests they finish: per
// finished request they still say how long a prompt is.
func expectedPromptTokens(in Inputs, o *SLOOutcome) float64 {
	e := in.Engine
	if e == nil || !(e.PromptTokens > 0) || math.IsInf(e.PromptTokens, 0) {
		return 0
	}
	served := servedRate(o)
	if nearZero(served) || !(o.Expected > 0) {
		return e.PromptTokens
	}
	return e.PromptTokens / served * o.Expected
}

// itlTasks is the fewest tasks, at most MaxSLOTasks, whose predicted ITL
// (predictedITL) is within the ITL objective: a task's capacity in slots
// holds the decode within it, and this adds what prefilling the expected
// prompts takes from every step. 0 without an ITL objective and an engine
// model, or when no count meets it (one sequence alone is over it).
func itlTasks(in Inputs, o *SLOOutcome) int32 {
	target := in.Policy.SLO.ITL
	if target <= 0 || engineModel(in) == nil || o.service <= 0 {
		return 0
	}
	meets := func(n int32) bool { return predictedITL(in, o, n) <= target }
	if mix, ok := outputMixOf(in, o); ok {
		// The share of requests over the target, rather than the ITL at
		// the percentile: one pass over the mix a count, not a search.
		over := 1 - in.Policy.SLO.Percentile/100
		meets = func(n int32) bool {
			a, ok := itlAtCount(in, o, n)
			return ok && !a.saturated && mix.overShare(a, target.Seconds()) <= over
		}
	}
	if !meets(MaxSLOTasks) {
		return 0
	}
	lo, hi := int32(1), int32(MaxSLOTasks) // meets(hi)
	for lo < hi {
		mid := lo + (hi-lo)/2
		if meets(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}
