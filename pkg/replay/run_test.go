package replay

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gputask/gputask-controller/pkg/replay/baseline"
	"github.com/gputask/gputask-controller/pkg/replay/report"
	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

func generatedTrace(t *testing.T, shape string, d time.Duration) workload.Trace {
	t.Helper()
	o := workload.DefaultGenerateOptions(shape)
	o.Duration = d
	reqs, err := workload.Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := workload.WriteCSV(&buf, reqs); err != nil {
		t.Fatal(err)
	}
	tr, err := workload.ReadTrace(&buf, workload.TraceOptions{TimeColumn: workload.ColumnTimestamp, Service: workload.ServiceModel{
		InputTokensColumn: workload.ColumnInputTokens, OutputTokensColumn: workload.ColumnOutputTokens,
		PrefillPerSecond: 4000, DecodePerSecond: 40,
	}})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// The oracle is a lower bound of the policies that let no request wait:
// none of those rows uses fewer GPU-hours, none waits in it, and it keeps
// a worker through a gap shorter than a startup. oracle-slo, which lets
// requests wait within the SLO, may spend less.
func TestOracleIsALowerBound(t *testing.T) {
	tr := generatedTrace(t, workload.ShapeFlash, 2*time.Hour)
	rep, err := Run(tr, Config{Concurrency: 8, Startup: 2 * time.Minute, SLO: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	oracle, ok := rep.Oracle()
	if !ok {
		t.Fatal("no oracle")
	}
	for _, p := range rep.Policies {
		if p.GPUHours < oracle.GPUHours && p.Name != baseline.PolicyOracleSLO {
			t.Errorf("%s: %.2f GPU-h, below the oracle's %.2f", p.Name, p.GPUHours, oracle.GPUHours)
		}
	}
	if oracle.WaitP99 != 0 || oracle.FailedRequests != 0 || oracle.SLOAttainment != 1 {
		t.Errorf("oracle = %+v", oracle)
	}

	gap := workload.Trace{Requests: []workload.Served{{Arrival: 0, Service: time.Minute}, {Arrival: 90 * time.Second, Service: time.Minute}, {Arrival: time.Hour, Service: time.Minute}}}
	res := baseline.Oracle{Concurrency: 1, Startup: time.Minute}.Run(gap, time.Second)
	// One worker 0–2m30s (kept through the 30s gap), one created at 59m
	// for the request at 1h: 2.5 + 2 minutes.
	if want := (4*time.Minute + 30*time.Second).Hours(); res.GPUHours < want-1e-9 || res.GPUHours > want+1e-9 {
		t.Errorf("GPU-hours = %v, want %v", res.GPUHours, want)
	}
}

// Every policy runs on the same trace; the JSON has the promised fields.
func TestRunWritesEveryPolicy(t *testing.T) {
	tr := generatedTrace(t, workload.ShapeStep, 3*time.Hour)
	rep, err := Run(tr, Config{Concurrency: 8, Startup: 2 * time.Minute, SLO: 10 * time.Second, Name: "step"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Policies) != len(AllPolicies) {
		t.Fatalf("policies = %d", len(rep.Policies))
	}
	byName := map[string]sim.Result{}
	for _, p := range rep.Policies {
		byName[p.Name] = p
		if len(p.Series) == 0 {
			t.Errorf("%s: no series", p.Name)
		}
	}
	if byName[PolicyOurs].FailedRequests != 0 {
		t.Errorf("ours lost %d requests; it drains busy workers", byName[PolicyOurs].FailedRequests)
	}
	if byName[baseline.PolicyStatic].PeakReplicas != int(baseline.PeakWorkers(tr, 8)) || byName[baseline.PolicyStatic].WaitP99 != 0 {
		t.Errorf("static = %+v", byName[baseline.PolicyStatic])
	}

	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Policies []map[string]any        `json:"policies"`
		Series   map[string][]sim.Sample `json:"series"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"name", "gpu_hours", "wait_p50_s", "wait_p95_s", "wait_p99_s", "slo_attainment", "failed_requests", "scale_events", "peak_replicas"} {
		if _, ok := doc.Policies[0][key]; !ok {
			t.Errorf("JSON lacks %q", key)
		}
	}
	if len(doc.Series[PolicyOurs]) == 0 {
		t.Error("JSON lacks the series")
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil || !strings.Contains(table.String(), "oracle") {
		t.Errorf("table: %v\n%s", err, table.String())
	}

	plot := filepath.Join(t.TempDir(), "step.png")
	if err := report.Plot(rep, plot); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(plot); err != nil || fi.Size() == 0 {
		t.Errorf("plot: %v", err)
	}
}

func TestParsePolicies(t *testing.T) {
	got, err := ParsePolicies("ours, hpa,ours")
	if err != nil || len(got) != 2 {
		t.Errorf("got %v, %v", got, err)
	}
	if _, err := ParsePolicies("ours,vpa"); err == nil {
		t.Error("unknown policy: no error")
	}
}

func TestVariants(t *testing.T) {
	for _, name := range BuiltinVariants {
		v, err := ParseVariant(name)
		if err != nil || v.Name != name || v.Set.Spec.Autoscaling == nil {
			t.Errorf("ParseVariant(%q) = %+v, %v", name, v, err)
		}
	}
	for _, bad := range []string{"", "nope", "a b", "x=/nonexistent.yaml"} {
		if _, err := ParseVariant(bad); err == nil {
			t.Errorf("ParseVariant(%q): want an error", bad)
		}
	}
	burst, err := ParseVariant("burst")
	if err != nil {
		t.Fatal(err)
	}
	if burst.Set.Spec.Autoscaling.Burst == nil {
		t.Error("the burst variant has no burst block")
	}
	var tr workload.Trace
	for i := range 600 {
		tr.Requests = append(tr.Requests, workload.Served{Arrival: time.Duration(i) * time.Second, Service: 5 * time.Second})
	}
	rep, err := Run(tr, Config{Concurrency: 2, Startup: time.Minute, Policies: []string{PolicyOurs}, Variants: []Variant{burst}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Policies) != 2 || rep.Policies[1].Name != "ours+burst" || len(rep.Series["ours+burst"]) == 0 {
		t.Errorf("policies %d, second %q, series %d; want ours then ours+burst with a series", len(rep.Policies), rep.Policies[1].Name, len(rep.Series["ours+burst"]))
	}
	if _, err := Run(tr, Config{Concurrency: 2, Policies: []string{PolicyOurs}, Variants: []Variant{burst, burst}}); err == nil {
		t.Error("a variant given twice: want an error")
	}
}

// A run with batched serving needs a trace with token columns.
func TestRunBatchedNeedsTokens(t *testing.T) {
	tr := workload.Trace{Requests: []workload.Served{{Arrival: 0, Service: time.Second}}}
	_, err := Run(tr, Config{Concurrency: 1, Policies: []string{baseline.PolicyStatic}, Batched: &sim.DefaultITL})
	if err == nil || !strings.Contains(err.Error(), "token columns") {
		t.Errorf("Run without tokens = %v, want an error naming the token columns", err)
	}
}
