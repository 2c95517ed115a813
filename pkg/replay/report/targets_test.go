package report

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/gputask/gputask-controller/pkg/replay/baseline"
	"github.com/gputask/gputask-controller/pkg/replay/sim"
)

// seedRow is a row over seeds: GPU-hours, meets on meets of seeds, lost
// at most on a seed, and its mean peak.
func targetRow(name string, hours float64, meets, seeds int, lost, peak float64) SeedRow {
	return SeedRow{Name: name, Seeds: seeds, MeetsSeeds: meets, GPUHours: Spread{Mean: hours, Min: hours, Max: hours},
		Lost: Spread{Mean: lost / 2, Max: lost}, Peak: Spread{Mean: peak, Min: peak - 1, Max: peak + 1}}
}

// allRows are every row of a trace that meets each target: ours at 10
// GPU-h on 2 of 2 seeds, peaking at 5 against a bound of 1.5 × 4 + 2.
func allRows(name string) SeedTable {
	return SeedTable{Trace: name, Seeds: 2, Rows: []SeedRow{
		targetRow(rowOurs, 10, 2, 2, 0, 5),
		targetRow(rowHPABest, 12, 2, 2, 3, 9),
		targetRow(rowHPABestOne, 20, 2, 2, 0, 9),
		targetRow(baseline.PolicyOracleSLO, 9, 2, 2, 0, 6),
		targetRow(baseline.PolicyOracle, 5, 2, 2, 0, 4),
	}}
}

// with is table with the row named name replaced by r, or dropped if r
// has no name.
func with(table SeedTable, name string, r SeedRow) SeedTable {
	rows := slices.Clone(table.Rows)
	i := slices.IndexFunc(rows, func(r SeedRow) bool { return r.Name == name })
	if r.Name == "" {
		table.Rows = slices.Delete(rows, i, i+1)
	} else {
		rows[i], table.Rows = r, rows
	}
	return table
}

