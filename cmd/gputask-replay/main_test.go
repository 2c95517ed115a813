package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gputask/gputask-controller/pkg/replay"
)

// generate writes a trace that the replay reads back with the token flags,
// and the replay prints the table and writes the JSON and the plot.
func TestGenerateAndReplay(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "flash.csv")
	var out, errOut bytes.Buffer
	if err := run([]string{"generate", "--shape", "flash", "--duration", "90m", "--surge-at", "30m", "--out", trace}, &out, &errOut); err != nil {
		t.Fatalf("generate: %v\n%s", err, errOut.String())
	}
	jsonPath, plotPath := filepath.Join(dir, "out.json"), filepath.Join(dir, "out", "flash.svg")
	args := []string{
		"--trace", trace, "--time-column", "Timestamp",
		"--input-tokens-column", "Request tokens", "--output-tokens-column", "Response tokens",
		"--prefill-tokens-per-second", "4000", "--decode-tokens-per-second", "40",
		"--concurrency", "8", "--startup", "5m", "--policies", "ours,hpa,oracle",
		"--json", jsonPath, "--plot", plotPath,
	}
	if err := run(args, &out, &errOut); err != nil {
		t.Fatalf("replay: %v\n%s", err, errOut.String())
	}
	for _, want := range []string{"ours", "hpa", "oracle", "GPU-h", "node-h", "peak nodes", "8-GPU nodes placed by spread, 3m0s node start-up, 30s consolidateAfter, when-empty-or-underutilized consolidation, replicaset Deployment victims", "evictions"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Policies []struct {
			Name string `json:"name"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || len(doc.Policies) != 3 {
		t.Errorf("JSON: %v, %d policies", err, len(doc.Policies))
	}
	if _, err := os.Stat(plotPath); err != nil {
		t.Errorf("plot: %v", err)
	}
}

func TestReplayFlagErrors(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "t.csv")
	if err := os.WriteFile(trace, []byte("t\n0\n1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--time-column", "t", "--concurrency", "1"}, "required"},
		{[]string{"--trace", trace, "--time-column", "t", "--concurrency", "1"}, "no service time"},
		{[]string{"--trace", trace, "--time-column", "t", "--concurrency", "1", "--service", "1s", "--load", "queue"}, "unknown load index"},
		{[]string{"--trace", trace, "--time-column", "t", "--concurrency", "1", "--service", "1s", "--policies", "vpa"}, "unknown policy"},
		{[]string{"--trace", trace, "--time-column", "x", "--concurrency", "1", "--service", "1s"}, `line 1: no column "x"`},
		{[]string{"--trace", trace, "--time-column", "t", "--concurrency", "1", "--service", "1s", "--set", filepath.Join(dir, "none.yaml")}, "reading the GPUTaskSet"},
		{[]string{"--trace", trace, "--time-column", "t", "--concurrency", "1", "--service", "1s", "--grace", "-1s"}, "--grace must not be negative"},
		{[]string{"--trace", trace, "--time-column", "t", "--concurrency", "1", "--service", "1s", "--hpa-behavior", filepath.Join(dir, "none.yaml")}, "--hpa-behavior: reading the HPA behavior"},
		{[]string{"--trace", trace, "--time-column", "t", "--concurrency", "1", "--service", "1s", "--hpa-behavior", trace}, "--hpa-behavior"},
		{[]string{"--trace", trace, "--time-column", "t", "--concurrency", "1", "--service", "1s", "--source", "statsd"}, "--source must be http or prometheus"},
		{[]string{"--trace", trace, "--time-column", "t", "--concurrency", "1", "--service", "1s", "--source", "prometheus", "--scrape-interval", "0s"}, "--scrape-interval must be above 0"},
		{[]string{"--trace", trace, "--time-column", "t", "--concurrency", "1", "--service", "1s", "--keda-metric-type", "Utilization"}, "--keda-metric-type must be Value or AverageValue"},
		{[]string{"--trace", trace, "--time-column", "t", "--concurrency", "1", "--service", "1s", "--serving", "batched"}, "--serving batched needs the trace's token columns"},
		{[]string{"--trace", trace, "--time-column", "t", "--concurrency", "1", "--service", "1s", "--serving", "paged"}, "--serving must be fixed, batched or engine"},
		{[]string{"--trace", trace, "--time-column", "t", "--concurrency", "1", "--service", "1s", "--serving", "engine"}, "--serving engine needs --engine, and a trace's token columns"},
		{[]string{"--trace", trace, "--time-column", "t", "--concurrency", "1", "--service", "1s", "--engine", "h100-llama-3.1-8b"}, "--serving engine needs --engine, and a trace's token columns"},
		{[]string{"--trace", trace, "--time-column", "t", "--concurrency", "1", "--input-tokens-column", "t", "--output-tokens-column", "t", "--engine", "a100"}, "--engine: no embedded GPU profile"},
		{[]string{"--trace", trace, "--time-column", "t", "--concurrency", "1", "--input-tokens-column", "t", "--output-tokens-column", "t", "--engine", "h100-llama-3.1-8b", "--router", "random"}, "unknown router"},
		{[]string{"--trace", trace, "--time-column", "t", "--concurrency", "1", "--input-tokens-column", "t", "--output-tokens-column", "t", "--engine", "h100-llama-3.1-8b", "--max-num-seqs", "-1"}, "max num seqs -1"},
		{[]string{"--trace", trace, "--time-column", "t", "--concurrency", "1", "--service", "1s", "--placement", "bestfit"}, "--placement: unknown placement"},
		{[]string{"--trace", trace, "--time-column", "t", "--concurrency", "1", "--service", "1s", "--gpus-per-node", "-1"}, "--gpus-per-node must not be negative"},
		{[]string{"--trace", trace, "--time-column", "t", "--concurrency", "1", "--service", "1s", "--node-grace", "-1s"}, "grace -1s: want both >= 0"},
		{[]string{"generate", "--shape", "sine"}, "unknown shape"},
	} {
		var out, errOut bytes.Buffer
		err := run(tc.args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

// With --engine the workers run the engine model on the profile, routed
// least-outstanding, and the prefill and decode rates are not needed.
func TestReplayEngine(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "flash.csv")
	var out, errOut bytes.Buffer
	if err := run([]string{"generate", "--shape", "flash", "--duration", "30m", "--surge-at", "10m", "--out", trace}, &out, &errOut); err != nil {
		t.Fatalf("generate: %v\n%s", err, errOut.String())
	}
	for _, router := range []string{"least-outstanding", "pooled"} {
		out.Reset()
		args := []string{
			"--trace", trace, "--time-column", "Timestamp",
			"--input-tokens-column", "Request tokens", "--output-tokens-column", "Response tokens",
			"--engine", "h100-llama-3.1-8b", "--max-num-seqs", "128", "--router", router,
			"--concurrency", "64", "--policies", "ours,static,oracle",
		}
		if err := run(args, &out, &errOut); err != nil {
			t.Fatalf("replay: %v\n%s", err, errOut.String())
		}
		for _, want := range []string{"engine serving on h100-llama-3.1-8b (max 128 sequences, 8192 batched tokens), " + router + " router", "static"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q:\n%s", want, out.String())
			}
		}
	}
}

func TestReplayWithService(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "t.csv")
	if err := os.WriteFile(trace, []byte("when\n2024-05-01 10:00:00\n2024-05-01 10:00:01.5\n2024-05-01 10:00:03\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err := run([]string{"--trace", trace, "--time-column", "when", "--service", "lognormal:20s,0.5", "--concurrency", "2", "--rate-scale", "2", "--markdown"}, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "| ours |") {
		t.Errorf("markdown table:\n%s", out.String())
	}
}

// stepAndFlash generates an hour of the step and the flash shapes into
// dir and returns their paths.
func stepAndFlash(t *testing.T, dir string) []string {
	t.Helper()
	var paths []string
	for _, shape := range []string{"step", "flash"} {
		path := filepath.Join(dir, shape+".csv")
		var out, errOut bytes.Buffer
		if err := run([]string{"generate", "--shape", shape, "--duration", "1h", "--surge-at", "20m", "--out", path}, &out, &errOut); err != nil {
			t.Fatalf("generate: %v\n%s", err, errOut.String())
		}
		paths = append(paths, path)
	}
	return paths
}

// Several --trace flags: one table per trace, hpa-best's target searched
// over all of them, and each trace's JSON beside the path given.
func TestReplaySeveralTraces(t *testing.T) {
	dir := t.TempDir()
	paths := stepAndFlash(t, dir)
	var out, errOut bytes.Buffer
	err := run([]string{
		"--trace", paths[0], "--trace", paths[1], "--time-column", "Timestamp", "--service", "20s",
		"--concurrency", "8", "--policies", "hpa,hpa-best", "--json", filepath.Join(dir, "out.json"),
	}, &out, &errOut)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	for _, want := range []string{"step.csv:", "flash.csv:", "\nhpa-best-one: ", "over 2 traces", "hpa-best, per trace: step.csv "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, name := range []string{"out-step.json", "out-flash.json"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
}

// --shape draws the synthetic traces in the replay and --seeds draws them
// again per seed: one table per trace, each figure's mean and range.
func TestReplaySeeds(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run([]string{
		"--shape", "flash", "--seeds", "2", "--prefill-tokens-per-second", "4000", "--decode-tokens-per-second", "40",
		"--concurrency", "8", "--policies", "static,oracle", "--gpus-per-node", "0", "--slo-ttft", "2s",
	}, &out, &errOut)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	for _, want := range []string{"flash: 2 seeds from 1", "mean [min–max]", "2/2 seeds", "TTFT≤2s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if err := run([]string{"--shape", "tidal", "--concurrency", "8"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "unknown shape") {
		t.Errorf("an unknown shape: %v", err)
	}
}

// After the tables the replay judges ours against the targets over the
// traces of the run: a target whose anchor row did not run is not
// measured. The path given to --json gets the verdict: beside the report
// with one trace, alone with several.
func TestReplayTargets(t *testing.T) {
	dir := t.TempDir()
	paths := stepAndFlash(t, dir)
	flags := []string{"--time-column", "Timestamp", "--service", "20s", "--concurrency", "8", "--gpus-per-node", "0",
		"--policies", "ours,hpa-best,hpa-best-one,oracle", "--markdown"}
	var out, errOut bytes.Buffer
	several := filepath.Join(dir, "several.json")
	if err := run(append([]string{"--trace", paths[0], "--trace", paths[1], "--json", several}, flags...), &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	s := out.String()
	section := strings.Index(s, "\nours against the targets over 2 traces")
	if section < strings.Index(s, "hpa-best, per trace:") {
		t.Errorf("no section of the targets after the tables:\n%s", s)
	}
	for _, want := range []string{"| step.csv | ", "| flash.csv | ", "| sum (2 traces) | ", "- GPU-h ≤ 1.15× oracle-slo, summed: not measured\n"} {
		if !strings.Contains(s[section+1:], want) {
			t.Errorf("section lacks %q:\n%s", want, s[section+1:])
		}
	}
	verdicts := func(path string, wantPolicies int) []string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Policies []json.RawMessage `json:"policies"`
			Targets  struct {
				Verdicts []struct {
					Verdict string `json:"verdict"`
				} `json:"verdicts"`
			} `json:"targets"`
		}
		if err := json.Unmarshal(b, &doc); err != nil || len(doc.Policies) != wantPolicies {
			t.Errorf("%s: %v, %d policies, want %d", path, err, len(doc.Policies), wantPolicies)
		}
		var out []string
		for _, v := range doc.Targets.Verdicts {
			out = append(out, v.Verdict)
		}
		return out
	}
	// Every row but oracle-slo ran: each of their targets is judged.
	judged := func(vs []string) bool {
		return len(vs) == 6 && vs[4] == "not measured" && !slices.Contains(append(slices.Clone(vs[:4]), vs[5]), "not measured")
	}
	if vs := verdicts(several, 0); !judged(vs) {
		t.Errorf("%s: verdicts %q", several, vs)
	}
	if vs := verdicts(filepath.Join(dir, "several-step.json"), 4); len(vs) != 0 {
		t.Errorf("a trace's report of several has verdicts %q", vs)
	}
	one := filepath.Join(dir, "one.json")
	if err := run(append([]string{"--trace", paths[1], "--json", one}, flags...), &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	if vs := verdicts(one, 4); !judged(vs) {
		t.Errorf("%s: verdicts %q", one, vs)
	}
}

// With --seeds the verdict reads each trace's figures over the seeds,
// printed after the tables and written to the JSON beside them.
func TestReplaySeedsTargets(t *testing.T) {
	jsonPath := filepath.Join(t.TempDir(), "seeds.json")
	var out, errOut bytes.Buffer
	err := run([]string{
		"--shape", "step", "--seeds", "2", "--prefill-tokens-per-second", "4000", "--decode-tokens-per-second", "40",
		"--concurrency", "8", "--policies", "ours,oracle", "--gpus-per-node", "0", "--json", jsonPath,
	}, &out, &errOut)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	for _, want := range []string{"\nours against the targets over 1 trace (", "GPU-h ≤ 1.00× hpa-best, summed: not measured\n", "peak ≤ 1.5× oracle's + 2 on every trace: "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Targets struct {
			Traces []struct {
				Trace string `json:"trace"`
				Rows  map[string]struct {
					Seeds int `json:"seeds"`
				} `json:"rows"`
				PeakBound float64 `json:"peak_bound"`
			} `json:"traces"`
		} `json:"targets"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || len(doc.Targets.Traces) != 1 {
		t.Fatalf("JSON: %v, %+v", err, doc.Targets)
	}
	if tr := doc.Targets.Traces[0]; tr.Trace != "step" || tr.Rows["ours"].Seeds != 2 || tr.PeakBound < 2 {
		t.Errorf("JSON trace %+v, want step with ours over 2 seeds and the oracle's peak bound", tr)
	}
}

// --decisions writes each evaluation of ours, of every seed, a line of
// JSON each; a path that cannot be created is an error before any replay.
func TestReplayDecisions(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "decisions.jsonl")
	var out, errOut bytes.Buffer
	err := run([]string{
		"--shape", "step", "--seeds", "2", "--prefill-tokens-per-second", "4000", "--decode-tokens-per-second", "40",
		"--concurrency", "8", "--policies", "ours", "--gpus-per-node", "0", "--decisions", path,
	}, &out, &errOut)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	perSeed := map[uint64]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r replay.DecisionRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.Trace != "step" || r.Policy != "ours" || r.LastDecision == nil {
			t.Fatalf("line %q: %+v, %v", line, r, err)
		}
		perSeed[r.Seed]++
	}
	// Six hours at one evaluation each 15 s.
	if len(perSeed) != 2 || perSeed[1] < 6*240 || perSeed[2] < 6*240 {
		t.Errorf("decisions per seed %v, want at least %d for each of seeds 1 and 2", perSeed, 6*240)
	}
	err = run([]string{"--shape", "step", "--concurrency", "8", "--prefill-tokens-per-second", "4000", "--decode-tokens-per-second", "40",
		"--decisions", filepath.Join(dir, "none", "decisions.jsonl")}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "--decisions:") {
		t.Errorf("a path in no directory: %v", err)
	}
}
