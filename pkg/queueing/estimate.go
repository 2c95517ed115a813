package queueing

import "math"

// ArrivalsFromCompletions is the arrival rate of a pool whose source
// counts finished requests only (vLLM counts successes, not arrivals):
// what finished plus what the pool gained in requests running and waiting
// over the dt seconds since the last reading. Without a last reading
// (dt ≤ 0) it is the completion rate.
func ArrivalsFromCompletions(completions, inPool, lastInPool, dt float64) float64 {
	return clean(clean(completions) + growth(inPool, lastInPool, dt))
}

// CompletionsFromArrivals is the converse, for a source that counts
// arrivals only: arrivals less the pool's growth, never below 0.
func CompletionsFromArrivals(arrivals, inPool, lastInPool, dt float64) float64 {
	return clean(clean(arrivals) - growth(inPool, lastInPool, dt))
}

func growth(now, last, dt float64) float64 {
	if !(dt > 0) || math.IsInf(dt, 1) {
		return 0
	}
	g := (clean(now) - clean(last)) / dt
	if math.IsNaN(g) {
		return 0
	}
	return g
}

// Little keeps the smoothed running requests and completion rate from
// which the mean service time follows by Little's law (running = completion
// rate × service time). Smoothing the two apart and dividing, rather than
// smoothing their ratio, weighs each reading by its completions, so a
// quiet minute with two finished requests cannot swing the estimate.
type Little struct {
	Running, Completions float64
}

// Observe blends one reading in with weight w in (0, 1]: the share the
// new reading gets, such as 1 − exp(−dt/τ) for a time constant τ.
func (l Little) Observe(running, completions, w float64) Little {
	if !(w > 0) {
		return l
	}
	w = min(w, 1)
	running, completions = clean(running), clean(completions)
	if math.IsInf(running, 1) || math.IsInf(completions, 1) {
		return l
	}
	return Little{
		Running:     clean(l.Running)*(1-w) + running*w,
		Completions: clean(l.Completions)*(1-w) + completions*w,
	}
}

// ServiceTime is the smoothed running requests over the smoothed
// completion rate, in seconds; ok is false until a request has finished.
func (l Little) ServiceTime() (float64, bool) {
	if !(l.Completions > 0) || !(l.Running > 0) {
		return 0, false
	}
	s := l.Running / l.Completions
	if math.IsInf(s, 1) || math.IsNaN(s) {
		return 0, false
	}
	return s, true
}

// Bounds of the arrival variability estimate.
const (
	// MinVariabilityCounts is the fewest per-interval counts Ca² is
	// estimated from; with fewer, arrivals count as Poisson (1).
	MinVariabilityCounts = 4
	// MaxVariability caps Ca²: beyond it one spike among quiet intervals
	// would ask for a pool many times the load.
	MaxVariability = 16
)

// ArrivalVariability estimates Ca², the squared coefficient of variation
// of the times between arrivals, by the index of dispersion of arrival
// counts per interval (variance over mean, 1 for a Poisson process). The
// variance is half the mean square of successive differences, so that a
// trend in the load, which the trend term already covers, does not read
// as burstiness. Too few counts, or no arrivals, give 1.
func ArrivalVariability(counts []float64) float64 {
	if len(counts) < MinVariabilityCounts {
		return 1
	}
	var sum, sq float64
	for i, n := range counts {
		n = clean(n)
		sum += n
		if i > 0 {
			d := n - clean(counts[i-1])
			sq += d * d
		}
	}
	mean := sum / float64(len(counts))
	if !(mean > 0) || math.IsInf(mean, 1) {
		return 1
	}
	v := sq / float64(2*(len(counts)-1)) / mean
	if math.IsNaN(v) {
		return 1
	}
	return min(v, MaxVariability)
}

// Sample is an arrival rate measured at time T, in seconds from any fixed
// origin.
type Sample struct {
	T, Rate float64
}

