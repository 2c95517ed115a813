// Package report shows what a replay measured: each policy's row on a
// trace as an aligned table, markdown or JSON (Report), the same rows over
// several seeds as their mean and range (SeedTable), and the pool over time
// as a plot (Plot). It formats; the figures themselves come from the model
// (package sim). Targets judges ours against the targets over a run's
// traces, from the same rows.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/gputask/gputask-controller/pkg/replay/baseline"
	"github.com/gputask/gputask-controller/pkg/replay/sim"
)

// Report is the outcome of a replay: every policy on one trace.
type Report struct {
	Trace       string       `json:"trace,omitempty"`
	Requests    int          `json:"requests"`
	Concurrency int          `json:"concurrency"`
	Startup     string       `json:"startup"`
	Load        sim.LoadKind `json:"load"`
	// SLO names the targets every row is measured against.
	SLO string `json:"slo"`
	// SLOTargets are those targets.
	SLOTargets sim.SLOTargets `json:"-"`
	// Nodes is the node model, when the replay has one.
	Nodes    *sim.NodeModel `json:"nodes,omitempty"`
	Policies []sim.Result   `json:"policies"`
	// Series holds each policy's samples, by policy name.
	Series map[string][]sim.Sample `json:"series"`
	// Targets, where set, is ours against the targets over the run the
	// report is the one trace of (TargetsOfReports).
	Targets *Targets `json:"targets,omitempty"`
}

// Oracle is the zero-wait oracle's row, if it ran: the tables give every
// row's GPU-hours as a ratio to it.
func (r Report) Oracle() (sim.Result, bool) {
	return r.Row(baseline.PolicyOracle)
}

// Row is the row of the policy named name, if it ran.
func (r Report) Row(name string) (sim.Result, bool) {
	for _, p := range r.Policies {
		if p.Name == name {
			return p, true
		}
	}
	return sim.Result{}, false
}

// WriteTable prints the figures, and each policy's GPU-hours as a ratio
// to the oracle's.
func (r Report) WriteTable(w io.Writer) error {
	return writeText(w, r.headings(), r.rows())
}

// WriteMarkdown prints the table as Markdown.
func (r Report) WriteMarkdown(w io.Writer) error {
	return writeMarkdown(w, r.headings(), r.rows())
}

func (r Report) rows() [][]string {
	var rows [][]string
	for _, p := range r.Policies {
		rows = append(rows, r.cells(p))
	}
	return rows
}

// writeText prints a table aligned right, in columns two spaces apart.
func writeText(w io.Writer, heads []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\t\n", strings.Join(heads, "\t"))
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t\n", strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// writeMarkdown prints a table as Markdown, its first column aligned left
// and the others right.
func writeMarkdown(w io.Writer, heads []string, rows [][]string) error {
	var b strings.Builder
	b.WriteString("| " + strings.Join(heads, " | ") + " |\n|---|")
	b.WriteString(strings.Repeat("--:|", len(heads)-1) + "\n")
	for _, row := range rows {
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// headings are the table's column headings: cost, the latency
// percentiles, each stated target's attainment, whether the row meets
// the SLO, and what it lost.
func (r Report) headings() []string {
	h := []string{"policy", "GPU-h", "×oracle", "wait p50", "wait p95", "wait p99", "TTFT p50", "TTFT p95", "TTFT p99", "ITL p50", "ITL p95", "ITL p99"}
	slo := r.SLOTargets.WithDefaults()
	for _, t := range slo.Stated() {
		h = append(h, fmt.Sprintf("%s≤%v", t.Label(), t.Limit))
	}
	h = append(h, "meets "+slo.PercentileLabel(), "lost", "scale events", "peak")
	if r.Nodes != nil {
		h = append(h, "node-h", "peak nodes", "evictions")
	}
	return h
}

// cells are p's row under headings.
func (r Report) cells(p sim.Result) []string {
	oracle, hasOracle := r.Oracle()
	ratio := "-"
	if hasOracle && oracle.GPUHours > 0 {
		ratio = fmt.Sprintf("%.2f", p.GPUHours/oracle.GPUHours)
	}
	name := p.Name
	if p.Note != "" {
		name += " (" + p.Note + ")"
	}
	c := []string{name, fmt.Sprintf("%.1f", p.GPUHours), ratio,
		seconds(p.WaitP50), seconds(p.WaitP95), seconds(p.WaitP99),
		seconds(p.TTFTP50), seconds(p.TTFTP95), seconds(p.TTFTP99),
		seconds(p.ITLP50), seconds(p.ITLP95), seconds(p.ITLP99)}
	for _, t := range r.SLOTargets.WithDefaults().Stated() {
		cell := "-"
		for _, a := range p.Attainment {
			if a.Target == t.Name {
				cell = fmt.Sprintf("%.2f%%", 100*a.Share)
			}
		}
		c = append(c, cell)
	}
	c = append(c, meetsCell(p), fmt.Sprint(p.FailedRequests), fmt.Sprint(p.ScaleEvents), fmt.Sprint(p.PeakReplicas))
	if r.Nodes != nil {
		c = append(c, fmt.Sprintf("%.1f", p.NodeHours), fmt.Sprint(p.PeakNodes), fmt.Sprint(p.Evictions))
	}
	return c
}

// meetsCell says whether a row meets the SLO, and flags one that does on
// fewer GPU-hours than oracle-slo.
func meetsCell(p sim.Result) string {
	switch {
	case p.BelowOracleSLO:
		return "yes, below oracle-slo"
	case p.MeetsSLO:
		return "yes"
	}
	return "no"
}

// seconds prints a latency in seconds: milliseconds below one second, as
// inter-token latencies are read.
func seconds(s float64) string {
	switch {
	case s == 0:
		return "0s"
	case s < 0.01:
		return fmt.Sprintf("%.1fms", 1000*s)
	case s < 1:
		return fmt.Sprintf("%.0fms", 1000*s)
	case s < 10:
		return fmt.Sprintf("%.2fs", s)
	default:
		return fmt.Sprintf("%.0fs", s)
	}
}

// WriteJSON writes the report: the figures of each policy, with its ratio
// to the oracle, and the time series.
func (r Report) WriteJSON(w io.Writer) error {
	type policyJSON struct {
		sim.Result
		GPUHoursToOracle float64 `json:"gpu_hours_to_oracle,omitempty"`
	}
	out := struct {
		Report
		Policies []policyJSON `json:"policies"`
	}{Report: r}
	oracle, hasOracle := r.Oracle()
	for _, p := range r.Policies {
		pj := policyJSON{Result: p}
		if hasOracle && oracle.GPUHours > 0 {
			pj.GPUHoursToOracle = p.GPUHours / oracle.GPUHours
		}
		out.Policies = append(out.Policies, pj)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(out)
}
