package workload

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestGenerateIsReproducible(t *testing.T) {
	for _, shape := range Shapes {
		o := DefaultGenerateOptions(shape)
		o.Duration = time.Hour
		a, err := Generate(o)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Generate(o)
		o.Seed++
		c, _ := Generate(o)
		if len(a) == 0 || len(a) != len(b) || a[len(a)/2] != b[len(b)/2] {
			t.Errorf("%s: not reproducible", shape)
		}
		if len(a) == len(c) && a[len(a)/2] == c[len(c)/2] {
			t.Errorf("%s: the seed changes nothing", shape)
		}
	}
}

// The diurnal curve has the peak-to-trough ratio asked for, and the step
// surge multiplies the rate by its factor.
func TestGenerateShapes(t *testing.T) {
	count := func(reqs []Request, from, to time.Duration) float64 {
		n := 0
		for _, r := range reqs {
			if r.Arrival >= from && r.Arrival < to {
				n++
			}
		}
		return float64(n)
	}
	o := DefaultGenerateOptions(ShapeDiurnal)
	o.Duration = 24 * time.Hour
	reqs, _ := Generate(o)
	peak := count(reqs, 11*time.Hour+30*time.Minute, 12*time.Hour+30*time.Minute)
	trough := count(reqs, 0, 30*time.Minute) + count(reqs, 23*time.Hour+30*time.Minute, 24*time.Hour)
	if ratio := peak / trough; ratio < o.PeakToTrough*0.8 || ratio > o.PeakToTrough*1.2 {
		t.Errorf("diurnal peak/trough = %.2f, want about %v", ratio, o.PeakToTrough)
	}
	s := DefaultGenerateOptions(ShapeStep)
	reqs, _ = Generate(s)
	if ratio := count(reqs, s.SurgeAt, s.SurgeAt+s.SurgeFor) / count(reqs, 0, s.SurgeAt); ratio < s.SurgeFactor*0.9 || ratio > s.SurgeFactor*1.1 {
		t.Errorf("step surge ratio = %.2f, want about %v", ratio, s.SurgeFactor)
	}
	if _, err := Generate(GenerateOptions{Shape: "sine"}); err == nil {
		t.Error("unknown shape: no error")
	}
}

// The BurstGPT model: inter-arrival times of a Gamma with shape k have a
// coefficient of variation of 1/√k.
func TestGamma(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, shape := range []float64{0.25, 1, 4} {
		var sum, sq float64
		const n = 200000
		for range n {
			x := gammaSampler{rng: rng}.Gamma(shape, 2)
			sum += x
			sq += x * x
		}
		mean := sum / n
		cv := (sq/n - mean*mean) / (mean * mean)
		if mean < 2*shape*0.97 || mean > 2*shape*1.03 || cv < 1/shape*0.9 || cv > 1/shape*1.1 {
			t.Errorf("shape %v: mean %.3f (want %v), squared CV %.3f (want %.3f)", shape, mean, 2*shape, cv, 1/shape)
		}
	}
}

// Each seed draws the shape anew; the same seed draws it again alike.
func TestGenerateShapeSeeds(t *testing.T) {
	m := ServiceModel{PrefillPerSecond: 4000, DecodePerSecond: 40}
	a, err := GenerateShape(ShapeFlash, 1, 1, m)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := GenerateShape(ShapeFlash, 1, 1, m)
	c, _ := GenerateShape(ShapeFlash, 2, 1, m)
	if len(a.Requests) != len(b.Requests) || a.Requests[100] != b.Requests[100] {
		t.Error("seed 1 drew two different traces")
	}
	if len(a.Requests) == len(c.Requests) && a.Requests[100] == c.Requests[100] {
		t.Error("seeds 1 and 2 drew the same trace")
	}
	if a.Tokens == nil || a.Requests[0].Service <= 0 {
		t.Error("a drawn shape has no tokens or service times")
	}
	if _, err := GenerateShape(ShapeFlash, 1, 1, ServiceModel{}); err == nil {
		t.Error("a shape without token rates: no error")
	}
	// At a rate scale the shape is drawn as before and resampled, as a
	// file read at that scale is.
	scaled, err := GenerateShape(ShapeFlash, 1, 3, m)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := float64(len(scaled.Requests)), 3*float64(len(a.Requests)); got < 0.97*want || got > 1.03*want {
		t.Errorf("rate scale 3: %v requests, want about %v", got, want)
	}
}
