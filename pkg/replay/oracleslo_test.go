package replay

import (
	"testing"
	"time"

	"github.com/gputask/gputask-controller/pkg/replay/baseline"
	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// On each synthetic trace, oracle-slo meets the SLO at or below the
// GPU-hours of every row that meets it, and no row is flagged below it.
// Ours and the baselines play as in make bench-autoscaling; the traces
// are short so that the test stays quick. Without the requests carried
// from one trial to the next (each trial from an empty pool) the schedule
// misses the SLO on the diurnal, step and flash traces.
func TestOracleSLOAtOrBelowEveryRowMeetingTheSLO(t *testing.T) {
	durations := map[string]time.Duration{workload.ShapeDiurnal: 6 * time.Hour, workload.ShapeBursty: 3 * time.Hour, workload.ShapeStep: 4 * time.Hour, workload.ShapeFlash: 2 * time.Hour}
	for _, shape := range workload.Shapes {
		t.Run(shape, func(t *testing.T) {
			tr := generatedTrace(t, shape, durations[shape])
			v, err := ParseVariant("proportional")
			if err != nil {
				t.Fatal(err)
			}
			rep, err := Run(tr, Config{Concurrency: 8, Startup: 2 * time.Minute, Grace: 30 * time.Second, Variants: []Variant{v}})
			if err != nil {
				t.Fatal(err)
			}
			bound, ok := rep.Row(baseline.PolicyOracleSLO)
			if !ok {
				t.Fatal("no oracle-slo row")
			}
			if !bound.MeetsSLO || bound.FailedRequests != 0 {
				t.Errorf("oracle-slo misses the SLO: %.2f%% within it, %d lost", 100*bound.SLOAttainment, bound.FailedRequests)
			}
			meeting := 0
			for _, r := range rep.Policies {
				if !r.MeetsSLO || r.Name == baseline.PolicyOracleSLO {
					continue
				}
				meeting++
				if r.GPUHours < bound.GPUHours || r.BelowOracleSLO {
					t.Errorf("%s meets the SLO on %.2f GPU-h, below oracle-slo's %.2f", r.Name, r.GPUHours, bound.GPUHours)
				}
			}
			if meeting < 3 {
				t.Errorf("only %d rows meet the SLO: the comparison checks little", meeting)
			}
			oracle, _ := rep.Oracle()
			t.Logf("oracle-slo %.1f GPU-h (zero-wait oracle %.1f), %d rows meeting the SLO", bound.GPUHours, oracle.GPUHours, meeting)
		})
	}
}

// A row that meets the SLO on fewer GPU-hours than oracle-slo is
// flagged, in every table; one that misses it, or costs more, is not.
func TestFlagBelowOracleSLO(t *testing.T) {
	rows := []sim.Result{
		{Name: "cheap", GPUHours: 9, MeetsSLO: true},
		{Name: "missing", GPUHours: 5, MeetsSLO: false},
		{Name: "dear", GPUHours: 11, MeetsSLO: true},
		{Name: baseline.PolicyOracleSLO, GPUHours: 10, MeetsSLO: true},
	}
	flagBelowOracleSLO(rows)
	for i, want := range []bool{true, false, false, false} {
		if rows[i].BelowOracleSLO != want {
			t.Errorf("%s flagged %v, want %v", rows[i].Name, rows[i].BelowOracleSLO, want)
		}
	}
}

// oracle-slo replays the pool itself, so it holds on batched serving too,
// where a worker run fuller serves every request more slowly: its
// schedule meets a TTFT and ITL SLO there (7 ms between tokens: at most
// about four sequences a worker), on fewer GPU-hours than the static pool
// that meets it.
func TestOracleSLOOnBatchedServing(t *testing.T) {
	tr := generatedTrace(t, workload.ShapeFlash, 90*time.Minute)
	rep, err := Run(tr, Config{Concurrency: 8, Startup: 2 * time.Minute, Batched: &sim.DefaultITL,
		SLOTTFT: 2 * time.Second, SLOITL: 7 * time.Millisecond, Policies: []string{baseline.PolicyStatic, baseline.PolicyOracleSLO}})
	if err != nil {
		t.Fatal(err)
	}
	static, bound := rep.Policies[0], rep.Policies[1]
	t.Logf("static %.1f GPU-h (meets %v, ITL p95 %.4fs), oracle-slo %.1f GPU-h (ITL p95 %.4fs)", static.GPUHours, static.MeetsSLO, static.ITLP95, bound.GPUHours, bound.ITLP95)
	if !static.MeetsSLO || !bound.MeetsSLO || bound.GPUHours >= static.GPUHours {
		t.Errorf("static %.1f GPU-h (meets %v), oracle-slo %.1f GPU-h (meets %v, ITL p95 %.4fs)", static.GPUHours, static.MeetsSLO, bound.GPUHours, bound.MeetsSLO, bound.ITLP95)
	}
	if bound.ITLP95 <= sim.DefaultITL.At(1).Seconds() {
		t.Errorf("ITL p95 %.4fs: no batch ever ran, the test checks nothing", bound.ITLP95)
	}
}
