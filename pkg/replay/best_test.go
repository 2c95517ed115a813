package replay

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gputask/gputask-controller/pkg/replay/baseline"
	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

func TestHPABestTargets(t *testing.T) {
	got := HPABestTargets()
	if len(got) != 25 || got[0] != 0.3 || got[24] != 1.5 || math.Abs(got[7]-0.65) > 1e-12 {
		t.Errorf("targets %v, want 0.30 to 1.50 by 0.05", got)
	}
}

// betterTrial: a target that meets the SLO everywhere beats one that
// does not; among those, fewer GPU-hours win; among those that do not,
// the higher worst-trace attainment wins.
func TestBetterTrial(t *testing.T) {
	meets := func(target, hours float64) TargetTrial {
		return TargetTrial{Target: target, GPUHours: hours, WorstAttainment: 0.99, MeetsSLO: true}
	}
	misses := func(target, hours, att float64) TargetTrial {
		return TargetTrial{Target: target, GPUHours: hours, WorstAttainment: att}
	}
	for _, tc := range []struct {
		name string
		a, b TargetTrial
		want int
	}{
		{"meeting beats cheaper missing", meets(0.5, 100), misses(0.9, 50, 0.94), -1},
		{"cheaper among meeting", meets(0.7, 80), meets(0.6, 90), -1},
		{"higher attainment among missing", misses(0.5, 100, 0.94), misses(0.6, 90, 0.93), -1},
		{"cheaper at equal attainment", misses(0.6, 90, 0.93), misses(0.5, 100, 0.93), -1},
		{"lower target on a tie", meets(0.5, 90), meets(0.6, 90), -1},
	} {
		if got := betterTrial(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.name, got, tc.want)
		}
		if got := betterTrial(tc.b, tc.a); got != -tc.want {
			t.Errorf("%s reversed: got %d, want %d", tc.name, got, -tc.want)
		}
	}
}

