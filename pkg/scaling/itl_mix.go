package scaling

import "math"

// The ITL objective over the requests' output and prompt lengths. A
// request's ITL is its decode time over its gaps between tokens: the steps
// of its life, and in them the prefill of the prompts that reach its task
// meanwhile. Those prompts are a Poisson count of mean (prompts a second a
// task) × (its gaps × the mean ITL + a prompt's prefill): the prompts that
// came while its own prompt was prefilled are prefilled in its first
// steps. Their prefill is spread over its gaps, so that a request of a few
// tokens, whose few steps one prompt can fill, is the one over the
// objective: with a median of 3 output tokens and a mean of 14, as on
// real chat traffic, four in ten requests have at most one gap. It is over
// in one of two ways, and its share over is the likelier of the two: more
// prompts of the mean length than its gaps leave room for, or one prompt
// alone too long for them, which a tail of long prompts makes the likelier
// (a median of 35 tokens, a mean of 115, one in a hundred over 1,400). The
// lengths are read as lognormal, each from its median and its mean; a
// request of one token has no gap and no ITL.

// outputMix is the output lengths of the requests as mixPoints quantiles
// of a lognormal: the gaps between tokens of each; and the prompt lengths'
// lognormal, relative to their mean: promptMedian the median over the
// mean, promptSigma the spread (0, every prompt of the mean, when unknown).
type outputMix struct {
	gaps                      [mixPoints]float64
	promptMedian, promptSigma float64
}

// mixPoints is how many quantiles stand for the lengths, each an equal
// share of the requests.
const mixPoints = 64

// mixZ are the standard normal's quantiles at the middle of each share.
var mixZ = func() (z [mixPoints]float64) {
	for i := range z {
		z[i] = math.Sqrt2 * math.Erfinv(2*(float64(i)+0.5)/mixPoints-1)
	}
	return z
}()

// outputMixOf is the mix of lengths the engine's readings give: the
// output tokens a lognormal of the median read (Engine.GenerationMedian)
// and of the mean, the output tokens per finished request; the prompt
// tokens one of Engine.PromptMedian and of the prompt tokens per request.
// Either is all of the mean where its median is unknown, and all of one
// length where the mean is not above the median. ok is false without
// either median, or without the output tokens' rate.
func outputMixOf(in Inputs, o *SLOOutcome) (outputMix, bool) {
	e, served := in.Engine, servedRate(o)
	if e == nil || !(e.GenerationMedian >= 1 || e.PromptMedian >= 1) || nearZero(served) ||
		!(e.GenerationTokens > 0) || math.IsInf(e.GenerationTokens, 0) {
		return outputMix{}, false
	}
	mean := max(e.GenerationTokens/served, 1)
	median, sigma := lognormalOf(mean, e.GenerationMedian)
	m := outputMix{promptMedian: 1}
	for i, z := range mixZ {
		m.gaps[i] = max(math.Round(median*math.Exp(sigma*z))-1, 0)
	}
	if prompt := e.PromptTokens / served; prompt > 0 && !math.IsInf(prompt, 0) {
		median, m.promptSigma = lognormalOf(prompt, e.PromptMedian)
		m.promptMedian = median / prompt
	}
	return m, true
}

// lognormalOf is the median and the σ of the lognormal of a mean and a
// median read: σ² = 2 ln(mean ÷ median). Without a median read (below 1,
// NaN or infinite), or with one not below the mean, every value is the
// mean or the median: σ 0.
func lognormalOf(mean, median float64) (float64, float64) {
	switch {
	case !(median >= 1) || math.IsInf(median, 0):
		return mean, 0
	case mean <= median:
		return median, 0
	}
	return median, math.Sqrt(2 * math.Log(mean/median))
}

// longPrompts is the share of prompts longer than x times the mean.
func (m outputMix) longPrompts(x float64) float64 {
	if m.promptSigma == 0 {
		if x < m.promptMedian {
			return 1
		}
		return 0
	}
	return 0.5 * math.Erfc(math.Log(x/m.promptMedian)/(m.promptSigma*math.Sqrt2))
}

