package replay

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gputask/gputask-controller/pkg/replay/baseline"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// oracle-lag on a step: oracle-slo's schedule learned a start-up late
// misses the SLO at the step (the workers for it come a start-up after
// it), so the row meets it with a headroom or a lookback, the least of
// the grid at its lookback, and the run's row says which.
func TestOracleLagOnAStep(t *testing.T) {
	tr := generatedTrace(t, workload.ShapeStep, 4*time.Hour)
	c, err := Config{Concurrency: 8, Startup: 2 * time.Minute, Grace: 30 * time.Second, Policies: []string{baseline.PolicyOracleSLO, baseline.PolicyOracleLag}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	c.SampleEvery = defaultSampleEvery(tr)
	o := baseline.OracleLag{OracleSLO: c.oracleSLO()}
	counts := o.Schedule(tr)
	if got := o.Lag(); got != 2 {
		t.Fatalf("lag %d intervals, want 2 (a 2-minute start-up)", got)
	}
	late := o.PlayLagged(tr, counts, baseline.LagChoice{})
	if late.MeetsSLO {
		t.Errorf("the schedule a start-up late, no lookback or headroom, meets the SLO (%.2f%%): the step teaches nothing", 100*late.SLOAttainment)
	}
	best, choice, meets, tried := o.Search(tr, counts)
	if !meets || !best.MeetsSLO {
		t.Fatalf("no lookback and headroom of %d tried meets the SLO: best %+v at %.2f%%", tried, choice, 100*best.SLOAttainment)
	}
	if choice == (baseline.LagChoice{}) {
		t.Fatalf("chose no lookback and no headroom, which misses")
	}
	if i := slices.Index(baseline.OracleLagHeadrooms, choice.Headroom); i > 0 {
		less := baseline.LagChoice{Lookback: choice.Lookback, Headroom: baseline.OracleLagHeadrooms[i-1]}
		if r := o.PlayLagged(tr, counts, less); r.MeetsSLO && r.GPUHours <= best.GPUHours {
			t.Errorf("%+v meets the SLO on %.2f GPU-h, no more than the chosen %+v's %.2f", less, r.GPUHours, choice, best.GPUHours)
		}
	}
	if best.GPUHours <= late.GPUHours {
		t.Errorf("the row spends %.2f GPU-h, no more than the late schedule's %.2f that misses", best.GPUHours, late.GPUHours)
	}

	rep, err := Run(tr, c)
	if err != nil {
		t.Fatal(err)
	}
	row, ok := rep.Row(baseline.PolicyOracleLag)
	if !ok {
		t.Fatal("no oracle-lag row")
	}
	if row.GPUHours != best.GPUHours || !row.MeetsSLO || !strings.Contains(row.Note, "a start-up (2m0s) late") {
		t.Errorf("row %.2f GPU-h, meets %v, note %q; want the search's %.2f, meeting, its choice in the note", row.GPUHours, row.MeetsSLO, row.Note, best.GPUHours)
	}
	t.Logf("oracle-slo %.2f GPU-h; oracle-lag %.2f (%s); late alone %.2f at %.2f%%", rep.Policies[0].GPUHours, row.GPUHours, row.Note, late.GPUHours, 100*late.SLOAttainment)
}

// Where no lookback and headroom meets the SLO (a 1 ms TTFT), the row is
// the highest attainment tried, and its note says none met.
func TestOracleLagMeetingNone(t *testing.T) {
	tr := generatedTrace(t, workload.ShapeStep, time.Hour)
	c, err := Config{Concurrency: 8, Startup: 2 * time.Minute, Grace: 30 * time.Second, SLOTTFT: time.Millisecond}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	counts := slices.Repeat([]int32{2}, 61)
	row := baseline.OracleLag{OracleSLO: c.oracleSLO()}.Run(tr, counts)
	if row.MeetsSLO || !strings.Contains(row.Note, "none of") || !strings.Contains(row.Note, "the highest attainment") {
		t.Errorf("meets %v, note %q: want a miss that says none of those tried met", row.MeetsSLO, row.Note)
	}
}

// With start-ups drawn about their median, a worker oracle-lag-drawn asks
// for is Ready a draw after it is asked for, some before the interval it
// was asked for and some after, where oracle-lag's are Ready as it
// begins: at the same lookback and headroom the two play differently.
func TestOracleLagDrawnOnAStep(t *testing.T) {
	tr := generatedTrace(t, workload.ShapeStep, 4*time.Hour)
	c, err := Config{Concurrency: 8, Startup: 2 * time.Minute, StartupSigma: 0.3, Grace: 30 * time.Second}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	known := baseline.OracleLag{OracleSLO: c.oracleSLO()}
	counts := known.Schedule(tr)
	drawn := baseline.OracleLag{OracleSLO: c.oracleSLO(), Drawn: true}
	choice := baseline.LagChoice{Lookback: 2, Headroom: 0.1}
	k, d := known.PlayLagged(tr, counts, choice), drawn.PlayLagged(tr, counts, choice)
	if k.Name != baseline.PolicyOracleLag || d.Name != baseline.PolicyOracleLagDrawn {
		t.Errorf("rows %q and %q, want %q and %q", k.Name, d.Name, baseline.PolicyOracleLag, baseline.PolicyOracleLagDrawn)
	}
	if d.SLOAttainment == k.SLOAttainment {
		t.Errorf("at %+v both keep %.4f%% within the SLO: the drawn start-ups play as the known ones", choice, 100*d.SLOAttainment)
	}
	t.Logf("at %+v oracle-lag %.2f GPU-h at %.2f%%, oracle-lag-drawn %.2f at %.2f%%", choice, k.GPUHours, 100*k.SLOAttainment, d.GPUHours, 100*d.SLOAttainment)

	// A run that names it plays its row, noted as drawn.
	c.Policies = []string{baseline.PolicyOracleSLO, baseline.PolicyOracleLagDrawn}
	rep, err := Run(generatedTrace(t, workload.ShapeStep, time.Hour), c)
	if err != nil {
		t.Fatal(err)
	}
	row, ok := rep.Row(baseline.PolicyOracleLagDrawn)
	if !ok || !strings.Contains(row.Note, "start-ups drawn") {
		t.Errorf("oracle-lag-drawn row %v, note %q: want it, noted as drawn", ok, row.Note)
	}
	if _, ok := rep.Row(baseline.PolicyOracleLag); ok {
		t.Error("an oracle-lag row where the run did not name it")
	}
}
