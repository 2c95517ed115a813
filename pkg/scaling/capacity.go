package scaling

import (
	"math"
	"time"
)

// EngineModel is what the SLO policy needs to know of a worker's engine to
// size it: how its inter-token latency grows with the batch and the
// context, and how fast it prefills. A measured engine profile
// (gpuprofile.Profile) satisfies it as it is; LinearITL is the model
// learned online from the workers' metrics.
type EngineModel interface {
	// ITL is the time of one decode step of batch sequences at a mean
	// context of context tokens: the inter-token latency each sees.
	ITL(batch int, context float64) time.Duration
	// PrefillTokensPerSecond is the prompt tokens a worker prefills per
	// second at full use; 0 when unknown.
	PrefillTokensPerSecond() float64
}

// LinearITL is ITL(batch) = Alpha + Beta·batch, in seconds, whatever the
// context: what a fit of the workers' own readings gives. Prefill is the
// prompt tokens per second, or 0 when unknown.
type LinearITL struct {
	Alpha, Beta float64
	Prefill     float64
}

// ITL implements EngineModel.
func (l LinearITL) ITL(batch int, _ float64) time.Duration {
	// Not rounded as messages round: a step of β is tens of microseconds.
	return time.Duration((l.Alpha + l.Beta*float64(batch)) * float64(time.Second))
}

// PrefillTokensPerSecond implements EngineModel.
func (l LinearITL) PrefillTokensPerSecond() float64 { return l.Prefill }

// ITLPoint is one reading of the inter-token latency at a batch.
type ITLPoint struct {
	Batch float64
	ITL   time.Duration
}

// FitITL is the least-squares line through the points. ok is false when
// they cannot place a line: fewer than two batches apart, or a line that
// falls with the batch or starts below zero, which no engine does; noise
// over a narrow range of batches gives such lines.
func FitITL(points []ITLPoint) (LinearITL, bool) {
	var f ITLFit
	for _, p := range points {
		f = f.add(p.Batch, p.ITL.Seconds(), 1)
	}
	return f.Line()
}

// ITLFit is the online least-squares fit of α + β·batch to (running
// sequences per worker, observed ITL) readings: decayed sums, so it
// follows a new model or image within a few windows, and its age.
type ITLFit struct {
	// N, X, Y, XX and XY are the decayed count and sums of the readings.
	N, X, Y, XX, XY float64
	// Last is the time of the last reading; zero without one.
	Last time.Time
}

// Bounds of the online ITL fit.
const (
	// ITLFitWindow is the time constant over which readings are forgotten.
	ITLFitWindow = time.Hour
	// minITLSpread is the least spread of batches, as a standard
	// deviation in sequences, that a slope is read from.
	minITLSpread = 1
	// minITLReadings is the fewest readings, as decayed weight, a fit is
	// used with.
	minITLReadings = 5
)

// Observe adds a reading of itl at batch sequences per worker, taken at
// now, forgetting older readings over ITLFitWindow. Readings that no
// engine gives (not finite, batch below 1, ITL of 0 or less) are left out.
func (f ITLFit) Observe(now time.Time, batch float64, itl time.Duration) ITLFit {
	y := itl.Seconds()
	if !(batch >= 1) || math.IsInf(batch, 1) || !(y > 0) {
		return f
	}
	keep := 1.0
	if !f.Last.IsZero() && now.After(f.Last) {
		keep = math.Exp(-now.Sub(f.Last).Seconds() / ITLFitWindow.Seconds())
	}
	f = f.scale(keep).add(batch, y, 1)
	if now.After(f.Last) {
		f.Last = now
	}
	return f
}

func (f ITLFit) scale(k float64) ITLFit {
	return ITLFit{N: f.N * k, X: f.X * k, Y: f.Y * k, XX: f.XX * k, XY: f.XY * k, Last: f.Last}
}

func (f ITLFit) add(x, y, w float64) ITLFit {
	f.N += w
	f.X += w * x
	f.Y += w * y
	f.XX += w * x * x
	f.XY += w * x * y
	return f
}

