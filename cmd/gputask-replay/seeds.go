package main

import (
	"fmt"
	"io"

	"github.com/gputask/gputask-controller/pkg/replay"
	"github.com/gputask/gputask-controller/pkg/replay/report"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// drawShapes draws each synthetic shape with seed.
func drawShapes(shapes []string, seed uint64, rateScale float64, model workload.ServiceModel) ([]replay.NamedTrace, error) {
	var out []replay.NamedTrace
	for _, shape := range shapes {
		tr, err := workload.GenerateShape(shape, seed, rateScale, model)
		if err != nil {
			return nil, fmt.Errorf("--shape %s: %w", shape, err)
		}
		out = append(out, replay.NamedTrace{Name: shape, Trace: tr})
	}
	return out, nil
}

// replaySeeds replays the traces n times, the shapes drawn and the
// start-ups seeded with seed, seed+1, …, and prints one table per trace
// of each figure's mean and range over the seeds; jsonPath gets those
// tables. A trace read from a file is the same on every seed; only its
// start-ups are drawn anew.
func replaySeeds(w io.Writer, files []replay.NamedTrace, shapes []string, n int, seed uint64, rateScale float64, model workload.ServiceModel, c replay.Config, markdown bool, jsonPath string) error {
	var runs [][]report.Report
	var bests []string
	for i := range n {
		s := seed + uint64(i)
		drawn, err := drawShapes(shapes, s, rateScale, model)
		if err != nil {
			return err
		}
		traces := append(append([]replay.NamedTrace(nil), files...), drawn...)
		c.StartupSeed = s
		reports, best, err := replay.RunTraces(traces, c)
		if err != nil {
			return fmt.Errorf("seed %d: %w", s, err)
		}
		runs = append(runs, reports)
		if best != nil {
			bests = append(bests, fmt.Sprintf("seed %d: %s", s, best.Summary(len(traces))))
		}
	}
	tables := report.SummarizeSeeds(runs)
	for i, t := range tables {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s: %d seeds from %d, %v startup, SLO %s; each figure's mean [min–max]\n", t.Trace, n, seed, runs[0][i].Startup, t.SLO)
		var err error
		if markdown {
			err = t.WriteMarkdown(w)
		} else {
			err = t.WriteTable(w)
		}
		if err != nil {
			return err
		}
	}
	for _, b := range bests {
		fmt.Fprintf(w, "\n%s\n", b)
	}
	targets := report.TargetsOf(tables)
	if err := printTargets(w, targets, markdown); err != nil {
		return err
	}
	if jsonPath == "" {
		return nil
	}
	return writeJSON(jsonPath, struct {
		Seeds   int                `json:"seeds"`
		Traces  []report.SeedTable `json:"traces"`
		Targets report.Targets     `json:"targets"`
	}{n, tables, targets})
}
