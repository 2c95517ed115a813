package replay

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
)

// PolicyHPABest is the HPA at the fixed target that, in hindsight, spends
// the fewest GPU-hours over the traces while meeting the SLO on each: the
// strongest honest baseline for any fixed-target autoscaler.
const PolicyHPABest = "hpa-best"

// HPABestTargets are the targets hpa-best tries: 0.50 to 1.00 by 0.05.
func HPABestTargets() []float64 {
	var out []float64
	for i := 50; i <= 100; i += 5 {
		out = append(out, float64(i)/100)
	}
	return out
}

// NamedTrace is one trace of a run over several.
type NamedTrace struct {
	Name  string
	Trace Trace
}

// TargetTrial is the hpa row at one target over every trace.
type TargetTrial struct {
	Target float64 `json:"target"`
	// GPUHours is summed over the traces.
	GPUHours float64 `json:"gpu_hours"`
	// WorstAttainment is the lowest share of requests within the SLO (lost
	// ones count as misses) over the traces.
	WorstAttainment float64 `json:"worst_slo_attainment"`
	// MeetsSLO is whether the p95 wait is within the SLO on every trace,
	// lost requests counted as misses: at least 95 % within it.
	MeetsSLO bool `json:"meets_slo"`
}

// HPABest is the outcome of the search.
type HPABest struct {
	TargetTrial
	// Trials are every target tried, in order.
	Trials []TargetTrial `json:"trials"`
}

// Summary says which target was chosen and why.
func (b HPABest) Summary(traces int) string {
	if b.MeetsSLO {
		return fmt.Sprintf("hpa-best: target %.2f, the fewest GPU-hours (%.1f over %d traces) of the targets 0.50-1.00 whose p95 wait meets the SLO on every trace",
			b.Target, b.GPUHours, traces)
	}
	return fmt.Sprintf("hpa-best: no target of 0.50-1.00 meets the SLO on every trace; target %.2f has the highest worst-trace SLO attainment (%.2f%%, %.1f GPU-hours over %d traces)",
		b.Target, 100*b.WorstAttainment, b.GPUHours, traces)
}

// sloShare is the share of requests within the SLO that a p95 wait within
// it needs.
const sloShare = 0.95

// SearchHPATarget runs the hpa row of c (same behavior, grace, startup
// and metric source) at each of HPABestTargets over every trace, and picks
// the target with the fewest GPU-hours summed over the traces among those
// that meet the SLO on every trace; if none does, the one with the highest
// worst-trace attainment (then the fewest GPU-hours).
func SearchHPATarget(traces []NamedTrace, c Config) (HPABest, error) {
	if len(traces) == 0 {
		return HPABest{}, errors.New("no trace to search the HPA target on")
	}
	c, err := c.withDefaults()
	if err != nil {
		return HPABest{}, err
	}
	for _, t := range traces {
		if err := c.checkServing(t.Trace); err != nil {
			return HPABest{}, fmt.Errorf("%s: %w", t.Name, err)
		}
	}
	targets := HPABestTargets()
	type job struct{ target, trace int }
	results := make([][]Result, len(targets))
	for i := range results {
		results[i] = make([]Result, len(traces))
	}
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range max(runtime.GOMAXPROCS(0), 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				cc := c
				cc.HPATarget = targets[j.target]
				results[j.target][j.trace] = cc.playHPA(traces[j.trace].Trace, PolicyHPA)
			}
		}()
	}
	for i := range targets {
		for k := range traces {
			jobs <- job{i, k}
		}
	}
	close(jobs)
	wg.Wait()

	var best HPABest
	for i, target := range targets {
		trial := TargetTrial{Target: target, WorstAttainment: math.Inf(1), MeetsSLO: true}
		for _, r := range results[i] {
			trial.GPUHours += r.GPUHours
			trial.WorstAttainment = min(trial.WorstAttainment, r.SLOAttainment)
			trial.MeetsSLO = trial.MeetsSLO && r.MeetsSLO
		}
		best.Trials = append(best.Trials, trial)
	}
	best.TargetTrial = slices.MinFunc(best.Trials, betterTrial)
	return best, nil
}

// betterTrial orders trials: meeting the SLO first; among those, fewer
// GPU-hours; among the others, a higher worst-trace attainment, then fewer
// GPU-hours; then the lower target.
func betterTrial(a, b TargetTrial) int {
	switch {
	case a.MeetsSLO != b.MeetsSLO:
		if a.MeetsSLO {
			return -1
		}
		return 1
	case !a.MeetsSLO && a.WorstAttainment != b.WorstAttainment:
		if a.WorstAttainment > b.WorstAttainment {
			return -1
		}
		return 1
	case a.GPUHours != b.GPUHours:
		if a.GPUHours < b.GPUHours {
			return -1
		}
		return 1
	}
	if a.Target < b.Target {
		return -1
	}
	return 1
}

// playHPA plays the hpa row of c on tr, named name.
func (c Config) playHPA(tr Trace, name string) Result {
	if c.SampleEvery <= 0 {
		c.SampleEvery = defaultSampleEvery(tr)
	}
	pol, _ := c.policy(PolicyHPA, tr)
	pol.(*HPA).name = name
	return Play(c.newPool(tr), pol, c.playOptions())
}

// RunTraces replays every trace under the config's policies. With
// hpa-best among them, it first searches the target over all the traces
// (SearchHPATarget) and plays it on each.
func RunTraces(traces []NamedTrace, c Config) ([]Report, *HPABest, error) {
	var best *HPABest
	if slices.Contains(c.Policies, PolicyHPABest) {
		b, err := SearchHPATarget(traces, c)
		if err != nil {
			return nil, nil, err
		}
		best = &b
		c.hpaBestTarget = b.Target
	}
	var reports []Report
	for _, t := range traces {
		c.Name = t.Name
		r, err := Run(t.Trace, c)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", t.Name, err)
		}
		reports = append(reports, r)
	}
	return reports, best, nil
}