// overShare is the share of the requests whose ITL is over limit seconds
// at a: those whose task's prompts during their life add more than
// limit − decode to each of their gaps, x prompts of the mean's prefill
// in all: more than x prompts of the mean, or one prompt longer than x
// times the mean, whichever is likelier.
func (m outputMix) overShare(a itlAt, limit float64) float64 {
	if a.decode > limit {
		return m.withGaps()
	}
	over := 0.0
	for _, g := range m.gaps {
		if g < 1 || !(a.prefill > 0) {
			continue
		}
		x, mu := (limit-a.decode)*g/a.prefill, a.prompts*(g*a.mean+a.prefill)
		over += max(poissonAbove(x, mu), m.promptsAbove(x, mu), -math.Expm1(-mu*m.longPrompts(x)))
	}
	return over / mixPoints
}

// promptsAbove is the chance that a Poisson count of mean mu of prompts
// of the lengths' lognormal holds more than x times the mean length in
// all. The compound sum's mean is mu and its variance mu × E[length²] ÷
// mean², e^σ² times a count of prompts of the mean's: a tail of long
// prompts widens it far past the count's own (tenfold at a median of 35
// tokens and a mean of 115), so that several prompts of the usual length
// with a long one among them fill a request's gaps where neither a count
// of prompts of the mean nor one long prompt alone would. The sum is
// read as the lognormal of that mean and variance (Fenton-Wilkinson),
// skewed as the sum is: a normal of the same variance puts too many
// requests just past the mean, and sized a chat model's held-out day on
// 15 % more GPU-hours than this for 97.5 % of its requests within the
// ITL objective where 95 % was asked. 0 with every prompt of the mean
// (poissonAbove is then the count's own).
func (m outputMix) promptsAbove(x, mu float64) float64 {
	switch {
	case m.promptSigma == 0 || !(mu > 0):
		return 0
	case !(x > 0):
		// No room: any prompt at all fills it.
		return -math.Expm1(-mu)
	}
	s2 := math.Log1p(math.Exp(m.promptSigma*m.promptSigma) / mu)
	if math.IsInf(s2, 1) {
		// A spread no float holds: the sum is nearly always far below
		// its mean, and its tail is beyond any x.
		return 0
	}
	return 0.5 * math.Erfc((math.Log(x/mu)+s2/2)/math.Sqrt(2*s2))
}

// withGaps is the share of the requests with a gap between tokens: the
// ones an ITL objective counts against.
func (m outputMix) withGaps() float64 {
	n := 0
	for _, g := range m.gaps {
		if g >= 1 {
			n++
		}
	}
	return float64(n) / mixPoints
}

// percentile is the ITL at percentile (50 to 99.9) of the requests at a,
// in seconds: the least ITL that at most the share above it is over,
// within a microsecond.
func (m outputMix) percentile(a itlAt, percentile float64) float64 {
	over := 1 - percentile/100
	if m.overShare(a, a.decode) <= over {
		// Fewer than that share have a gap, or no prompt reaches a task.
		return a.decode
	}
	lo, hi := a.decode, a.mean+a.prefill
	for i := 0; m.overShare(a, hi) > over && i < 64; i++ {
		lo, hi = hi, hi+2*(hi-a.decode)
	}
	for hi-lo > 1e-6 {
		mid := (lo + hi) / 2
		if m.overShare(a, mid) > over {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// poissonAbove is P(N > x) for N Poisson of mean mu: the normal
// approximation (with continuity correction) above a mean of 50.
func poissonAbove(x, mu float64) float64 {
	if x < 0 {
		return 1
	}
	if !(mu > 0) {
		return 0
	}
	n := math.Floor(x)
	if mu > 50 {
		return 0.5 * math.Erfc((n+0.5-mu)/math.Sqrt(2*mu))
	}
	if n > mu+12*math.Sqrt(mu)+20 {
		return 0
	}
	term := math.Exp(-mu)
	cdf := term
	for i := 1.0; i <= n; i++ {
		term *= mu / i
		cdf += term
	}
	return max(1-cdf, 0)
}
