package scaling

import (
	"math"
	"slices"
	"testing"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/queueing"
)

// FuzzSLOEngineNoRunaway: on an engine-sized pool (the H100 profile, TTFT
// and ITL objectives, vLLM's eleven roles), no reading moves the count in
// one interval further than the SLO needs at the most the readings allow.
// With a, c, r, w the arrivals, completions, running and waiting read, S₀
// the service time the state held before, H the largest rise in the
// history after it and T the start-up:
//
//   - the service time used is at most Ŝ = max(S₀, r ÷ max(c, a/2,
//     1/300 s)), and the expected rate at most
//     λ̂ = (2a + H + (w + 2a·T) ÷ (BacklogClearing·T)) × MaxCorrection,
//     as on a pool of slots (FuzzSLONoRunaway);
//   - where no arrivals are read (the built-in slo-engine set reads the
//     completions only), a is at most the most the completions and the
//     pool's growth allow: the largest of the arrivals derived before,
//     and c + (r + w − the fewest in the pool before) ÷ the interval since
//     the last reading; and Ŝ = max(S₀, r ÷ max(c, 1/300 s)), since the
//     service time is learned only while c is at least half of a;
//   - the count is at most max(Current, ⌈(r + w) ÷ slots⌉, T̂, N̂) + 1,
//     with slots the capacity the decision read from the profile, T̂ the
//     queueing model's count for λ̂ at Ŝ on those slots, and N̂ what keeps
//     the ITL within its target with half of it to spare: enough tasks
//     that each runs at most the largest batch whose ITL at the context
//     read is half the target (λ̂·Ŝ sequences over them), and that the
//     prompts the expected rate brings take at most a third of each
//     task's prefill. At N̂ the mean ITL is within half the target
//     stretched by 1/(1 − 1/3), the spread of the prefill over the
//     requests adds at most its share of it again (prefillSpread), and
//     so the predicted ITL, at most ½ · (1 + ⅓) ÷ (1 − ⅓) of the target,
//     is within it: the fewest tasks that hold it are no more;
//   - with a median of the output or prompt tokens read, the count may
//     also be the one that keeps the ITL over the mix of request lengths,
//     at most M̂ = max(N̂, ⌈λ̂ · (ḡ · ITL + p) ÷ q⌉), with ḡ the mean of
//     the mix's gaps between tokens, p a mean prompt's prefill and q the
//     share of requests allowed over (100 − percentile per cent). At M̂
//     and above, a step without prompts is within half the target and the
//     mean ITL within it (N̂), so a request of g gaps is over only if at
//     least one prompt reaches its task during its life; that count is
//     Poisson of mean μ = (λ̂ ÷ M̂)(g · mean ITL + p), so it is over with
//     probability at most 1 − e^(−μ) ≤ μ, and over the mix at most
//     λ̂ · (ḡ · ITL + p) ÷ M̂ ≤ q. Where one prompt's prefill alone is
//     over the objective this is many tasks, as docs/autoscaling.md
//     says, but never more.
func FuzzSLOEngineNoRunaway(f *testing.F) {
	f.Add(50.0, 50.0, 400.0, 20.0, 50000.0, 8000.0, 0.6, 0.015, 1.2, 0.0, 0.0, int32(2), true, true)
	f.Add(324.0, 60.0, 1536.0, 6500.0, 350000.0, 60000.0, 0.95, 0.05, 30.0, 0.0, 0.0, int32(6), true, true)
	f.Add(300.0, 0.0, 1000.0, 30000.0, 1e6, 0.0, 1.0, 0.2, 100.0, 0.0, 0.0, int32(1), false, true)
	f.Add(1e-9, 1e-12, 1e12, 1e9, 1e15, 1e-9, 7.0, 1e9, 1e300, 0.0, 0.0, int32(100), true, true)
	// m-small's held-out day 11: short outputs (a median of 3 tokens, a
	// mean of 14) and a tail of long prompts (a median of 35, a mean of
	// 115), and the same with a mean prompt whose prefill alone is over
	// the objective.
	f.Add(400.0, 400.0, 900.0, 10.0, 46000.0, 5600.0, 0.3, 0.02, 0.5, 3.0, 35.0, int32(4), true, true)
	f.Add(400.0, 400.0, 900.0, 10.0, 4e6, 5600.0, 0.3, 0.02, 0.5, 3.0, 35.0, int32(4), true, true)
	// The completions alone, as the slo-engine set reads them: in steady
	// state, and with the pool grown by thousands since the last reading.
	f.Add(0.0, 50.0, 400.0, 20.0, 50000.0, 8000.0, 0.6, 0.015, 1.2, 0.0, 0.0, int32(2), true, false)
	f.Add(0.0, 60.0, 1536.0, 6500.0, 350000.0, 60000.0, 0.95, 0.05, 30.0, 0.0, 0.0, int32(6), true, false)
	f.Add(0.0, 1e-12, 1e12, 1e9, 1e15, 1e-9, 7.0, 1e9, 1e300, 0.0, 0.0, int32(100), true, false)
	f.Fuzz(func(t *testing.T, a, c, r, w, prompt, gen, kv, itl, ttft, genMedian, promptMedian float64, current int32, primed, arrivalsRead bool) {
		in := vllmPool(t)
		in.Min, in.Max, in.Interval = 0, MaxSLOTasks, 15*time.Second
		if !arrivalsRead {
			in.Metrics = slices.DeleteFunc(slices.Clone(in.Metrics), func(m MetricInput) bool { return m.Role == gputaskv1.RoleArrivals })
		}
		if primed {
			// Ten minutes of the walkthrough's pool: a service time, rates
			// and a few rises learned.
			for k := 0; k < 40; k++ {
				in.Now = in.Now.Add(in.Interval)
				d := Decide(in)
				in.Queue, in.Current, in.Recommendations = d.Queue, d.Desired, d.Recommendations
			}
		}
		in.Current = min(max(current, 0), 1000)
		valid := func(v float64) float64 {
			if v = math.Abs(v); math.IsNaN(v) || math.IsInf(v, 0) {
				return 0
			}
			return v
		}
		a, c, r, w, prompt, gen, kv, itl, ttft = valid(a), valid(c), valid(r), valid(w), valid(prompt), valid(gen), valid(kv), valid(itl), valid(ttft)
		genMedian, promptMedian = valid(genMedian), valid(promptMedian)
		in.Now = in.Now.Add(in.Interval)
		in.Metrics = []MetricInput{role(gputaskv1.RoleCompletions, c),
			role(gputaskv1.RoleRunning, r), role(gputaskv1.RoleWaiting, w),
			role(gputaskv1.RoleTTFTPercentile, ttft), role(gputaskv1.RoleInterTokenLatency, itl),
			role(gputaskv1.RolePromptTokens, prompt), role(gputaskv1.RoleGenerationTokens, gen),
			role(gputaskv1.RoleKVCacheUsage, kv)}
		if arrivalsRead {
			in.Metrics = append(in.Metrics, role(gputaskv1.RoleArrivals, a))
		}
		if genMedian > 0 {
			in.Metrics = append(in.Metrics, role(gputaskv1.RoleGenerationTokensMedian, genMedian))
		}
		if promptMedian > 0 {
			in.Metrics = append(in.Metrics, role(gputaskv1.RolePromptTokensMedian, promptMedian))
		}
		before := in
		d := Decide(in)
		o := d.SLO
		if o == nil {
			t.Fatalf("no SLO outcome: %s", d.Message)
		}
		if math.IsNaN(o.Expected) || d.Desired < 0 {
			t.Fatalf("expected %v, count %d: %s", o.Expected, d.Desired, d.Message)
		}
		if o.service == 0 {
			return // no service time yet: sized by the requests in the pool (TestSLONoRunaway)
		}
		s0, _ := before.Queue.Little.ServiceTime()
		shat := max(s0, r/max(c, a/2, 1/ServiceTimeWindow.Seconds()))
		if !arrivalsRead {
			shat = max(s0, r/max(c, 1/ServiceTimeWindow.Seconds()))
			a = derivedArrivalsBound(before.Queue.Rates, before.Now, c, r+w)
		}
		if o.service > shat*(1+1e-9) {
			t.Fatalf("service time %v s, above the %v s the readings allow", o.service, shat)
		}
		var h float64
		for _, b := range d.Queue.Rises.Buckets {
			h = max(h, b.Rise)
		}
		startup := max(before.Startup, before.Interval, time.Second).Seconds()
		rate := (2*a + h + (w+2*a*startup)/(BacklogClearing*startup)) * queueing.MaxCorrection
		if o.Expected > rate*(1+1e-9) {
			t.Fatalf("expected %v/s, above the %v/s the readings allow: %s", o.Expected, rate, d.Message)
		}
		slots := max(o.Slots, 1)
		slo := normalize(before).Policy.SLO
		model := queueing.Model{ServiceTime: shat, Slots: slots, Ca2: o.Ca2, Cs2: slo.ServiceVariability}
		that, _ := model.Tasks(rate, queueing.SLO{Wait: o.objective, Percentile: slo.Percentile}, MaxSLOTasks)
		pool := ceilSat((r + w) / float64(slots))
		bound := max(before.Current, pool, that)
		// N̂: the ITL with half the target to spare, at the context read.
		m := engineModel(withRoleReadings(before))
		half := slo.ITL / 2
		batch := 0
		for b := 1; b <= maxBatch && m.ITL(b, max(o.Context, 0)) <= half; b++ {
			batch = b
		}
		if batch == 0 {
			return // one sequence alone is over half the target: no N̂ to bound by
		}
		n := ceilSat(rate * shat / float64(batch))
		if p := m.PrefillTokensPerSecond(); p > 0 {
			n = max(n, ceilSat(3*expectedPromptTokens(withRoleReadings(before), o)/p))
		}
		if mix, ok := outputMixOf(withRoleReadings(before), o); ok {
			// M̂: each request of the mix reached by a prompt at most.
			var gaps float64
			for _, g := range mix.gaps {
				gaps += g
			}
			var prefill float64
			if e, p := withRoleReadings(before).Engine, m.PrefillTokensPerSecond(); p > 0 && e.PromptTokens > 0 {
				prefill = e.PromptTokens / servedRate(o) / p
			}
			q := 1 - slo.Percentile/100
			n = max(n, ceilSat(rate*(gaps/mixPoints*slo.ITL.Seconds()+prefill)/q))
		}
		if bound = addSat(max(bound, n), 1); d.Desired > bound {
			t.Fatalf("%d tasks from %d, above the bound of %d (model %d, ITL %d at %d a task, pool %d; %v/s at %v s): %s",
				d.Desired, before.Current, bound, that, n, batch, pool, rate, shat, d.Message)
		}
	})
}

// derivedArrivalsBound is the most arrivals that the completions c and the
// pool's r+w allow, given the rates derived before now: the largest of
// them, or the completions plus the pool's growth from the fewest in the
// pool before over the time since the last reading.
func derivedArrivalsBound(rates []RateSample, now time.Time, c, inPool float64) float64 {
	if len(rates) == 0 {
		return c
	}
	fewest, most := math.Inf(1), 0.0
	for _, s := range rates {
		fewest, most = min(fewest, s.InPool), max(most, s.Rate, s.Recent, s.OverService)
	}
	return max(most, c+max(inPool-fewest, 0)/now.Sub(rates[len(rates)-1].Time).Seconds())
}
