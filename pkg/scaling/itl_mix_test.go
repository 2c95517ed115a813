package scaling

import (
	"math"
	"testing"
	"time"
)

func TestPoissonAbove(t *testing.T) {
	for _, tc := range []struct {
		x, mu, want, tol float64
	}{
		{0, 1, 1 - math.Exp(-1), 1e-12},
		{2, 1, 1 - 2.5*math.Exp(-1), 1e-12},
		{2.9, 1, 1 - 2.5*math.Exp(-1), 1e-12}, // a count is whole
		{-0.1, 1, 1, 0},
		{0, 0, 0, 0},
		{200, 1, 0, 0},
		// Above a mean of 50, the normal approximation: P(N > 100) for a
		// mean of 100 is 0.4734.
		{100, 100, 0.4734, 0.01},
		{130, 100, 0.0012, 0.001},
	} {
		if got := poissonAbove(tc.x, tc.mu); math.Abs(got-tc.want) > tc.tol {
			t.Errorf("P(N > %v | μ %v) = %.6f, want %.6f", tc.x, tc.mu, got, tc.want)
		}
	}
}

// mixPool is the walkthrough's pool (vllmPool) with its output tokens a
// request of mean and median read.
func mixPool(t *testing.T, mean, median float64) (Inputs, *SLOOutcome) {
	in := vllmPool(t)
	in.Metrics = append(in.Metrics, role("GenerationTokensMedian", median))
	for i := range in.Metrics {
		if in.Metrics[i].Role == "GenerationTokens" {
			in.Metrics[i].Value = 50 * mean
		}
	}
	return withRoleReadings(in), &SLOOutcome{Arrivals: 50, completions: 50, Expected: 50, Slots: 159, service: 8}
}

// TestOutputMix: the lengths are a lognormal of the median and the mean
// read; all of one length where the mean is not above the median; none
// without a median.
func TestOutputMix(t *testing.T) {
	share := func(m outputMix, most float64) float64 { // of requests with at most most gaps
		n := 0
		for _, g := range m.gaps {
			if g <= most {
				n++
			}
		}
		return float64(n) / mixPoints
	}
	// Real chat traffic: a median of 3 output tokens, a mean of 16.3, and
	// 76 % of the requests at most 10 tokens. The lognormal gives 74 %.
	in, o := mixPool(t, 16.3, 3)
	m, ok := outputMixOf(in, o)
	if !ok {
		t.Fatal("no mix from a median and a mean")
	}
	if got := share(m, 9); math.Abs(got-0.74) > 0.02 {
		t.Errorf("%.3f of the requests within 10 tokens, want 0.74", got)
	}
	if got := share(m, 0); math.Abs(got-0.36) > 0.02 { // ln 1.5 − ln 3 over σ 1.84
		t.Errorf("%.3f of the requests of one token, want 0.36", got)
	}
	if got := m.withGaps(); math.Abs(got-(1-share(m, 0))) > 1e-12 {
		t.Errorf("%.3f with a gap, want %.3f", got, 1-share(m, 0))
	}
	in, o = mixPool(t, 100, 160)
	if m, ok = outputMixOf(in, o); !ok || m.gaps[0] != 159 || m.gaps[mixPoints-1] != 159 {
		t.Errorf("mean below the median: %v %v, want every request at the median", ok, m.gaps)
	}
	in, o = mixPool(t, 16.3, 0)
	if _, ok = outputMixOf(in, o); ok {
		t.Error("a mix without a median")
	}
}

