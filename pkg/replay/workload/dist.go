package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// The inter-arrival patterns of a ServeGen window.
const (
	PatternGamma   = "Gamma"
	PatternWeibull = "Weibull"
)

// gaps is the inter-arrival distribution of a window, as ServeGen fits it:
// Gamma with shape a and scale b (scipy's gamma(a, scale=b), mean a·b), or
// Weibull with shape a and scale b (scipy's weibull_min(c=a, scale=b), mean
// b·Γ(1+1/a)).
type gaps struct {
	pattern string
	a, b    float64
}

func newGaps(pattern string, a, b float64) (gaps, error) {
	if pattern != PatternGamma && pattern != PatternWeibull {
		return gaps{}, fmt.Errorf("unknown pattern %q: want %s or %s", pattern, PatternGamma, PatternWeibull)
	}
	if !(a > 0) || !(b > 0) || math.IsInf(a, 0) || math.IsInf(b, 0) {
		return gaps{}, fmt.Errorf("%s shape %v and scale %v must be finite and above 0", pattern, a, b)
	}
	return gaps{pattern: pattern, a: a, b: b}, nil
}

// logDraw draws the logarithm of one inter-arrival time. Logarithms, because
// the fitted shapes go down to 0.01: a Gamma draw is then often below
// 1e-300, which a float64 holds only as 0, and a window of zeros cannot be
// stretched to its length.
func (g gaps) logDraw(rng *rand.Rand) float64 {
	if g.pattern == PatternWeibull {
		// Inverse CDF: b·(−ln U)^(1/a), with U in (0, 1].
		return math.Log(g.b) + math.Log(-math.Log(1-rng.Float64()))/g.a
	}
	return gammaSampler{rng: rng, complement: true}.LogGamma(g.a) + math.Log(g.b)
}

// gammaSampler draws from Gamma(shape, scale) by Marsaglia and Tsang's
// method for a shape of 1 or more, and for a smaller one as a draw at
// shape+1 times U^(1/shape). The synthetic shapes take its draws as they
// are (Gamma); ServeGen's windows, whose fitted shapes go down to 0.01,
// take their logarithms (LogGamma), which cannot underflow.
type gammaSampler struct {
	rng *rand.Rand
	// complement draws the method's uniform as 1−U, in (0, 1], rather than
	// U, in [0, 1). Both are uniform; each caller keeps the one it drew
	// with, so that a seed gives the trace it always gave, byte for byte.
	complement bool
}

func (g gammaSampler) uniform() float64 {
	if g.complement {
		return 1 - g.rng.Float64()
	}
	return g.rng.Float64()
}

// boost is the U of U^(1/shape), never 0: a zero would make the draw 0,
// and its logarithm −Inf.
func (g gammaSampler) boost() float64 {
	u := g.uniform()
	for u == 0 {
		u = g.uniform()
	}
	return u
}

// Gamma draws X ~ Gamma(shape, scale).
func (g gammaSampler) Gamma(shape, scale float64) float64 {
	if shape < 1 {
		u := g.boost()
		return g.Gamma(shape+1, scale) * math.Pow(u, 1/shape)
	}
	return g.marsagliaTsang(shape) * scale
}

// LogGamma draws ln X for X ~ Gamma(shape, 1).
func (g gammaSampler) LogGamma(shape float64) float64 {
	if shape < 1 {
		u := g.boost()
		return g.LogGamma(shape+1) + math.Log(u)/shape
	}
	return math.Log(g.marsagliaTsang(shape))
}

// marsagliaTsang draws X ~ Gamma(shape, 1) for a shape of 1 or more.
func (g gammaSampler) marsagliaTsang(shape float64) float64 {
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := g.rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := g.uniform()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

// stretch turns the logarithms of n inter-arrival times into the offsets of
// the n arrivals in a window of the given length, the gaps scaled so that
// they sum to the window, as ServeGen scales them to the window's rate: the
// draws give the shape of the arrivals, the window's count their number.
// The last arrival falls on the window's end. logs is overwritten.
func stretch(logs []float64, window float64) []float64 {
	if len(logs) == 0 {
		return logs
	}
	top := math.Inf(-1)
	for _, l := range logs {
		top = max(top, l)
	}
	sum := 0.0
	for i, l := range logs {
		// Relative to the largest, so that no gap overflows or all underflow.
		logs[i] = math.Exp(l - top)
		sum += logs[i]
	}
	acc := 0.0
	for i, g := range logs {
		acc += g
		logs[i] = min(window*acc/sum, window)
	}
	logs[len(logs)-1] = window
	return logs
}

// quantileLevels are the levels of the token quantiles in tokens.csv, in
// percent: every 5 % to 95 %, then finer in the tail.
var quantileLevels = []float64{0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 75, 80, 85, 90, 95, 96, 97, 98, 99, 99.5, 99.9, 100}

// quantileDraw is the value at level u (0 to 1) of a distribution given by
// its quantiles at quantileLevels, linear between them: with u uniform, a
// draw from the distribution.
func quantileDraw(q []float64, u float64) float64 {
	p := u * 100
	for i := 1; i < len(quantileLevels); i++ {
		if p <= quantileLevels[i] {
			lo, hi := quantileLevels[i-1], quantileLevels[i]
			return q[i-1] + (q[i]-q[i-1])*(p-lo)/(hi-lo)
		}
	}
	return q[len(q)-1]
}
