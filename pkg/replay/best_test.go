package replay

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestHPABestTargets(t *testing.T) {
	got := HPABestTargets()
	if len(got) != 11 || got[0] != 0.5 || got[10] != 1 || math.Abs(got[3]-0.65) > 1e-12 {
		t.Errorf("targets %v, want 0.50 to 1.00 by 0.05", got)
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
		{"step", generatedTrace(t, ShapeStep, 90*time.Minute)},
		{"flash", generatedTrace(t, ShapeFlash, 90*time.Minute)},
	}
	c := Config{Concurrency: 8, Startup: 2 * time.Minute, Grace: 30 * time.Second, SLO: time.Hour}
	best, err := SearchHPATarget(traces, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(best.Trials) != 11 || !best.MeetsSLO {
		t.Fatalf("best %+v", best)
	}
	// The sum over the traces is that of the hpa row at this target on each.
	var sum float64
	for _, nt := range traces {
		cc := c
		cc.HPATarget = best.Target
		cc, _ = cc.withDefaults()
		sum += cc.playHPA(nt.Trace, PolicyHPA).GPUHours
	}
	if math.Abs(sum-best.GPUHours) > 1e-9 {
		t.Errorf("GPU-hours %v, want the sum %v", best.GPUHours, sum)
	}
	for _, tr := range best.Trials {
		if tr.MeetsSLO && tr.GPUHours < best.GPUHours {
			t.Errorf("target %v meets the SLO with fewer GPU-hours than the chosen %v", tr.Target, best.Target)
		}
	}
	if !strings.Contains(best.Summary(2), "the fewest GPU-hours") {
		t.Errorf("summary %q", best.Summary(2))
	}

}

// When no target meets the SLO on every trace, the summary says so and
// names the one with the highest worst-trace attainment.
func TestHPABestSummaryWithoutAnyMeeting(t *testing.T) {
	trials := []TargetTrial{{Target: 0.5, GPUHours: 90, WorstAttainment: 0.93}, {Target: 0.6, GPUHours: 80, WorstAttainment: 0.91}}
	best := HPABest{TargetTrial: slices.MinFunc(trials, betterTrial), Trials: trials}
	if got := best.Summary(4); best.Target != 0.5 || !strings.Contains(got, "no target of 0.50-1.00 meets the SLO on every trace; target 0.50") || !strings.Contains(got, "93.00%") {
		t.Errorf("summary %q", got)
	}
}

// Run and RunTraces play hpa-best at the searched target, as a row of
// each trace's report.
func TestRunTracesWithHPABest(t *testing.T) {
	traces := []NamedTrace{{"flash", generatedTrace(t, ShapeFlash, time.Hour)}}
	c := Config{Concurrency: 8, Startup: 2 * time.Minute, Policies: []string{PolicyHPA, PolicyHPABest}}
	reports, best, err := RunTraces(traces, c)
	if err != nil {
		t.Fatal(err)
	}
	if best == nil || len(reports) != 1 || len(reports[0].Policies) != 2 || reports[0].Policies[1].Name != PolicyHPABest {
		t.Fatalf("reports %+v, best %v", reports, best)
	}
	if got := reports[0].Policies[1].GPUHours; math.Abs(got-best.GPUHours) > 1e-9 {
		t.Errorf("hpa-best row spends %v, the search said %v", got, best.GPUHours)
	}
	if _, err := (Config{Concurrency: 8, Set: DefaultSet()}).policy(PolicyHPABest, traces[0].Trace); err == nil {
		t.Error("hpa-best without a searched target: no error")
	}
}
