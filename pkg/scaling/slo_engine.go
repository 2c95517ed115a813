package scaling

import (
	"math"
	"time"

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

// sloSlots is how many requests a task serves at once: SlotsPerTask when
// set; else, with an ITL target and an engine model, the engine's
// capacity (Capacity) at the context served and the prompt tokens
// arriving at each serving task; else one.
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
	serving := float64(max(in.Current-in.Starting, 1))
	c := Capacity(m, CapacityInputs{ITLTarget: slo.ITL, Context: e.Context, KVTokens: e.KVTokens, PromptTokensPerSecond: e.PromptTokens / serving})
	// No batch meets the target: one sequence a task is the nearest.
	return int32(min(max(c, 1), queueing.MaxSlots)), from
}
