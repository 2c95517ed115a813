package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/gputask/gputask-controller/pkg/replay/baseline"
)

// The rows the targets are measured on and against, by the names the rows
// carry (package replay names ours and the hpa-best rows; it imports this
// one).
const (
	rowOurs       = "ours"
	rowHPABest    = "hpa-best"
	rowHPABestOne = "hpa-best-one"
)

// targetRows are the rows a verdict reads.
var targetRows = []string{rowOurs, rowHPABest, rowHPABestOne, baseline.PolicyOracleSLO, baseline.PolicyOracle, baseline.PolicyOracleLag, baseline.PolicyOracleLagDrawn}

// gpuHourTargets bound ours' GPU-hours, summed over the traces of a run, by
// a multiple of each anchor row's.
var gpuHourTargets = []struct {
	anchor string
	bound  float64
}{{rowHPABest, 1.0}, {rowHPABestOne, 0.85}, {baseline.PolicyOracleSLO, 1.15}}

// Ours' peak on every trace is within peakFactor × the zero-wait oracle's
// peak + peakWorkers.
const peakFactor, peakWorkers = 1.5, 2

// The verdicts on a target. A target whose rows did not all run is not
// measured, never met.
const (
	Met         = "met"
	NotMet      = "not met"
	NotMeasured = "not measured"
)

// Figures are a row's on a trace over its seeds, or summed over the traces.
type Figures struct {
	// GPUHours is the mean over the seeds.
	GPUHours   float64 `json:"gpu_hours"`
	Seeds      int     `json:"seeds"`
	MeetsSeeds int     `json:"meets_slo_seeds"`
	Lost       Spread  `json:"failed_requests"`
	// Peak is not summed over traces.
	Peak Spread `json:"peak_replicas"`
}

// TraceTargets is ours on one trace beside the rows its targets are
// anchored to, or the same summed over a run's traces.
type TraceTargets struct {
	Trace string `json:"trace"`
	// Rows holds the rows that ran, by name.
	Rows map[string]Figures `json:"rows"`
	// Ratios are ours' GPU-hours over each anchor's, by the anchor's name:
	// none where either did not run or the anchor spent none.
	Ratios map[string]float64 `json:"ours_gpu_hours_to"`
	// PeakBound is 1.5 × the oracle's mean peak + 2; 0 where it did not run.
	PeakBound float64 `json:"peak_bound,omitempty"`
}

// Verdict is ours against one target.
type Verdict struct {
	Target  string `json:"target"`
	Verdict string `json:"verdict"`
	// Value is the figure judged, where one is: the ratio of the sums.
	Value string `json:"value,omitempty"`
	// Not names the traces on which ours misses the target on its own, with
	// the figure that misses it.
	Not []string `json:"not_on,omitempty"`
}

// Targets is ours against the targets over the traces of a run: on each
// trace, summed, and each target's verdict.
type Targets struct {
	Policy   string         `json:"policy"`
	Traces   []TraceTargets `json:"traces"`
	Sum      TraceTargets   `json:"sum"`
	Verdicts []Verdict      `json:"verdicts"`
	// Lag, where oracle-lag, oracle-slo and ours ran on every trace, is
	// their GPU-hours summed set side by side: a reference, not a target.
	// LagDrawn is the same of oracle-lag-drawn.
	Lag      *LagReference `json:"lag_reference,omitempty"`
	LagDrawn *LagReference `json:"lag_drawn_reference,omitempty"`
}

// LagReference is oracle-lag's GPU-hours summed over a run's traces
// against oracle-slo's, and ours' against oracle-lag's.
type LagReference struct {
	LagToOracleSLO float64 `json:"oracle_lag_to_oracle_slo"`
	OursToLag      float64 `json:"ours_to_oracle_lag"`
}

// TargetsOfReports is ours against the targets over the reports of a run
// of one seed, one report a trace.
func TargetsOfReports(reports []Report) Targets {
	return TargetsOf(SummarizeSeeds([][]Report{reports}))
}