// TestOverShare: the share of requests over a limit at a count, and the
// ITL at the percentile it gives.
func TestOverShare(t *testing.T) {
	in, o := mixPool(t, 16.3, 3)
	m, _ := outputMixOf(in, o)
	// Four gaps each, two prompts of 25 ms each a second a task at a
	// 25 ms mean: 0.25 prompts in a request's life, its own prefill's
	// 25 ms with its four gaps. 10 ms of decode and a limit of 40 ms
	// leave 30 ms a gap, 120 ms in all: over with five prompts,
	// P(N > 4.8) = P(N ≥ 5).
	var four outputMix
	for i := range four.gaps {
		four.gaps[i] = 4
	}
	a := itlAt{decode: 0.010, mean: 0.025, prompts: 2, prefill: 0.025}
	if got, want := four.overShare(a, 0.040), poissonAbove(4, 0.25); math.Abs(got-want) > 1e-15 || got <= 0 {
		t.Errorf("over %.3g, want %.3g", got, want)
	}
	// A limit under the decode: every request with a gap is over.
	if got := m.overShare(a, 0.009); got != m.withGaps() {
		t.Errorf("under the decode: %.3f over, want %.3f", got, m.withGaps())
	}
	// No prompt reaches a task: none over.
	if got := m.overShare(itlAt{decode: 0.010, mean: 0.010}, 0.040); got != 0 {
		t.Errorf("no prompts: %.3f over", got)
	}
	// Fewer prompts a task, fewer requests over.
	if lo, hi := m.overShare(itlAt{decode: 0.010, mean: 0.025, prompts: 1, prefill: 0.045}, 0.040),
		m.overShare(itlAt{decode: 0.010, mean: 0.025, prompts: 4, prefill: 0.045}, 0.040); !(lo < hi) {
		t.Errorf("over at 1 prompt a second %.4f, at 4 %.4f", lo, hi)
	}
	// The percentile is the least ITL with at most 5 % over.
	a = itlAt{decode: 0.010, mean: 0.025, prompts: 4, prefill: 0.045}
	p := m.percentile(a, 95)
	if m.overShare(a, p) > 0.05 || m.overShare(a, p-2e-6) <= 0.05 {
		t.Errorf("p95 %.6f: %.4f over it, %.4f over just under it", p, m.overShare(a, p), m.overShare(a, p-2e-6))
	}
	// Where fewer than 5 % have a gap, the decode.
	var short outputMix
	short.gaps[0] = 3
	if got := short.percentile(a, 95); got != a.decode {
		t.Errorf("p95 of requests nearly all of one token %v, want the decode", got)
	}
}

// TestITLOverTheMix: short requests on traffic of long prompts need more
// tasks than a request of the mean output does, and the ITL predicted at
// the count is the mix's percentile.
func TestITLOverTheMix(t *testing.T) {
	// 5 requests a second of 4,000 prompt tokens, 104 ms of prefill each:
	// on one task, a request of one gap that the prompt arriving during
	// its own prefill lands in is over 50 ms.
	in, _ := mixPool(t, 16.3, 3)
	in.Engine.PromptTokens, in.Engine.GenerationTokens = 20000, 5*16.3
	o := &SLOOutcome{Arrivals: 5, completions: 5, Expected: 5, Slots: 159, service: 2}
	mean := in
	e := *in.Engine
	e.GenerationMedian = 0
	mean.Engine = &e
	withMix, without := itlTasks(in, o), itlTasks(mean, o)
	if !(withMix > without) || without < 1 {
		t.Errorf("tasks for the ITL over the mix %d, for the mean request %d: want more over the mix", withMix, without)
	}
	if got := predictedITL(in, o, withMix); got > in.Policy.SLO.ITL {
		t.Errorf("ITL at %d tasks %v, over the objective", withMix, got)
	}
	if got := predictedITL(in, o, withMix-1); got <= in.Policy.SLO.ITL {
		t.Errorf("ITL at %d tasks %v, within the objective", withMix-1, got)
	}
	if got := predictedITL(in, o, MaxSLOTasks); got < time.Duration(e.Model.ITL(1, e.Context)) {
		t.Errorf("ITL at the most tasks %v, under one sequence's", got)
	}
}

