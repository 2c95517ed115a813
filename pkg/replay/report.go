package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is what one policy cost and how long its requests waited.
type Result struct {
	Name string `json:"name"`
	// GPUHours counts every worker from creation to removal, starting and
	// draining included.
	GPUHours float64 `json:"gpu_hours"`
	// WaitP50, WaitP95 and WaitP99 are percentiles of the time requests
	// waited for a slot, in seconds, over the requests that got one.
	WaitP50 float64 `json:"wait_p50_s"`
	WaitP95 float64 `json:"wait_p95_s"`
	WaitP99 float64 `json:"wait_p99_s"`
	// SLOAttainment is the share of all requests that got a slot within the
	// SLO and were not lost.
	SLOAttainment float64 `json:"slo_attainment"`
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
	Evictions int      `json:"evictions,omitempty"`
	Series    []Sample `json:"-"`
}

// measure computes the wait figures.
func measure(waits []time.Duration, started, failed []bool, slo time.Duration) Result {
	var r Result
	served := make([]float64, 0, len(waits))
	within := 0
	for i, w := range waits {
		if failed[i] {
			r.FailedRequests++
		}
		if !started[i] {
			continue
		}
		served = append(served, w.Seconds())
		if !failed[i] && w <= slo {
			within++
		}
	}
	slices.Sort(served)
	r.WaitP50, r.WaitP95, r.WaitP99 = percentile(served, 0.50), percentile(served, 0.95), percentile(served, 0.99)
	if n := len(waits); n > 0 {
		r.SLOAttainment = float64(within) / float64(n)
	}
	return r
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
	SLO         string   `json:"slo"`
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

// WriteTable prints the figures, and each policy's GPU-hours and p95 wait
// as a ratio to the oracle's.
func (r Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "policy\tGPU-h\t×oracle\twait p50\tp95\tp99\tSLO met\tfailed\tscale events\tpeak%s\t\n", r.nodeHeader("\t"))
	oracle, hasOracle := r.oracle()
	for _, p := range r.Policies {
		ratio := "-"
		if hasOracle && oracle.GPUHours > 0 {
			ratio = fmt.Sprintf("%.2f", p.GPUHours/oracle.GPUHours)
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%s\t%s\t%s\t%s\t%.2f%%\t%d\t%d\t%d%s\t\n",
			p.Name, p.GPUHours, ratio, seconds(p.WaitP50), seconds(p.WaitP95), seconds(p.WaitP99),
			100*p.SLOAttainment, p.FailedRequests, p.ScaleEvents, p.PeakReplicas, r.nodeCells(p, "\t"))
	}
	return tw.Flush()
}

// WriteMarkdown prints the table as Markdown.
func (r Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("| policy | GPU-h | × oracle | wait p50 | p95 | p99 | SLO met | failed | scale events | peak" + r.nodeHeader(" | ") + " |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	if r.Nodes != nil {
		b.WriteString("--:|--:|--:|")
	}
	b.WriteString("\n")
	oracle, hasOracle := r.oracle()
	for _, p := range r.Policies {
		ratio := "-"
		if hasOracle && oracle.GPUHours > 0 {
			ratio = fmt.Sprintf("%.2f", p.GPUHours/oracle.GPUHours)
		}
		fmt.Fprintf(&b, "| %s | %.1f | %s | %s | %s | %s | %.2f%% | %d | %d | %d%s |\n",
			p.Name, p.GPUHours, ratio, seconds(p.WaitP50), seconds(p.WaitP95), seconds(p.WaitP99),
			100*p.SLOAttainment, p.FailedRequests, p.ScaleEvents, p.PeakReplicas, r.nodeCells(p, " | "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// nodeHeader is the node columns' headings, each after sep, when the
// replay models nodes.
func (r Report) nodeHeader(sep string) string {
	if r.Nodes == nil {
		return ""
	}
	return sep + "node-h" + sep + "peak nodes" + sep + "evictions"
}

// nodeCells is p's node columns, each after sep, when the replay models
// nodes.
func (r Report) nodeCells(p Result, sep string) string {
	if r.Nodes == nil {
		return ""
	}
	return fmt.Sprintf("%s%.1f%s%d%s%d", sep, p.NodeHours, sep, p.PeakNodes, sep, p.Evictions)
}

func seconds(s float64) string {
	switch {
	case s == 0:
		return "0s"
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