// Line is the fitted line; ok is false until the readings place one (see
// FitITL).
func (f ITLFit) Line() (LinearITL, bool) {
	if !(f.N >= 2) {
		return LinearITL{}, false
	}
	mx, my := f.X/f.N, f.Y/f.N
	vx := f.XX/f.N - mx*mx
	if !(vx >= minITLSpread*minITLSpread) {
		return LinearITL{}, false
	}
	beta := (f.XY/f.N - mx*my) / vx
	alpha := my - beta*mx
	if !(beta >= 0) || !(alpha > 0) || math.IsInf(beta, 0) || math.IsInf(alpha, 0) {
		return LinearITL{}, false
	}
	return LinearITL{Alpha: alpha, Beta: beta}, true
}

// Usable is the fitted line when enough readings support it.
func (f ITLFit) Usable() (LinearITL, bool) {
	if f.N < minITLReadings {
		return LinearITL{}, false
	}
	return f.Line()
}

// Age is how long ago the fit last learned; 0 without a reading.
func (f ITLFit) Age(now time.Time) time.Duration {
	if f.Last.IsZero() || now.Before(f.Last) {
		return 0
	}
	return now.Sub(f.Last)
}

// CapacityInputs is what a worker's capacity depends on besides its engine.
type CapacityInputs struct {
	// ITLTarget is the inter-token latency each sequence must keep; 0
	// sets no bound.
	ITLTarget time.Duration
	// Context is the mean context of a running sequence, in tokens.
	Context float64
	// KVTokens is how many tokens the worker's KV cache holds; 0 when
	// unknown.
	KVTokens float64
	// PromptTokensPerSecond is the prompt tokens arriving at the worker:
	// the share of its time prefill takes from decoding.
	PromptTokensPerSecond float64
	// MaxSeqs is the most sequences the engine's scheduler runs at once
	// (vLLM's --max-num-seqs); 0 means DefaultMaxSeqs.
	MaxSeqs int
}

// DefaultMaxSeqs is vLLM's default --max-num-seqs: however fast the GPU,
// its scheduler runs no more sequences at once, and the rest wait.
const DefaultMaxSeqs = 256

// KVFill is the share of a worker's KV cache its capacity fills at the
// mean context: the running sequences go on growing by their output, and
// an engine whose cache is full preempts the newest and computes it
// again. On a reasoning model's traffic (contexts of thousands of tokens
// that double while they decode) a pool sized to a full cache missed a
// 2 s TTFT on 8 % of its requests; at 85 % it met it on 1 % more
// GPU-hours.
const KVFill = 0.85

// maxBatch bounds the search for a worker's capacity: beyond it, engines
// run out of KV cache or scheduler slots long before the ITL.
const maxBatch = 1 << 16

// Capacity is how many sequences one worker serves at once: the largest
// batch whose ITL stays within the target at the mean context, within
// KVFill of its KV cache and its scheduler's limit, with its prefill keeping up with the
// prompt tokens arriving.
// Prefill interleaves with decoding, so while it takes a share f of the
// worker's time each decode step stretches by 1/(1 − f). It is 0 when no
// batch meets the target (the ITL of one sequence is above it, or prefill
// alone takes the whole worker). The ITL is taken to grow with the batch,
// as on every engine measured.
func Capacity(e EngineModel, c CapacityInputs) int {
	seqs := c.MaxSeqs
	if seqs <= 0 {
		seqs = DefaultMaxSeqs
	}
	limit := min(maxBatch, seqs)
	if c.KVTokens > 0 && c.Context > 0 {
		limit = min(limit, int(min(KVFill*c.KVTokens/c.Context, maxBatch)))
	}
	if limit < 1 {
		return 0
	}
	if c.ITLTarget <= 0 {
		return limit
	}
	stretch := 1.0
	if p := e.PrefillTokensPerSecond(); p > 0 && c.PromptTokensPerSecond > 0 {
		share := c.PromptTokensPerSecond / p
		if share >= 1 {
			return 0
		}
		stretch = 1 / (1 - share)
	}
	context := max(c.Context, 0)
	meets := func(b int) bool {
		return float64(e.ITL(b, context))*stretch <= float64(c.ITLTarget)
	}
	if !meets(1) {
		return 0
	}
	lo, hi := 1, limit // meets(lo); the answer is in [lo, hi]
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if meets(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}
