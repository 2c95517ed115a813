package replay

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/gputask/gputask-controller/pkg/replay/baseline"
	"github.com/gputask/gputask-controller/pkg/replay/report"
	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// PolicyHPABest is the HPA at the fixed target that, in hindsight,
// spends the fewest GPU-hours on a trace while meeting the SLO there,
// searched for each trace on its own: the strongest honest baseline for a
// fixed-target autoscaler whose operator tuned it to that traffic.
// PolicyHPABestOne is the HPA at the one target that does so over all the
// traces of the run: what one setting for every workload achieves.
const (
	PolicyHPABest    = "hpa-best"
	PolicyHPABestOne = "hpa-best-one"
)

// HPABestTargets are the targets the search tries: 0.30 to 1.50 by 0.05.
func HPABestTargets() []float64 {
	var out []float64
	for i := 30; i <= 150; i += 5 {
		out = append(out, float64(i)/100)
	}
	return out
}

// targetRange names the searched targets.
func targetRange() string {
	t := HPABestTargets()
	return fmt.Sprintf("%.2f-%.2f", t[0], t[len(t)-1])
}

// NamedTrace is one trace of a run over several.
type NamedTrace struct {
	Name  string
	Trace workload.Trace
}

// TargetTrial is the hpa row at one target over some traces.
type TargetTrial struct {
	Target float64 `json:"target"`
	// GPUHours is summed over the traces.
	GPUHours float64 `json:"gpu_hours"`
	// WorstAttainment is the lowest share of requests within a stated
	// target (lost ones count as misses) over the traces.
	WorstAttainment float64 `json:"worst_slo_attainment"`
	// MeetsSLO is whether every stated target holds at the SLO's
	// percentile on every trace.
	MeetsSLO bool `json:"meets_slo"`
}

// HPABest is the outcome of the search: the one target for all the
// traces, and each trace's own.
type HPABest struct {
	TargetTrial
	// Trials are every target tried over all the traces, in order.
	Trials []TargetTrial `json:"trials"`
	// PerTrace is each trace's own best target, by the traces' order.
	PerTrace []TargetTrial `json:"per_trace"`
	// Names are the traces', by the same order.
	Names []string `json:"traces"`

	// rows are the hpa row's results at each target (by HPABestTargets'
	// index) on each trace, which the hpa-best rows are.
	rows [][]sim.Result
}

// Summary says which targets were chosen and why.
func (b HPABest) Summary(traces int) string {
	var s string
	if b.MeetsSLO {
		s = fmt.Sprintf("hpa-best-one: target %.2f, the fewest GPU-hours (%.1f over %d traces) of the targets %s that meet the SLO on every trace",
			b.Target, b.GPUHours, traces, targetRange())
	} else {
		s = fmt.Sprintf("hpa-best-one: no target of %s meets the SLO on every trace; target %.2f has the highest worst-trace SLO attainment (%.2f%%, %.1f GPU-hours over %d traces)",
			targetRange(), b.Target, 100*b.WorstAttainment, b.GPUHours, traces)
	}
	var per []string
	for i, t := range b.PerTrace {
		note := ""
		if !t.MeetsSLO {
			note = fmt.Sprintf(" (none meets the SLO; the highest attainment, %.2f%%)", 100*t.WorstAttainment)
		}
		per = append(per, fmt.Sprintf("%s %.2f%s", b.Names[i], t.Target, note))
	}
	return s + "\nhpa-best, per trace: " + strings.Join(per, ", ")
}

// SearchHPATarget runs the hpa row of c (same behavior, grace, startup
// and metric source) at each of HPABestTargets on every trace. For the
// traces together it picks the target with the fewest GPU-hours summed
// over them among those that meet the SLO on every trace, and for each
// trace the one with the fewest GPU-hours among those that meet it there;
// where none does, the one with the highest worst attainment (then the
// fewest GPU-hours).
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
	results := make([][]sim.Result, len(targets))
	for i := range results {
		results[i] = make([]sim.Result, len(traces))
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
				results[j.target][j.trace] = cc.playHPA(traces[j.trace].Trace, baseline.PolicyHPA)
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

	names := make([]string, len(traces))
	for k, tr := range traces {
		names[k] = tr.Name
	}
	return chooseTargets(targets, names, results), nil
}

// chooseTargets picks, from the hpa row's results at each target (by
// index) on each trace, the one target for all the traces and each
// trace's own.
func chooseTargets(targets []float64, names []string, results [][]sim.Result) HPABest {
	best := HPABest{rows: results, Names: names}
	trial := func(i int, rs []sim.Result) TargetTrial {
		t := TargetTrial{Target: targets[i], WorstAttainment: math.Inf(1), MeetsSLO: true}
		for _, r := range rs {
			t.GPUHours += r.GPUHours
			t.WorstAttainment = min(t.WorstAttainment, r.SLOAttainment)
			t.MeetsSLO = t.MeetsSLO && r.MeetsSLO
		}
		return t
	}
	for i := range targets {
		best.Trials = append(best.Trials, trial(i, results[i]))
	}
	best.TargetTrial = slices.MinFunc(best.Trials, betterTrial)
	for k := range names {
		var trials []TargetTrial
		for i := range targets {
			trials = append(trials, trial(i, results[i][k:k+1]))
		}
		best.PerTrace = append(best.PerTrace, slices.MinFunc(trials, betterTrial))
	}
	return best
}

// rowsFor are trace k's hpa-best and hpa-best-one rows, from the search.
func (b HPABest) rowsFor(k int) (perTrace, one sim.Result) {
	index := func(target float64) int {
		return slices.IndexFunc(b.Trials, func(t TargetTrial) bool { return math.Abs(t.Target-target) < 1e-9 })
	}
	perTrace = b.rows[index(b.PerTrace[k].Target)][k]
	perTrace.Name, perTrace.Note = PolicyHPABest, fmt.Sprintf("target %.2f", b.PerTrace[k].Target)
	one = b.rows[index(b.Target)][k]
	one.Name, one.Note = PolicyHPABestOne, fmt.Sprintf("target %.2f", b.Target)
	return perTrace, one
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
func (c Config) playHPA(tr workload.Trace, name string) sim.Result {
	if c.SampleEvery <= 0 {
		c.SampleEvery = defaultSampleEvery(tr)
	}
	cfg := c.hpaConfig(tr)
	cfg.Name = name
	return sim.Play(c.newPool(tr), baseline.NewHPA(cfg), c.playOptions())
}

// RunTraces replays every trace under the config's policies. With
// hpa-best or hpa-best-one among them, it first searches the targets
// over all the traces (SearchHPATarget), whose runs are those rows.
func RunTraces(traces []NamedTrace, c Config) ([]report.Report, *HPABest, error) {
	var best *HPABest
	if slices.Contains(c.Policies, PolicyHPABest) || slices.Contains(c.Policies, PolicyHPABestOne) {
		b, err := SearchHPATarget(traces, c)
		if err != nil {
			return nil, nil, err
		}
		best = &b
	}
	var reports []report.Report
	for k, t := range traces {
		c.Name = t.Name
		if best != nil {
			perTrace, one := best.rowsFor(k)
			c.hpaBest = &[2]sim.Result{perTrace, one}
		}
		r, err := Run(t.Trace, c)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", t.Name, err)
		}
		reports = append(reports, r)
	}
	return reports, best, nil
}
