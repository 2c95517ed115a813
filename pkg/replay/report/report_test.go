package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gputask/gputask-controller/pkg/replay/sim"
)

// Every table names each stated target's attainment and says whether the
// row meets the SLO, flagging one below oracle-slo.
func TestTablesShowTargets(t *testing.T) {
	r := Report{SLOTargets: sim.SLOTargets{TTFT: 2 * time.Second, ITL: 50 * time.Millisecond}, Policies: []sim.Result{
		{Name: "a", MeetsSLO: true, BelowOracleSLO: true, Attainment: []sim.Attainment{{Target: sim.TargetTTFT, Limit: 2, Share: 0.97}, {Target: sim.TargetITL, Limit: 0.05, Share: 0.99}}},
		{Name: "b", Attainment: []sim.Attainment{{Target: sim.TargetTTFT, Limit: 2, Share: 0.90}, {Target: sim.TargetITL, Limit: 0.05, Share: 0.99}}},
	}}
	for name, write := range map[string]func(*bytes.Buffer) error{
		"text":     func(b *bytes.Buffer) error { return r.WriteTable(b) },
		"markdown": func(b *bytes.Buffer) error { return r.WriteMarkdown(b) },
	} {
		var b bytes.Buffer
		if err := write(&b); err != nil {
			t.Fatal(err)
		}
		s := b.String()
		for _, want := range []string{"TTFT≤2s", "ITL≤50ms", "meets p95", "97.00%", "90.00%", "yes, below oracle-slo", "TTFT p99", "ITL p95"} {
			if !strings.Contains(s, want) {
				t.Errorf("%s table lacks %q:\n%s", name, want, s)
			}
		}
		if strings.Contains(s, "wait≤") {
			t.Errorf("%s table shows a wait target nobody stated:\n%s", name, s)
		}
	}
}
