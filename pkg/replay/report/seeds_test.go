package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gputask/gputask-controller/pkg/replay/sim"
)

// Over the seeds a table gives each figure's mean, minimum and maximum,
// and on how many seeds a row met the SLO.
func TestSummarizeSeeds(t *testing.T) {
	run := func(hours, ttft float64, meets bool, share float64) []Report {
		return []Report{{Trace: "flash", SLOTargets: sim.SLOTargets{TTFT: 2 * time.Second}, Policies: []sim.Result{
			{Name: "ours", GPUHours: hours, TTFTP95: ttft, MeetsSLO: meets, FailedRequests: int(hours) % 3,
				Attainment: []sim.Attainment{{Target: sim.TargetTTFT, Limit: 2, Share: share}}},
		}}}
	}
	tables := SummarizeSeeds([][]Report{run(10, 1, true, 0.96), run(14, 3, false, 0.90), run(12, 2, true, 0.99)})
	if len(tables) != 1 || len(tables[0].Rows) != 1 {
		t.Fatalf("tables %+v", tables)
	}
	r := tables[0].Rows[0]
	if r.GPUHours != (Spread{Mean: 12, Min: 10, Max: 14}) || r.TTFTP95 != (Spread{Mean: 2, Min: 1, Max: 3}) {
		t.Errorf("GPU-h %+v, TTFT p95 %+v; want 12 [10–14] and 2 [1–3]", r.GPUHours, r.TTFTP95)
	}
	if a := r.Attainment[sim.TargetTTFT]; a.Min != 0.90 || a.Max != 0.99 || a.Mean < 0.95-1e-9 || a.Mean > 0.95+1e-9 {
		t.Errorf("TTFT attainment %+v, want 95 %% [90–99]", a)
	}
	if r.MeetsSeeds != 2 || r.Seeds != 3 || r.Lost != (Spread{Mean: 1, Min: 0, Max: 2}) {
		t.Errorf("meets on %d of %d seeds, lost %+v; want 2 of 3 and 1 [0–2]", r.MeetsSeeds, r.Seeds, r.Lost)
	}
	var b bytes.Buffer
	if err := tables[0].WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"12.0 [10.0–14.0]", "2.00s [1.00s–3.00s]", "95.00% [90.00–99.00]", "2/3 seeds", "TTFT≤2s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}