// TargetsOf is ours against the targets over the tables of a run, one a
// trace: it meets the SLO on every trace and seed and loses no request;
// its GPU-hours summed over the traces are within 1.0 × hpa-best's (picked
// per trace), 0.85 × hpa-best-one's and 1.15 × oracle-slo's; its peak,
// the mean over the seeds, is within 1.5 × the zero-wait oracle's + 2 on
// every trace.
func TargetsOf(tables []SeedTable) Targets {
	t := Targets{Policy: rowOurs, Traces: []TraceTargets{}}
	for _, table := range tables {
		t.Traces = append(t.Traces, traceTargets(table))
	}
	t.Sum = sumTargets(t.Traces)
	t.Verdicts = []Verdict{
		perTrace("meets the SLO on every trace and seed", t.Traces, rowOurs, missesSLO),
		perTrace("no request lost", t.Traces, rowOurs, loses),
	}
	for _, g := range gpuHourTargets {
		t.Verdicts = append(t.Verdicts, gpuHourVerdict(t, g.anchor, g.bound))
	}
	peak := fmt.Sprintf("peak ≤ %g× oracle's + %d on every trace", peakFactor, peakWorkers)
	t.Verdicts = append(t.Verdicts, perTrace(peak, t.Traces, baseline.PolicyOracle, missesPeak))
	t.Lag, t.LagDrawn = lagReference(t.Sum, baseline.PolicyOracleLag), lagReference(t.Sum, baseline.PolicyOracleLagDrawn)
	return t
}

// lagReference is the row name's GPU-hours summed against oracle-slo's and
// ours', where the three ran on every trace, else nil.
func lagReference(sum TraceTargets, name string) *LagReference {
	lag, okLag := sum.Rows[name]
	slo, okSLO := sum.Rows[baseline.PolicyOracleSLO]
	ours, okOurs := sum.Rows[rowOurs]
	if !okLag || !okSLO || !okOurs || !(lag.GPUHours > 0) || !(slo.GPUHours > 0) {
		return nil
	}
	return &LagReference{LagToOracleSLO: lag.GPUHours / slo.GPUHours, OursToLag: ours.GPUHours / lag.GPUHours}
}

// OursRan reports whether ours ran on any trace of the run.
func (t Targets) OursRan() bool {
	for _, tt := range t.Traces {
		if _, ok := tt.Rows[rowOurs]; ok {
			return true
		}
	}
	return false
}

func traceTargets(table SeedTable) TraceTargets {
	t := TraceTargets{Trace: table.Trace, Rows: map[string]Figures{}}
	for _, name := range targetRows {
		if r, ok := table.Row(name); ok {
			t.Rows[name] = Figures{GPUHours: r.GPUHours.Mean, Seeds: r.Seeds, MeetsSeeds: r.MeetsSeeds, Lost: r.Lost, Peak: r.Peak}
		}
	}
	t.Ratios = ratios(t.Rows)
	if o, ok := t.Rows[baseline.PolicyOracle]; ok {
		t.PeakBound = peakFactor*o.Peak.Mean + peakWorkers
	}
	return t
}

// ratios are ours' GPU-hours over each anchor's.
func ratios(rows map[string]Figures) map[string]float64 {
	out := map[string]float64{}
	ours, ok := rows[rowOurs]
	if !ok {
		return out
	}
	for _, g := range gpuHourTargets {
		if a, ok := rows[g.anchor]; ok && a.GPUHours > 0 {
			out[g.anchor] = ours.GPUHours / a.GPUHours
		}
	}
	return out
}

// sumTargets sums each row that ran on every trace.
func sumTargets(traces []TraceTargets) TraceTargets {
	sum := TraceTargets{Trace: "sum (" + countTraces(len(traces)) + ")", Rows: map[string]Figures{}}
	for _, name := range targetRows {
		if f, ok := sumRow(traces, name); ok {
			sum.Rows[name] = f
		}
	}
	sum.Ratios = ratios(sum.Rows)
	return sum
}

