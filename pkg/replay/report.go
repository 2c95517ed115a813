package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// Result is what one policy cost and what its requests saw.
type Result struct {
	Name string `json:"name"`
	// GPUHours counts every worker from creation to removal, starting and
	// draining included.
	GPUHours float64 `json:"gpu_hours"`
	// WaitP50, WaitP95 and WaitP99 are percentiles of the time requests
	// waited for a worker, in seconds, over the requests that got one;
	// TTFT… of the time to first token, over the same; ITL… of each
	// request's mean gap between tokens, over those with two tokens or
	// more.
	WaitP50 float64 `json:"wait_p50_s"`
	WaitP95 float64 `json:"wait_p95_s"`
	WaitP99 float64 `json:"wait_p99_s"`
	TTFTP50 float64 `json:"ttft_p50_s"`
	TTFTP95 float64 `json:"ttft_p95_s"`
	TTFTP99 float64 `json:"ttft_p99_s"`
	ITLP50  float64 `json:"itl_p50_s"`
	ITLP95  float64 `json:"itl_p95_s"`
	ITLP99  float64 `json:"itl_p99_s"`
	// Attainment is, per stated target, the share of all requests within
	// it and not lost.
	Attainment []Attainment `json:"attainment"`
	// SLOAttainment is the lowest of Attainment's shares.
	SLOAttainment float64 `json:"slo_attainment"`
	// MeetsSLO is whether every stated target holds at the SLO's
	// percentile.
	MeetsSLO bool `json:"meets_slo"`
	// BelowOracleSLO flags a row that meets the SLO on fewer GPU-hours
	// than the oracle-slo schedule: a finding to explain, as that
	// schedule is the fewest workers found to meet the SLO interval by
	// interval.
	BelowOracleSLO bool `json:"below_oracle_slo,omitempty"`
	// FailedRequests were lost with a worker removed while serving them, or
	// never served before the replay ended.
	FailedRequests int `json:"failed_requests"`
	// ScaleEvents counts changes of the count asked for.
	ScaleEvents int `json:"scale_events"`
	// PeakReplicas is the most workers alive at once.
	PeakReplicas int `json:"peak_replicas"`
	// NodeHours counts every node from its launch to its removal, when
	// the replay models nodes (NodeModel); PeakNodes is the most nodes up
	// or launching at once.
	NodeHours float64 `json:"node_hours,omitempty"`
	PeakNodes int     `json:"peak_nodes,omitempty"`
	// Evictions counts the workers the node autoscaler's consolidation
	// evicted.
	Evictions int `json:"evictions,omitempty"`
	// Note says how the row was set up where its name does not: the
	// target a searched row plays at.
	Note   string   `json:"note,omitempty"`
	Series []Sample `json:"-"`
}

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Report is the outcome of a replay: every policy on one trace.
type Report struct {
	Trace       string   `json:"trace,omitempty"`
	Requests    int      `json:"requests"`
	Concurrency int      `json:"concurrency"`
	Startup     string   `json:"startup"`
	Load        LoadKind `json:"load"`
	// SLO names the targets every row is measured against.
	SLO string `json:"slo"`
	// SLOTargets are those targets.
	SLOTargets SLOTargets `json:"-"`
	// Nodes is the node model, when the replay has one.
	Nodes    *NodeModel `json:"nodes,omitempty"`
	Policies []Result   `json:"policies"`
	// Series holds each policy's samples, by policy name.
	Series map[string][]Sample `json:"series"`
}

// oracle returns the oracle's result, if it ran.
func (r Report) oracle() (Result, bool) {
	for _, p := range r.Policies {
		if p.Name == PolicyOracle {
			return p, true
		}
	}
	return Result{}, false
}

// WriteTable prints the figures, and each policy's GPU-hours as a ratio
// to the oracle's.
func (r Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\t\n", strings.Join(r.headings(), "\t"))
	for _, p := range r.Policies {
		fmt.Fprintf(tw, "%s\t\n", strings.Join(r.cells(p), "\t"))
	}
	return tw.Flush()
}

// WriteMarkdown prints the table as Markdown.
func (r Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	heads := r.headings()
	b.WriteString("| " + strings.Join(heads, " | ") + " |\n|---|")
	b.WriteString(strings.Repeat("--:|", len(heads)-1) + "\n")
	for _, p := range r.Policies {
		b.WriteString("| " + strings.Join(r.cells(p), " | ") + " |\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// headings are the table's column headings: cost, the latency
// percentiles, each stated target's attainment, whether the row meets
// the SLO, and what it lost.
func (r Report) headings() []string {
	h := []string{"policy", "GPU-h", "×oracle", "wait p50", "wait p95", "wait p99", "TTFT p50", "TTFT p95", "TTFT p99", "ITL p50", "ITL p95", "ITL p99"}
	slo := r.SLOTargets.withDefaults()
	for _, t := range slo.stated() {
		h = append(h, fmt.Sprintf("%s≤%v", targetLabel(t.name), t.limit))
	}
	h = append(h, "meets p"+trimFloat(slo.Percentile), "lost", "scale events", "peak")
	if r.Nodes != nil {
		h = append(h, "node-h", "peak nodes", "evictions")
	}
	return h
}

// cells are p's row under headings.
func (r Report) cells(p Result) []string {
	oracle, hasOracle := r.oracle()
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
	for _, t := range r.SLOTargets.withDefaults().stated() {
		cell := "-"
		for _, a := range p.Attainment {
			if a.Target == t.name {
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
func meetsCell(p Result) string {
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
		Result
		GPUHoursToOracle float64 `json:"gpu_hours_to_oracle,omitempty"`
	}
	out := struct {
		Report
		Policies []policyJSON `json:"policies"`
	}{Report: r}
	oracle, hasOracle := r.oracle()
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