// SearchHPATarget tries every target over every trace, sums GPU-hours,
// and picks the cheapest target that meets the SLO on each trace; a
// higher target never costs more here, so with a loose SLO it is the
// highest that meets it, and with an impossible SLO the search says so.
func TestSearchHPATarget(t *testing.T) {
	traces := []NamedTrace{
		{"step", generatedTrace(t, workload.ShapeStep, 90*time.Minute)},
		{"flash", generatedTrace(t, workload.ShapeFlash, 90*time.Minute)},
	}
	c := Config{Concurrency: 8, Startup: 2 * time.Minute, Grace: 30 * time.Second, SLO: time.Hour}
	best, err := SearchHPATarget(traces, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(best.Trials) != 25 || !best.MeetsSLO || len(best.PerTrace) != 2 {
		t.Fatalf("best %+v", best)
	}
	// The sum over the traces is that of the hpa row at this target on each.
	var sum float64
	for _, nt := range traces {
		cc := c
		cc.HPATarget = best.Target
		cc, _ = cc.withDefaults()
		sum += cc.playHPA(nt.Trace, baseline.PolicyHPA).GPUHours
	}
	if math.Abs(sum-best.GPUHours) > 1e-9 {
		t.Errorf("GPU-hours %v, want the sum %v", best.GPUHours, sum)
	}
	for _, tr := range best.Trials {
		if tr.MeetsSLO && tr.GPUHours < best.GPUHours {
			t.Errorf("target %v meets the SLO with fewer GPU-hours than the chosen %v", tr.Target, best.Target)
		}
	}
	if !strings.Contains(best.Summary(2), "the fewest GPU-hours") || !strings.Contains(best.Summary(2), "hpa-best, per trace: step ") {
		t.Errorf("summary %q", best.Summary(2))
	}
	// Each trace's own target is the cheapest that meets the SLO there,
	// and never costs more on it than the one target for both.
	for k, nt := range traces {
		own := best.PerTrace[k]
		perTrace, one := best.rowsFor(k)
		if !own.MeetsSLO || perTrace.GPUHours != own.GPUHours || perTrace.GPUHours > one.GPUHours {
			t.Errorf("%s: own target %+v, rows %v and %v GPU-h", nt.Name, own, perTrace.GPUHours, one.GPUHours)
		}
		for i, target := range HPABestTargets() {
			r := best.rows[i][k]
			if r.MeetsSLO && r.GPUHours < own.GPUHours {
				t.Errorf("%s: target %v meets the SLO on %v GPU-h, below the chosen %v (%v)", nt.Name, target, r.GPUHours, own.Target, own.GPUHours)
			}
		}
	}

}

// When no target meets the SLO on every trace, the summary says so and
// names the one with the highest worst-trace attainment.
func TestHPABestSummaryWithoutAnyMeeting(t *testing.T) {
	trials := []TargetTrial{{Target: 0.5, GPUHours: 90, WorstAttainment: 0.93}, {Target: 0.6, GPUHours: 80, WorstAttainment: 0.91}}
	best := HPABest{TargetTrial: slices.MinFunc(trials, betterTrial), Trials: trials}
	if got := best.Summary(4); best.Target != 0.5 || !strings.Contains(got, "no target of 0.30-1.50 meets the SLO on every trace; target 0.50") || !strings.Contains(got, "93.00%") {
		t.Errorf("summary %q", got)
	}
}

// Run and RunTraces play hpa-best at the searched target, as a row of
// each trace's report.
func TestRunTracesWithHPABest(t *testing.T) {
	traces := []NamedTrace{{"flash", generatedTrace(t, workload.ShapeFlash, time.Hour)}}
	c := Config{Concurrency: 8, Startup: 2 * time.Minute, Policies: []string{baseline.PolicyHPA, PolicyHPABest, PolicyHPABestOne}}
	reports, best, err := RunTraces(traces, c)
	if err != nil {
		t.Fatal(err)
	}
	if best == nil || len(reports) != 1 || len(reports[0].Policies) != 3 || reports[0].Policies[1].Name != PolicyHPABest || reports[0].Policies[2].Name != PolicyHPABestOne {
		t.Fatalf("reports %+v, best %v", reports, best)
	}
	if got := reports[0].Policies[2].GPUHours; math.Abs(got-best.GPUHours) > 1e-9 {
		t.Errorf("hpa-best-one row spends %v, the search said %v", got, best.GPUHours)
	}
	if got := reports[0].Policies[1]; got.GPUHours != best.PerTrace[0].GPUHours || got.Note != fmt.Sprintf("target %.2f", best.PerTrace[0].Target) {
		t.Errorf("hpa-best row %+v, the search said %+v", got, best.PerTrace[0])
	}
	// Played again at its target, the row is what the search measured.
	cc := c
	cc.HPATarget = best.PerTrace[0].Target
	cc, _ = cc.withDefaults()
	if again := cc.playHPA(traces[0].Trace, baseline.PolicyHPA); again.GPUHours != reports[0].Policies[1].GPUHours {
		t.Errorf("hpa-best at %v played again spends %v, the row %v", cc.HPATarget, again.GPUHours, reports[0].Policies[1].GPUHours)
	}
}

// Each trace gets its own cheapest target that meets the SLO there, and
// hpa-best-one the cheapest that meets it on both: a smooth trace meets
// it at a high target, a bursty one only at a low one.
func TestChooseTargetsPerTraceAndOne(t *testing.T) {
	targets := []float64{0.5, 0.7, 0.9}
	r := func(hours float64, meets bool) sim.Result {
		a := 0.99
		if !meets {
			a = 0.90
		}
		return sim.Result{GPUHours: hours, MeetsSLO: meets, SLOAttainment: a}
	}
	// results[target][trace]: smooth, bursty.
	results := [][]sim.Result{
		{r(100, true), r(50, true)},
		{r(80, true), r(40, false)},
		{r(70, true), r(35, false)},
	}
	best := chooseTargets(targets, []string{"smooth", "bursty"}, results)
	if best.Target != 0.5 || !best.MeetsSLO || best.GPUHours != 150 {
		t.Errorf("one target %+v, want 0.50 (the only one meeting on both), 150 GPU-h", best.TargetTrial)
	}
	if best.PerTrace[0].Target != 0.9 || best.PerTrace[1].Target != 0.5 {
		t.Errorf("per trace %+v, want 0.90 for the smooth trace and 0.50 for the bursty one", best.PerTrace)
	}
	perTrace, one := best.rowsFor(0)
	if perTrace.GPUHours != 70 || one.GPUHours != 100 || perTrace.Name != PolicyHPABest || one.Name != PolicyHPABestOne || one.Note != "target 0.50" {
		t.Errorf("smooth trace's rows %+v and %+v", perTrace, one)
	}
	// With no target meeting it on a trace, that trace's highest
	// attainment wins.
	results[0][1] = r(50, false)
	results[0][1].SLOAttainment = 0.93
	best = chooseTargets(targets, []string{"smooth", "bursty"}, results)
	if best.PerTrace[1].Target != 0.5 || best.PerTrace[1].MeetsSLO {
		t.Errorf("bursty with no target meeting: %+v, want 0.50 (the highest attainment)", best.PerTrace[1])
	}
}