func sumRow(traces []TraceTargets, name string) (Figures, bool) {
	var s Figures
	for _, t := range traces {
		f, ok := t.Rows[name]
		if !ok {
			return Figures{}, false
		}
		s.GPUHours += f.GPUHours
		s.Seeds += f.Seeds
		s.MeetsSeeds += f.MeetsSeeds
		s.Lost = Spread{Mean: s.Lost.Mean + f.Lost.Mean, Min: s.Lost.Min + f.Lost.Min, Max: s.Lost.Max + f.Lost.Max}
	}
	return s, len(traces) > 0
}

// perTrace judges a target that must hold on every trace: measured where
// ours and need ran on every trace, met where miss finds no trace that
// misses it. miss says how a trace misses it, or "".
func perTrace(target string, traces []TraceTargets, need string, miss func(TraceTargets) string) Verdict {
	v := Verdict{Target: target, Verdict: NotMeasured}
	for _, t := range traces {
		if _, ok := t.Rows[rowOurs]; !ok {
			return v
		}
		if _, ok := t.Rows[need]; !ok {
			return v
		}
	}
	if len(traces) == 0 {
		return v
	}
	for _, t := range traces {
		if m := miss(t); m != "" {
			v.Not = append(v.Not, fmt.Sprintf("%s (%s)", t.Trace, m))
		}
	}
	v.Verdict = metIf(len(v.Not) == 0)
	return v
}

func missesSLO(t TraceTargets) string {
	switch f := t.Rows[rowOurs]; {
	case f.MeetsSeeds >= f.Seeds:
		return ""
	case f.Seeds == 1:
		return "missed"
	default:
		return fmt.Sprintf("met on %d/%d seeds", f.MeetsSeeds, f.Seeds)
	}
}

func loses(t TraceTargets) string {
	if lost := t.Rows[rowOurs].Lost.Max; lost > 0 {
		return fmt.Sprintf("%.0f lost", lost)
	}
	return ""
}

// peakRounding is how far a mean peak may lie over its bound by the
// rounding of floating point alone: a mean of 52 workers over 5 seeds is
// at the bound of 1.5 × 28/5 + 2, and not over it.
const peakRounding = 1e-9

func missesPeak(t TraceTargets) string {
	if peak := t.Rows[rowOurs].Peak.Mean; peak-t.PeakBound > peakRounding {
		return fmt.Sprintf("%.1f > %.1f", peak, t.PeakBound)
	}
	return ""
}

// gpuHourVerdict judges ours' GPU-hours summed over the traces against
// bound × anchor's, and names the traces over it on their own.
func gpuHourVerdict(t Targets, anchor string, bound float64) Verdict {
	target := fmt.Sprintf("GPU-h ≤ %.2f× %s, summed", bound, anchor)
	r, ok := t.Sum.Ratios[anchor]
	if !ok {
		return Verdict{Target: target, Verdict: NotMeasured}
	}
	v := perTrace(target, t.Traces, anchor, func(tt TraceTargets) string {
		if r, ok := tt.Ratios[anchor]; ok && r > bound {
			return fmt.Sprintf("%.2f×", r)
		}
		return ""
	})
	v.Verdict, v.Value = metIf(r <= bound), fmt.Sprintf("%.2f×", r)
	return v
}

func metIf(ok bool) string {
	if ok {
		return Met
	}
	return NotMet
}

// meetsOf says on how many seeds a row met the SLO: yes or no on one.
func meetsOf(f Figures) string {
	if f.Seeds == 1 {
		return map[bool]string{true: "yes", false: "no"}[f.MeetsSeeds == 1]
	}
	return fmt.Sprintf("%d/%d", f.MeetsSeeds, f.Seeds)
}

// headings are the columns of the table of the targets.
func (t Targets) headings() []string {
	h := []string{"trace", "ours GPU-h", "meets SLO", "lost"}
	for _, g := range gpuHourTargets {
		h = append(h, g.anchor)
	}
	for _, g := range gpuHourTargets {
		h = append(h, "ours÷"+g.anchor)
	}
	return append(h, "ours' peak", "peak bound")
}