// The verdicts, in order: the SLO, lost requests, GPU-h to hpa-best,
// hpa-best-one and oracle-slo, and the peak.
func TestTargetsOf(t *testing.T) {
	none := SeedRow{}
	for _, tc := range []struct {
		name   string
		tables []SeedTable
		want   [6]string
		lines  []string
	}{
		{"every target met", []SeedTable{allRows("a"), allRows("b")},
			[6]string{Met, Met, Met, Met, Met, Met},
			[]string{"GPU-h ≤ 1.00× hpa-best, summed: met (0.83×)", "GPU-h ≤ 0.85× hpa-best-one, summed: met (0.50×)", "GPU-h ≤ 1.15× oracle-slo, summed: met (1.11×)", "peak ≤ 1.5× oracle's + 2 on every trace: met"}},
		{"the ratio of the sums, the traces over the bound named",
			[]SeedTable{with(allRows("a"), rowHPABest, targetRow(rowHPABest, 5, 2, 2, 0, 9)), with(allRows("b"), rowHPABest, targetRow(rowHPABest, 100, 2, 2, 0, 9))},
			[6]string{Met, Met, Met, Met, Met, Met},
			[]string{"GPU-h ≤ 1.00× hpa-best, summed: met (0.19×); not on a (2.00×)"}},
		{"a bound is within it", []SeedTable{with(allRows("a"), rowHPABestOne, targetRow(rowHPABestOne, 10/0.85, 2, 2, 0, 9))},
			[6]string{Met, Met, Met, Met, Met, Met}, []string{"hpa-best-one, summed: met (0.85×)"}},
		{"over oracle-slo", []SeedTable{allRows("a"), with(allRows("b"), baseline.PolicyOracleSLO, targetRow(baseline.PolicyOracleSLO, 5, 2, 2, 0, 6))},
			[6]string{Met, Met, Met, Met, NotMet, Met}, []string{"oracle-slo, summed: not met (1.43×); not on b (2.00×)"}},
		{"the SLO missed on a seed", []SeedTable{allRows("a"), with(allRows("flash"), rowOurs, targetRow(rowOurs, 10, 1, 2, 0, 5))},
			[6]string{NotMet, Met, Met, Met, Met, Met}, []string{"meets the SLO on every trace and seed: not met; not on flash (met on 1/2 seeds)"}},
		{"the SLO missed on the one seed", []SeedTable{with(allRows("a"), rowOurs, targetRow(rowOurs, 10, 0, 1, 0, 5))},
			[6]string{NotMet, Met, Met, Met, Met, Met}, []string{"not on a (missed)"}},
		{"requests lost", []SeedTable{with(allRows("a"), rowOurs, targetRow(rowOurs, 10, 2, 2, 3, 5))},
			[6]string{Met, NotMet, Met, Met, Met, Met}, []string{"no request lost: not met; not on a (3 lost)"}},
		{"the mean peak over the bound", []SeedTable{allRows("a"), with(allRows("b"), rowOurs, targetRow(rowOurs, 10, 2, 2, 0, 8.5))},
			[6]string{Met, Met, Met, Met, Met, NotMet}, []string{"not on b (8.5 > 8.0)"}},
		{"the mean peak at the bound", []SeedTable{with(allRows("a"), rowOurs, targetRow(rowOurs, 10, 2, 2, 0, 8))},
			[6]string{Met, Met, Met, Met, Met, Met}, nil},
		{"the mean peak at a bound of fifths", []SeedTable{with(with(allRows("a"), baseline.PolicyOracle, targetRow(baseline.PolicyOracle, 5, 2, 5, 0, 28.0/5)), rowOurs, targetRow(rowOurs, 10, 5, 5, 0, 52.0/5))},
			[6]string{Met, Met, Met, Met, Met, Met}, nil},
		{"--policies ours,oracle", []SeedTable{with(with(with(allRows("a"), rowHPABest, none), rowHPABestOne, none), baseline.PolicyOracleSLO, none)},
			[6]string{Met, Met, NotMeasured, NotMeasured, NotMeasured, Met}, []string{"GPU-h ≤ 1.00× hpa-best, summed: not measured"}},
		{"an anchor on one trace of two", []SeedTable{allRows("a"), with(allRows("b"), rowHPABest, none)},
			[6]string{Met, Met, NotMeasured, Met, Met, Met}, nil},
		{"no oracle", []SeedTable{with(allRows("a"), baseline.PolicyOracle, none)},
			[6]string{Met, Met, Met, Met, Met, NotMeasured}, nil},
		{"an anchor of no GPU-hours", []SeedTable{with(allRows("a"), baseline.PolicyOracleSLO, targetRow(baseline.PolicyOracleSLO, 0, 2, 2, 0, 0))},
			[6]string{Met, Met, Met, Met, NotMeasured, Met}, nil},
		{"ours did not run", []SeedTable{with(allRows("a"), rowOurs, none)},
			[6]string{NotMeasured, NotMeasured, NotMeasured, NotMeasured, NotMeasured, NotMeasured}, nil},
		{"no trace", nil,
			[6]string{NotMeasured, NotMeasured, NotMeasured, NotMeasured, NotMeasured, NotMeasured}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := TargetsOf(tc.tables)
			var verdicts []string
			for _, v := range got.Verdicts {
				verdicts = append(verdicts, v.Verdict)
			}
			if !slices.Equal(verdicts, tc.want[:]) {
				t.Errorf("verdicts %q, want %q", verdicts, tc.want)
			}
			if ran := tc.want[0] != NotMeasured; got.OursRan() != ran {
				t.Errorf("ours ran: %v, want %v", got.OursRan(), ran)
			}
			lines := strings.Join(got.lines(), "\n")
			for _, want := range tc.lines {
				if !strings.Contains(lines, want) {
					t.Errorf("verdicts lack %q:\n%s", want, lines)
				}
			}
			if _, err := json.Marshal(got); err != nil {
				t.Errorf("JSON: %v", err)
			}
			for _, write := range []func(*bytes.Buffer) error{
				func(b *bytes.Buffer) error { return got.WriteTable(b) },
				func(b *bytes.Buffer) error { return got.WriteMarkdown(b) },
			} {
				if err := write(&bytes.Buffer{}); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// oracle-lag, where it ran on every trace with oracle-slo and ours, is
// set beside them summed, after the verdicts; it is no target and moves
// none.
func TestTargetsLagReference(t *testing.T) {
	lagged := func(name string, hours float64) SeedTable {
		table := allRows(name)
		table.Rows = append(slices.Clone(table.Rows), targetRow(baseline.PolicyOracleLag, hours, 2, 2, 0, 7))
		return table
	}
	got := TargetsOf([]SeedTable{lagged("a", 8), lagged("b", 12)})
	if got.Lag == nil || got.Lag.LagToOracleSLO != 20.0/18 || got.Lag.OursToLag != 1 {
		t.Fatalf("reference %+v, want oracle-lag 20/18 of oracle-slo and ours 1× it", got.Lag)
	}
	want := "for reference, not a target: oracle-lag, oracle-slo's schedule learned a start-up late, spends 1.11× oracle-slo summed; ours 1.00× it"
	if lines := got.lines(); lines[len(lines)-1] != want {
		t.Errorf("last line %q, want %q", lines[len(lines)-1], want)
	}
	if plain := TargetsOf([]SeedTable{allRows("a"), allRows("b")}); !slices.Equal(verdictsOf(plain), verdictsOf(got)) {
		t.Errorf("verdicts with oracle-lag %q, without %q", verdictsOf(got), verdictsOf(plain))
	}
	if one := TargetsOf([]SeedTable{lagged("a", 8), allRows("b")}); one.Lag != nil {
		t.Errorf("oracle-lag on one trace of two: reference %+v, want none", one.Lag)
	}
	if got.LagDrawn != nil {
		t.Errorf("oracle-lag-drawn did not run: reference %+v, want none", got.LagDrawn)
	}

	// oracle-lag-drawn is set beside them the same way, after oracle-lag.
	drawn := func(table SeedTable, hours float64) SeedTable {
		table.Rows = append(slices.Clone(table.Rows), targetRow(baseline.PolicyOracleLagDrawn, hours, 2, 2, 0, 9))
		return table
	}
	both := TargetsOf([]SeedTable{drawn(lagged("a", 8), 12), drawn(lagged("b", 12), 15)})
	if both.LagDrawn == nil || both.LagDrawn.LagToOracleSLO != 27.0/18 || both.LagDrawn.OursToLag != 20.0/27 || *both.Lag != *got.Lag {
		t.Fatalf("references %+v and %+v, want oracle-lag's as before and oracle-lag-drawn 27/18 of oracle-slo, ours 20/27 of it", both.Lag, both.LagDrawn)
	}
	wantDrawn := "for reference, not a target: oracle-lag-drawn, the same with each start-up drawn as its worker is asked for, spends 1.50× oracle-slo summed; ours 0.74× it"
	if lines := both.lines(); lines[len(lines)-2] != want || lines[len(lines)-1] != wantDrawn {
		t.Errorf("last lines %q, want %q and %q", lines[len(lines)-2:], want, wantDrawn)
	}
	if !slices.Equal(verdictsOf(both), verdictsOf(got)) {
		t.Errorf("verdicts with oracle-lag-drawn %q, without %q", verdictsOf(both), verdictsOf(got))
	}
}

func verdictsOf(t Targets) []string {
	var out []string
	for _, v := range t.Verdicts {
		out = append(out, v.Verdict+" "+v.Value)
	}
	return out
}

// The sum adds each row's mean GPU-hours and seeds over the traces, and
// its ratios are those of the sums.
func TestTargetsSum(t *testing.T) {
	got := TargetsOf([]SeedTable{with(allRows("a"), rowOurs, targetRow(rowOurs, 10, 2, 2, 2, 5)), with(allRows("b"), rowOurs, targetRow(rowOurs, 30, 1, 2, 4, 5))})
	ours := got.Sum.Rows[rowOurs]
	if ours.GPUHours != 40 || ours.MeetsSeeds != 3 || ours.Seeds != 4 || ours.Lost != (Spread{Mean: 3, Max: 6}) {
		t.Errorf("ours summed %+v, want 40 GPU-h, 3 of 4 seeds, 3 lost [0–6]", ours)
	}
	if r := got.Sum.Ratios[rowHPABest]; r != 40.0/24 {
		t.Errorf("ours to hpa-best summed %v, want 40/24", r)
	}
	if b := got.Traces[1].PeakBound; b != 8 {
		t.Errorf("peak bound %v, want 1.5 × 4 + 2", b)
	}
}

// A run of one seed is judged from its reports: yes or no for the SLO,
// the peak without a range; and the section prints the table and the
// verdicts, as text and as Markdown.
func TestTargetsOfReports(t *testing.T) {
	rows := func(oursMeets bool) []sim.Result {
		return []sim.Result{
			{Name: "ours+proportional", GPUHours: 50, MeetsSLO: true, PeakReplicas: 70},
			{Name: rowOurs, GPUHours: 10, MeetsSLO: oursMeets, PeakReplicas: 7},
			{Name: rowHPABest, GPUHours: 12, MeetsSLO: true, PeakReplicas: 9},
			{Name: baseline.PolicyOracle, GPUHours: 5, MeetsSLO: true, PeakReplicas: 4},
		}
	}
	got := TargetsOfReports([]Report{{Trace: "m-small.csv", Policies: rows(true)}, {Trace: "held-out.csv", Policies: rows(false)}})
	if f := got.Traces[1].Rows[rowOurs]; f.GPUHours != 10 || f.Seeds != 1 || f.MeetsSeeds != 0 || f.Peak.Mean != 7 {
		t.Errorf("ours on held-out.csv %+v, want ours' row and not ours+proportional's", f)
	}
	for name, write := range map[string]func(*bytes.Buffer) error{
		"text":     func(b *bytes.Buffer) error { return got.WriteTable(b) },
		"markdown": func(b *bytes.Buffer) error { return got.WriteMarkdown(b) },
	} {
		var b bytes.Buffer
		if err := write(&b); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"ours against the targets over 2 traces", "ours÷hpa-best-one", "held-out.csv", "sum (2 traces)",
			"meets the SLO on every trace and seed: not met; not on held-out.csv (missed)", "GPU-h ≤ 0.85× hpa-best-one, summed: not measured"} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("%s section lacks %q:\n%s", name, want, b.String())
			}
		}
	}
	var b bytes.Buffer
	if err := got.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| held-out.csv | 10.0 | no | 0 | 12.0, yes | - | - | 0.83 | - | - | 7 | 8.0 |", "\n- no request lost: met\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("markdown section lacks %q:\n%s", want, b.String())
		}
	}
}
