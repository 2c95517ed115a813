package report

import (
	"fmt"
	"io"

	"github.com/gputask/gputask-controller/pkg/replay/sim"
)

// Spread is a figure over the seeds: its mean and range.
type Spread struct {
	Mean float64 `json:"mean"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
}

func spreadOf(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := Spread{Min: xs[0], Max: xs[0]}
	for _, x := range xs {
		s.Mean += x
		s.Min, s.Max = min(s.Min, x), max(s.Max, x)
	}
	s.Mean /= float64(len(xs))
	return s
}

// SeedRow is one policy on one trace over every seed.
type SeedRow struct {
	Name       string            `json:"name"`
	Seeds      int               `json:"seeds"`
	GPUHours   Spread            `json:"gpu_hours"`
	WaitP95    Spread            `json:"wait_p95_s"`
	TTFTP50    Spread            `json:"ttft_p50_s"`
	TTFTP95    Spread            `json:"ttft_p95_s"`
	TTFTP99    Spread            `json:"ttft_p99_s"`
	ITLP50     Spread            `json:"itl_p50_s"`
	ITLP95     Spread            `json:"itl_p95_s"`
	ITLP99     Spread            `json:"itl_p99_s"`
	Attainment map[string]Spread `json:"attainment"`
	Lost       Spread            `json:"failed_requests"`
	Peak       Spread            `json:"peak_replicas"`
	// MeetsSeeds counts the seeds on which the row met the SLO;
	// BelowOracleSLO those on which it did below oracle-slo.
	MeetsSeeds     int `json:"meets_slo_seeds"`
	BelowOracleSLO int `json:"below_oracle_slo_seeds"`
}

// SeedTable is every policy on one trace over the seeds.
type SeedTable struct {
	Trace string    `json:"trace"`
	Seeds int       `json:"seeds"`
	SLO   string    `json:"slo"`
	Rows  []SeedRow `json:"policies"`

	targets sim.SLOTargets
}

// SummarizeSeeds gathers runs[seed][trace], the reports of the same
// traces drawn with each seed, into one table per trace: each figure's
// mean and range over the seeds, and on how many seeds the row met the
// SLO.
func SummarizeSeeds(runs [][]Report) []SeedTable {
	if len(runs) == 0 {
		return nil
	}
	var tables []SeedTable
	for t := range runs[0] {
		first := runs[0][t]
		table := SeedTable{Trace: first.Trace, Seeds: len(runs), SLO: first.SLO, targets: first.SLOTargets}
		for _, p := range first.Policies {
			var rs []sim.Result
			for _, run := range runs {
				for _, q := range run[t].Policies {
					if q.Name == p.Name {
						rs = append(rs, q)
					}
				}
			}
			table.Rows = append(table.Rows, seedRow(p.Name, rs))
		}
		tables = append(tables, table)
	}
	return tables
}

func seedRow(name string, rs []sim.Result) SeedRow {
	row := SeedRow{Name: name, Seeds: len(rs), Attainment: map[string]Spread{}}
	figure := func(f func(sim.Result) float64) Spread {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		return spreadOf(xs)
	}
	row.GPUHours = figure(func(r sim.Result) float64 { return r.GPUHours })
	row.WaitP95 = figure(func(r sim.Result) float64 { return r.WaitP95 })
	row.TTFTP50 = figure(func(r sim.Result) float64 { return r.TTFTP50 })
	row.TTFTP95 = figure(func(r sim.Result) float64 { return r.TTFTP95 })
	row.TTFTP99 = figure(func(r sim.Result) float64 { return r.TTFTP99 })
	row.ITLP50 = figure(func(r sim.Result) float64 { return r.ITLP50 })
	row.ITLP95 = figure(func(r sim.Result) float64 { return r.ITLP95 })
	row.ITLP99 = figure(func(r sim.Result) float64 { return r.ITLP99 })
	row.Lost = figure(func(r sim.Result) float64 { return float64(r.FailedRequests) })
	row.Peak = figure(func(r sim.Result) float64 { return float64(r.PeakReplicas) })
	for _, a := range rs[0].Attainment {
		target := a.Target
		row.Attainment[target] = figure(func(r sim.Result) float64 {
			for _, b := range r.Attainment {
				if b.Target == target {
					return b.Share
				}
			}
			return 0
		})
	}
	for _, r := range rs {
		if r.MeetsSLO {
			row.MeetsSeeds++
		}
		if r.BelowOracleSLO {
			row.BelowOracleSLO++
		}
	}
	return row
}

// headings are the seed table's columns.
func (t SeedTable) headings() []string {
	h := []string{"policy", "GPU-h", "wait p95", "TTFT p50", "TTFT p95", "TTFT p99", "ITL p50", "ITL p95", "ITL p99"}
	slo := t.targets.WithDefaults()
	for _, g := range slo.Stated() {
		h = append(h, fmt.Sprintf("%s≤%v", g.Label(), g.Limit))
	}
	return append(h, "meets "+slo.PercentileLabel(), "lost", "peak")
}

// cells are a row under headings: each figure as "mean [min–max]".
func (t SeedTable) cells(r SeedRow) []string {
	secs := func(s Spread) string {
		return fmt.Sprintf("%s [%s–%s]", seconds(s.Mean), seconds(s.Min), seconds(s.Max))
	}
	num := func(s Spread, format string) string {
		f := format + " [" + format + "–" + format + "]"
		return fmt.Sprintf(f, s.Mean, s.Min, s.Max)
	}
	c := []string{r.Name, num(r.GPUHours, "%.1f"), secs(r.WaitP95), secs(r.TTFTP50), secs(r.TTFTP95), secs(r.TTFTP99), secs(r.ITLP50), secs(r.ITLP95), secs(r.ITLP99)}
	for _, g := range t.targets.WithDefaults().Stated() {
		a := r.Attainment[g.Name]
		c = append(c, fmt.Sprintf("%.2f%% [%.2f–%.2f]", 100*a.Mean, 100*a.Min, 100*a.Max))
	}
	meets := fmt.Sprintf("%d/%d seeds", r.MeetsSeeds, r.Seeds)
	if r.BelowOracleSLO > 0 {
		meets += fmt.Sprintf(", %d below oracle-slo", r.BelowOracleSLO)
	}
	return append(c, meets, num(r.Lost, "%.1f"), num(r.Peak, "%.1f"))
}

// WriteTable prints the table.
func (t SeedTable) WriteTable(w io.Writer) error {
	return writeText(w, t.headings(), t.rows())
}

// WriteMarkdown prints the table as Markdown.
func (t SeedTable) WriteMarkdown(w io.Writer) error {
	return writeMarkdown(w, t.headings(), t.rows())
}

func (t SeedTable) rows() [][]string {
	var rows [][]string
	for _, r := range t.Rows {
		rows = append(rows, t.cells(r))
	}
	return rows
}

// Row is the row named name, if it ran.
func (t SeedTable) Row(name string) (SeedRow, bool) {
	for _, r := range t.Rows {
		if r.Name == name {
			return r, true
		}
	}
	return SeedRow{}, false
}
