package workload

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Shapes of synthetic traces.
const (
	ShapeDiurnal = "diurnal"
	ShapeBursty  = "bursty"
	ShapeStep    = "step"
	ShapeFlash   = "flash"
)

// Shapes lists the synthetic trace shapes.
var Shapes = []string{ShapeDiurnal, ShapeBursty, ShapeStep, ShapeFlash}

// GenerateOptions describe a synthetic trace.
type GenerateOptions struct {
	Shape    string
	Duration time.Duration
	// PeakRate is the arrival rate at the peak, in requests per second.
	PeakRate float64
	// PeakToTrough is the diurnal ratio of the daily peak rate to the
	// nightly trough (diurnal and bursty).
	PeakToTrough float64
	// Weekend scales the rate on days 6 and 7 of each week (diurnal and
	// bursty); 1 means no weekly variation.
	Weekend float64
	// GammaShape and GammaScale are the BurstGPT model of bursts (bursty):
	// inter-arrival times are Gamma(shape, scale). A scale of 0 follows the
	// rate curve (scale = 1/(shape × rate)); a shape below 1 is burstier
	// than Poisson.
	GammaShape, GammaScale float64
	// BurstShape draws the rate of each BurstWindow from a Gamma(shape,
	// 1/shape) around the curve (mean 1), so that bursts also last long
	// enough for an autoscaler to see them; 0 keeps the curve.
	BurstShape  float64
	BurstWindow time.Duration
	// SurgeAt, SurgeFor and SurgeFactor place the step surge (step) or the
	// flash crowd (flash): the rate is multiplied by SurgeFactor from
	// SurgeAt for SurgeFor; a flash crowd decays exponentially over SurgeFor.
	SurgeAt, SurgeFor time.Duration
	SurgeFactor       float64
	// InputTokensMedian, OutputTokensMedian and TokensSigma draw each
	// request's token counts from log-normal distributions.
	InputTokensMedian, OutputTokensMedian, TokensSigma float64
	Seed                                               uint64
}

// DefaultGenerateOptions are the defaults of `gputask-replay generate` for a shape.
func DefaultGenerateOptions(shape string) GenerateOptions {
	o := GenerateOptions{
		Shape:              shape,
		Duration:           72 * time.Hour,
		PeakRate:           8,
		PeakToTrough:       6,
		Weekend:            0.6,
		GammaShape:         0.5,
		BurstShape:         4,
		BurstWindow:        5 * time.Minute,
		SurgeFactor:        4,
		InputTokensMedian:  600,
		OutputTokensMedian: 250,
		TokensSigma:        0.8,
		Seed:               1,
	}
	switch shape {
	case ShapeBursty:
		o.Duration = 24 * time.Hour
	case ShapeStep:
		o.Duration, o.PeakRate, o.SurgeAt, o.SurgeFor = 6*time.Hour, 8, 2*time.Hour, 2*time.Hour
	case ShapeFlash:
		o.Duration, o.PeakRate, o.SurgeAt, o.SurgeFor, o.SurgeFactor = 4*time.Hour, 12, time.Hour, 15*time.Minute, 6
	}
	return o
}

// Generate draws a synthetic trace. The same options always give the same trace.
func Generate(o GenerateOptions) ([]Request, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x7ace))
	gamma := gammaSampler{rng: rng}
	rate := o.rateCurve(gamma)
	shape := 1.0 // Poisson
	if o.Shape == ShapeBursty {
		shape = o.GammaShape
	}
	var out []Request
	t := 0.0
	end := o.Duration.Seconds()
	for {
		r := rate(t)
		if r <= 0 {
			// No arrivals in this second; look again a second later.
			t++
			if t >= end {
				break
			}
			continue
		}
		scale := 1 / (shape * r)
		if o.Shape == ShapeBursty && o.GammaScale > 0 {
			scale = o.GammaScale
		}
		t += gamma.Gamma(shape, scale)
		if t >= end {
			break
		}
		out = append(out, Request{
			Arrival:      time.Duration(t * float64(time.Second)),
			InputTokens:  tokens(rng, o.InputTokensMedian, o.TokensSigma),
			OutputTokens: tokens(rng, o.OutputTokensMedian, o.TokensSigma),
		})
	}
	return out, nil
}