// Trend is the slope of the arrival rate (requests/s per second), fitted
// by least squares to the samples. With fewer than three samples, or all at
// one time, there is no trend.
func Trend(samples []Sample) float64 {
	if len(samples) < 3 {
		return 0
	}
	var st, sr float64
	for _, s := range samples {
		st += s.T
		sr += clean(s.Rate)
	}
	n := float64(len(samples))
	mt, mr := st/n, sr/n
	var cov, vt float64
	for _, s := range samples {
		dt := s.T - mt
		cov += dt * (clean(s.Rate) - mr)
		vt += dt * dt
	}
	slope := cov / vt
	if !(vt > 0) || math.IsNaN(slope) || math.IsInf(slope, 0) {
		return 0
	}
	return slope
}

// BacklogRate is the arrival rate that stands for the queue a pool will
// hold when a task asked for now is Ready: the waiting requests, plus
// what arrives beyond the rate the serving tasks complete (capacity) for
// startup seconds, or less what their spare capacity works off in that
// time, cleared within the given seconds after. The start-up time, not
// the SLO, is the horizon: a task asked for now serves only once it is
// Ready. Nothing waiting, nothing to clear.
func BacklogRate(waiting, rate, capacity, startup, within float64) float64 {
	waiting = clean(waiting)
	if waiting == 0 || !(startup > 0) || math.IsInf(startup, 1) || !(within > 0) || math.IsInf(within, 1) {
		return 0
	}
	left := clean(waiting + (clean(rate)-clean(capacity))*startup)
	if math.IsNaN(left) || math.IsInf(left, 1) {
		return math.MaxFloat64
	}
	return left / within
}

// Bounds of the correction from an observed wait percentile.
const (
	// MinCorrection and MaxCorrection bound the factor: the observed wait
	// may tune the model, not replace it.
	MinCorrection = 0.5
	MaxCorrection = 2
	// CorrectionGain is how far one reading moves the factor's logarithm
	// per SLO of error: an observed wait one SLO above the prediction
	// raises the factor by about 10 %.
	CorrectionGain = 0.1
	// CorrectionTolerance and MinResolvableWait are the error the factor
	// does not act on: a twentieth of the SLO, as the HPA's tolerance
	// ignores small ratios, and at least half a second, because the
	// observed percentile comes from a histogram: vLLM's queue-time
	// buckets start 0.3 s and 0.5 s wide, and histogram_quantile puts a
	// pool where nobody waits at 0.285 s. Acted on, that error would
	// raise the factor a little every interval, for ever.
	CorrectionTolerance = 0.05
	MinResolvableWait   = 0.5
	// RelaxBelow and RelaxRate: a factor above 1, learned while the pool
	// waited longer than predicted (at the onset of traffic, say), is
	// kept while the waits confirm it; once both the observed and the
	// predicted wait are under a quarter of the SLO it relaxes towards 1
	// by a quarter of CorrectionGain an evaluation (from 2 to 1 in about
	// 28 evaluations, 7 minutes at a 15 s interval).
	RelaxBelow = 0.25
	RelaxRate  = 0.25
)

// Correct integrates the difference between the observed and the
// predicted wait percentile into the factor on the arrival rate (1 to
// start): a pool that waits longer than the model says gets more headroom,
// one that waits less gets less, and a factor above 1 relaxes towards 1
// while both waits are far within the SLO (RelaxBelow). Each step is at most CorrectionGain in
// the logarithm, the factor stays within [MinCorrection, MaxCorrection],
// and an error within the tolerance, a prediction outside the model (an
// overloaded pool, +Inf) or a missing observation leaves it as it is.
func Correct(factor, observed, predicted, wait float64) float64 {
	if !(factor >= MinCorrection && factor <= MaxCorrection) {
		factor = 1
	}
	if !(observed >= 0) || math.IsInf(observed, 1) || !(predicted >= 0) || math.IsInf(predicted, 1) || !(wait > 0) {
		return factor
	}
	if math.Abs(observed-predicted) <= max(CorrectionTolerance*wait, MinResolvableWait) {
		if factor > 1 && max(observed, predicted) <= RelaxBelow*wait {
			// Both far within the SLO: nothing confirms the headroom the
			// factor buys, so it relaxes towards 1, slowly enough that a
			// factor the pool needs is learned again before it is lost.
			return max(1, factor*math.Exp(-CorrectionGain*RelaxRate))
		}
		return factor
	}
	e := max(-1, min(1, (observed-predicted)/wait))
	return max(MinCorrection, min(MaxCorrection, factor*math.Exp(CorrectionGain*e)))
}