// TestLongPrompts: the prompts' lognormal from their median and mean, and
// a request over its objective by one long prompt where many of the mean
// length would not be.
func TestLongPrompts(t *testing.T) {
	for _, tc := range []struct {
		mean, median, wantMedian, wantSigma float64
	}{
		{115, 35, 35, 1.5424},
		{115, 0, 115, 0},           // no median: all of the mean
		{115, math.Inf(1), 115, 0}, // nor an infinite one
		{115, 200, 200, 0},         // the mean not above the median
		{115, 0.5, 115, 0},         // under one token is no reading
	} {
		median, sigma := lognormalOf(tc.mean, tc.median)
		if median != tc.wantMedian || math.Abs(sigma-tc.wantSigma) > 1e-4 {
			t.Errorf("lognormalOf(%v, %v) = %v, %.4f; want %v, %.4f", tc.mean, tc.median, median, sigma, tc.wantMedian, tc.wantSigma)
		}
	}
	// Real chat prompts: a median of 35 tokens, a mean of 115; 1.2 % of
	// them over 1,400 tokens, the lognormal's 0.8 %.
	in, o := mixPool(t, 13.3, 3)
	in.Engine.PromptTokens, in.Engine.PromptMedian = 50*115, 35
	m, ok := outputMixOf(in, o)
	if !ok {
		t.Fatal("no mix")
	}
	if got := m.longPrompts(1400.0 / 115); math.Abs(got-0.0084) > 0.0005 {
		t.Errorf("%.4f of the prompts over 1,400 tokens, want 0.0084", got)
	}
	if got := m.longPrompts(0); got != 1 {
		t.Errorf("%.4f of the prompts over none, want all", got)
	}
	// One gap at 12 ms of decode, 3 ms of prefill a mean prompt, 1 a
	// second a task: 38 ms of room is 12.7 mean prompts, never reached by
	// a count of mean 0.015, but one prompt in 119 is that long alone.
	var one outputMix
	for i := range one.gaps {
		one.gaps[i] = 1
	}
	one.promptMedian, one.promptSigma = m.promptMedian, m.promptSigma
	a := itlAt{decode: 0.012, mean: 0.012, prompts: 1, prefill: 0.003}
	mu0 := 1 * (0.012 + 0.003)
	mu := mu0
	if got, want := one.overShare(a, 0.050), -math.Expm1(-mu*m.longPrompts(38.0/3)); math.Abs(got-want) > 1e-12 || !(got > poissonAbove(38.0/3, mu)) {
		t.Errorf("over %.3g, want one long prompt's %.3g", got, want)
	}
	// 100 prompts a second a task, each 4 ms of prefill at the mean (40 %
	// of the task's time): 40 ms of room is 10 prompts of the mean, which
	// a count of mean 2.07 reaches in 1.5 requests of 100,000, and one
	// prompt 10 times the mean comes in 2.4 of 100. But the lengths vary
	// e^σ² = 10.8 times more than a count of the mean's: several prompts
	// with a long one among them fill the room in about 3 of 100.
	busy := itlAt{decode: 0.010, mean: 0.010 / 0.6, prompts: 100, prefill: 0.004}
	mu = 100 * (0.010/0.6 + 0.004)
	compound, count, long := one.promptsAbove(10, mu), poissonAbove(10, mu), -math.Expm1(-mu*m.longPrompts(10))
	if got := one.overShare(busy, 0.050); math.Abs(got-compound) > 1e-12 || !(got > 0.03 && got < 0.04) || !(got > count) || !(got > long) {
		t.Errorf("over %.3g, want the compound sum's %.3g, above the count's %.3g and one long prompt's %.3g", got, compound, count, long)
	}
	// Without the prompts' median, every prompt is of the mean: none over.
	one.promptMedian, one.promptSigma = 1, 0
	if got := one.overShare(a, 0.050); got != poissonAbove(38.0/3, mu0) {
		t.Errorf("prompts of the mean: over %.3g, want %.3g", got, poissonAbove(38.0/3, mu0))
	}
	// No room left by the decode step: over whenever a prompt comes.
	one.promptSigma = m.promptSigma
	if got, want := one.promptsAbove(0, mu), -math.Expm1(-mu); math.Abs(got-want) > 1e-15 {
		t.Errorf("no room: compound share %v, want the chance of a prompt %v", got, want)
	}
	one.promptSigma = 40 // e^σ² overflows
	if got := one.promptsAbove(10, mu); got != 0 {
		t.Errorf("a spread past any float: compound share %v, want 0", got)
	}
	one.promptSigma = 0
	if got := one.promptsAbove(250, mu); got != 0 {
		t.Errorf("prompts of the mean: compound share %.3g, want the count's alone (0 here)", got)
	}
}
