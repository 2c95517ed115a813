package scaling

import (
	"math"
	"testing"
	"time"
)

// h100 is close to the H100 profile for an 8B model at a 1,024-token
// context: 7 ms for one sequence, 20.1 ms at 256 (β ≈ 0.0512 ms), and
// 38,000 prompt tokens prefilled a second.
var h100 = LinearITL{Alpha: 0.007, Beta: 0.0000512, Prefill: 38000}

// byContext is an engine whose ITL also grows with the context, as a
// measured profile does: 1 µs per sequence per 1,000 tokens of context.
type byContext struct{ LinearITL }

func (b byContext) ITL(batch int, context float64) time.Duration {
	return b.LinearITL.ITL(batch, context) + time.Duration(float64(batch)*context) // 1 ns per sequence-token
}

func TestCapacity(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name   string
		engine EngineModel
		in     CapacityInputs
		want   int
	}{
		// (20 − 7) / 0.0512 = 253.9 sequences.
		{"the ITL target", h100, CapacityInputs{ITLTarget: 20 * ms, Context: 1024}, 253},
		{"a looser target, a larger scheduler", h100, CapacityInputs{ITLTarget: 50 * ms, Context: 1024, MaxSeqs: 4096}, 839},
		// 85 % of 100,000 tokens of KV cache hold 41 sequences of 2,048.
		{"the KV cache", h100, CapacityInputs{ITLTarget: 50 * ms, Context: 2048, KVTokens: 100000}, 41},
		// Prefill takes half the worker: each step may take 10 ms of
		// decoding, (10 − 7) / 0.0512 = 58.6.
		{"prefill takes its share", h100, CapacityInputs{ITLTarget: 20 * ms, Context: 1024, PromptTokensPerSecond: 19000}, 58},
		{"prefill alone fills the worker", h100, CapacityInputs{ITLTarget: 20 * ms, PromptTokensPerSecond: 38000}, 0},
		{"unknown prefill takes nothing", LinearITL{Alpha: 0.007, Beta: 0.0000512}, CapacityInputs{ITLTarget: 20 * ms, PromptTokensPerSecond: 1e9}, 253},
		{"one sequence above the target", h100, CapacityInputs{ITLTarget: 5 * ms}, 0},
		// 85 % of 64,000 tokens: 54 sequences of 1,000.
		{"no target: the KV cache alone", h100, CapacityInputs{Context: 1000, KVTokens: 64000}, 54},
		{"no bound but the scheduler's", h100, CapacityInputs{}, DefaultMaxSeqs},
		{"a scheduler of more sequences", h100, CapacityInputs{MaxSeqs: 1024}, 1024},
		// The H100 keeps 20 ms up to about 256 sequences of 1 k context;
		// a 50 ms target would allow more than vLLM's scheduler runs.
		{"the scheduler caps a loose ITL target", h100, CapacityInputs{ITLTarget: 50 * ms, Context: 1024}, DefaultMaxSeqs},
		{"a KV cache smaller than one context", h100, CapacityInputs{ITLTarget: 50 * ms, Context: 4096, KVTokens: 1000}, 0},
		// 7 ms + b × (0.0512 + 0.008) ms ≤ 20 ms at 8,000 tokens: 219.
		{"the context slows each step", byContext{h100}, CapacityInputs{ITLTarget: 20 * ms, Context: 8000}, 219},
	} {
		if got := Capacity(tc.engine, tc.in); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestFitITL(t *testing.T) {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	for _, tc := range []struct {
		name        string
		points      []ITLPoint
		alpha, beta float64
		ok          bool
	}{
		{"points on a line", []ITLPoint{{1, ms(7.05)}, {101, ms(12.05)}, {201, ms(17.05)}}, 0.007, 0.00005, true},
		// Least squares through noise: the same line, up to it.
		{"noisy points", []ITLPoint{{10, ms(7.6)}, {10, ms(7.4)}, {110, ms(12.6)}, {110, ms(12.4)}}, 0.007, 0.00005, true},
		{"one batch has no slope", []ITLPoint{{50, ms(9)}, {50, ms(9.5)}}, 0, 0, false},
		{"a falling line is noise", []ITLPoint{{1, ms(9)}, {100, ms(8)}}, 0, 0, false},
		{"nothing", nil, 0, 0, false},
	} {
		l, ok := FitITL(tc.points)
		if ok != tc.ok || math.Abs(l.Alpha-tc.alpha) > 1e-9 || math.Abs(l.Beta-tc.beta) > 1e-11 {
			t.Errorf("%s: %+v %v, want α %v β %v %v", tc.name, l, ok, tc.alpha, tc.beta, tc.ok)
		}
	}
}

// TestITLFitOnline: the online fit finds the line from readings spread
// over batches, is not used before enough readings, forgets an old
// engine within a few windows, and says how old it is.
func TestITLFitOnline(t *testing.T) {
	var f ITLFit
	at := func(k int) time.Time { return t0.Add(time.Duration(k) * 15 * time.Second) }
	line := func(a, b float64) func(x float64) time.Duration {
		return func(x float64) time.Duration { return time.Duration((a + b*x) * float64(time.Second)) }
	}
	old := line(0.010, 0.0001)
	for k, batch := range []float64{4, 40, 8} {
		f = f.Observe(at(k), batch, old(batch))
	}
	if _, ok := f.Usable(); ok {
		t.Error("usable after 3 readings")
	}
	for k := 3; k < 960; k++ {
		batch := float64(4 + 9*k%37)
		f = f.Observe(at(k), batch, old(batch))
	}
	if l, ok := f.Usable(); !ok || math.Abs(l.Alpha-0.010) > 1e-9 || math.Abs(l.Beta-0.0001) > 1e-11 {
		t.Fatalf("fit %+v %v, want α 10 ms β 0.1 ms", l, ok)
	}
	if age := f.Age(at(963)); age != time.Minute {
		t.Errorf("age %v, want 1m", age)
	}
	// A faster engine after four hours of the old one: four hours of its
	// readings later the fit is within 5 % of it, as the old readings
	// weigh e⁻⁴ of the new.
	fast := line(0.007, 0.00005)
	for k := 960; k < 2*960; k++ {
		batch := float64(4 + 9*k%37)
		f = f.Observe(at(k), batch, fast(batch))
	}
	if l, _ := f.Usable(); math.Abs(l.Alpha-0.007) > 0.05*0.007 || math.Abs(l.Beta-0.00005) > 0.05*0.00005 {
		t.Errorf("after the change: %+v, want α 7 ms β 0.05 ms", l)
	}
	// Readings no engine gives are left out.
	if g := f.Observe(at(3000), 0.5, time.Millisecond).Observe(at(3000), 10, 0); g != f {
		t.Error("an impossible reading changed the fit")
	}
}