func (o GenerateOptions) validate() error {
	switch {
	case o.Shape != ShapeDiurnal && o.Shape != ShapeBursty && o.Shape != ShapeStep && o.Shape != ShapeFlash:
		return fmt.Errorf("unknown shape %q: want one of %v", o.Shape, Shapes)
	case o.Duration <= 0:
		return fmt.Errorf("duration must be above 0, got %v", o.Duration)
	case !(o.PeakRate > 0) || math.IsInf(o.PeakRate, 0):
		return fmt.Errorf("peak rate must be above 0, got %v", o.PeakRate)
	case !(o.PeakToTrough >= 1):
		return fmt.Errorf("peak-to-trough ratio must be at least 1, got %v", o.PeakToTrough)
	case !(o.Weekend > 0):
		return fmt.Errorf("weekend factor must be above 0, got %v", o.Weekend)
	case o.Shape == ShapeBursty && !(o.GammaShape > 0):
		return fmt.Errorf("gamma shape must be above 0, got %v", o.GammaShape)
	case o.Shape == ShapeBursty && (o.BurstShape < 0 || (o.BurstShape > 0 && o.BurstWindow <= 0)):
		return fmt.Errorf("burst shape must be >= 0, and the burst window above 0")
	case (o.Shape == ShapeStep || o.Shape == ShapeFlash) && (!(o.SurgeFactor > 0) || o.SurgeFor <= 0):
		return fmt.Errorf("surge factor and duration must be above 0")
	case !(o.InputTokensMedian >= 0) || !(o.OutputTokensMedian > 0) || !(o.TokensSigma >= 0):
		return fmt.Errorf("token medians must be >= 0 (output above 0) and sigma >= 0")
	}
	return nil
}

// rateCurve is the arrival rate over time, in requests per second.
func (o GenerateOptions) rateCurve(gamma gammaSampler) func(t float64) float64 {
	switch o.Shape {
	case ShapeDiurnal:
		return func(t float64) float64 { return o.PeakRate * diurnal(t, o.PeakToTrough, o.Weekend) }
	case ShapeBursty:
		window := o.BurstWindow.Seconds()
		factors := make([]float64, int(math.Ceil(o.Duration.Seconds()/window))+1)
		for i := range factors {
			factors[i] = 1
			if o.BurstShape > 0 {
				factors[i] = gamma.Gamma(o.BurstShape, 1/o.BurstShape)
			}
		}
		return func(t float64) float64 {
			// Bursts go above and below the curve; its mean is the curve's.
			return o.PeakRate * diurnal(t, o.PeakToTrough, o.Weekend) * factors[int(t/window)]
		}
	case ShapeStep:
		base, at, until := o.PeakRate/o.SurgeFactor, o.SurgeAt.Seconds(), (o.SurgeAt + o.SurgeFor).Seconds()
		return func(t float64) float64 {
			if t >= at && t < until {
				return o.PeakRate
			}
			return base
		}
	default: // ShapeFlash
		base, at, decay := o.PeakRate/o.SurgeFactor, o.SurgeAt.Seconds(), o.SurgeFor.Seconds()
		return func(t float64) float64 {
			if t < at {
				return base
			}
			return base + (o.PeakRate-base)*math.Exp(-(t-at)/decay)
		}
	}
}

// diurnal is the share of the peak rate at t: a cosine from the trough at
// midnight to the peak at noon, peak/trough apart, scaled by weekend on
// days 6 and 7 of each week.
func diurnal(t, peakToTrough, weekend float64) float64 {
	const day = 24 * 3600.0
	trough := 1 / peakToTrough
	f := trough + (1-trough)*(1-math.Cos(2*math.Pi*t/day))/2
	if d := int(t/day) % 7; d >= 5 {
		f *= weekend
	}
	return f
}

func tokens(rng *rand.Rand, median, sigma float64) int {
	if median <= 0 {
		return 0
	}
	return max(1, int(math.Round(median*math.Exp(sigma*rng.NormFloat64()))))
}

// GenerateShape draws a synthetic trace of shape (DefaultGenerateOptions)
// with seed, and reads it as a trace file of that shape would be read,
// its service times from its token columns through model's rates, at
// rateScale times its rate (resampled as --rate-scale resamples a file;
// 0 or 1 keeps it).
func GenerateShape(shape string, seed uint64, rateScale float64, model ServiceModel) (Trace, error) {
	o := DefaultGenerateOptions(shape)
	o.Seed = seed
	reqs, err := Generate(o)
	if err != nil {
		return Trace{}, err
	}
	var buf bytes.Buffer
	if err := WriteCSV(&buf, reqs); err != nil {
		return Trace{}, err
	}
	model.Column, model.Fixed, model.Sigma = "", 0, 0
	model.InputTokensColumn, model.OutputTokensColumn = ColumnInputTokens, ColumnOutputTokens
	return ReadTrace(&buf, TraceOptions{TimeColumn: ColumnTimestamp, Service: model, RateScale: rateScale, Seed: seed})
}