// cells are a trace's row, or the sum's, under headings: "-" for a row
// that did not run, and for the peak of the sum.
func (t Targets) cells(tt TraceTargets, sum bool) []string {
	row := func(name string, cell func(Figures) string) string {
		if f, ok := tt.Rows[name]; ok {
			return cell(f)
		}
		return "-"
	}
	c := []string{tt.Trace,
		row(rowOurs, func(f Figures) string { return fmt.Sprintf("%.1f", f.GPUHours) }),
		row(rowOurs, meetsOf),
		row(rowOurs, func(f Figures) string { return fmt.Sprintf("%.0f", f.Lost.Max) })}
	for _, g := range gpuHourTargets {
		c = append(c, row(g.anchor, func(f Figures) string { return fmt.Sprintf("%.1f, %s", f.GPUHours, meetsOf(f)) }))
	}
	for _, g := range gpuHourTargets {
		c = append(c, ratioCell(tt.Ratios, g.anchor))
	}
	if sum {
		return append(c, "-", "-")
	}
	return append(c, peakCells(tt)...)
}

func ratioCell(ratios map[string]float64, anchor string) string {
	if r, ok := ratios[anchor]; ok {
		return fmt.Sprintf("%.2f", r)
	}
	return "-"
}

// peakCells are ours' peak, the mean and the highest over the seeds, and
// its bound.
func peakCells(tt TraceTargets) []string {
	ours, ok := tt.Rows[rowOurs]
	peak, bound := "-", "-"
	if ok {
		peak = fmt.Sprintf("%.1f (max %.0f)", ours.Peak.Mean, ours.Peak.Max)
		if ours.Seeds == 1 {
			peak = fmt.Sprintf("%.0f", ours.Peak.Mean)
		}
	}
	if tt.PeakBound > 0 {
		bound = fmt.Sprintf("%.1f", tt.PeakBound)
	}
	return []string{peak, bound}
}

// lines are the verdicts, one a line.
func (t Targets) lines() []string {
	var out []string
	for _, v := range t.Verdicts {
		s := v.Target + ": " + v.Verdict
		if v.Value != "" {
			s += " (" + v.Value + ")"
		}
		if len(v.Not) > 0 {
			s += "; not on " + strings.Join(v.Not, ", ")
		}
		out = append(out, s)
	}
	if t.Lag != nil {
		out = append(out, fmt.Sprintf("for reference, not a target: %s, oracle-slo's schedule learned a start-up late, spends %.2f× oracle-slo summed; ours %.2f× it",
			baseline.PolicyOracleLag, t.Lag.LagToOracleSLO, t.Lag.OursToLag))
	}
	if t.LagDrawn != nil {
		out = append(out, fmt.Sprintf("for reference, not a target: %s, the same with each start-up drawn as its worker is asked for, spends %.2f× oracle-slo summed; ours %.2f× it",
			baseline.PolicyOracleLagDrawn, t.LagDrawn.LagToOracleSLO, t.LagDrawn.OursToLag))
	}
	return out
}

// title heads the section.
func (t Targets) title() string {
	return fmt.Sprintf("%s against the targets over %s (each figure the mean over the seeds, lost the most on one):", t.Policy, countTraces(len(t.Traces)))
}

func countTraces(n int) string {
	if n == 1 {
		return "1 trace"
	}
	return fmt.Sprintf("%d traces", n)
}

// WriteTable prints the section: the table of the traces and the sum, and
// each target's verdict.
func (t Targets) WriteTable(w io.Writer) error {
	fmt.Fprintln(w, t.title())
	if err := writeText(w, t.headings(), t.rows()); err != nil {
		return err
	}
	_, err := io.WriteString(w, strings.Join(t.lines(), "\n")+"\n")
	return err
}

// WriteMarkdown prints the section as Markdown.
func (t Targets) WriteMarkdown(w io.Writer) error {
	fmt.Fprintf(w, "%s\n\n", t.title())
	if err := writeMarkdown(w, t.headings(), t.rows()); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n- "+strings.Join(t.lines(), "\n- ")+"\n")
	return err
}

func (t Targets) rows() [][]string {
	var rows [][]string
	for _, tt := range t.Traces {
		rows = append(rows, t.cells(tt, false))
	}
	return append(rows, t.cells(t.Sum, true))
}
