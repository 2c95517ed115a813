package replay

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/gpuprofile"
	"github.com/gputask/gputask-controller/pkg/replay/baseline"
	enginemodel "github.com/gputask/gputask-controller/pkg/replay/engine"
	"github.com/gputask/gputask-controller/pkg/replay/report"
	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

func generatedTrace(t *testing.T, shape string, d time.Duration) workload.Trace {
	t.Helper()
	o := workload.DefaultGenerateOptions(shape)
	o.Duration = d
	return traceOf(t, o)
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
	if got, err := ParsePolicies("oracle-slo,oracle-lag"); err != nil || !slices.Equal(got, []string{baseline.PolicyOracleSLO, baseline.PolicyOracleLag}) {
		t.Errorf("oracle-lag named: got %v, %v", got, err)
	}
	if slices.Contains(AllPolicies, baseline.PolicyOracleLag) {
		t.Error("oracle-lag plays unless named: its search replays each trace about 30 times")
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

// The keda row runs KEDA's default metricType, AverageValue, unless told;
// keda-queue has its two triggers at 0.7 × the slots and 1 waiting per pod.
func TestKEDARows(t *testing.T) {
	tr := workload.Trace{Requests: []workload.Served{{Arrival: 0, Service: time.Second}}}
	c := Config{Concurrency: 8, Set: DefaultSet(), Load: sim.LoadDemand}
	pol, err := c.policy(baseline.PolicyKEDA, tr)
	if err != nil {
		t.Fatal(err)
	}
	if m := pol.(*baseline.KEDA).HPA().Config().Metrics; len(m) != 1 || !m[0].AverageValue {
		t.Errorf("keda metrics %+v, want one AverageValue", m)
	}
	c.KEDAValue = true
	pol, _ = c.policy(baseline.PolicyKEDA, tr)
	if m := pol.(*baseline.KEDA).HPA().Config().Metrics; m[0].AverageValue {
		t.Error("--keda-metric-type Value ignored")
	}
	pol, err = c.policy(baseline.PolicyKEDAQueue, tr)
	if err != nil {
		t.Fatal(err)
	}
	k := pol.(*baseline.KEDA)
	m := k.HPA().Config().Metrics
	if k.Name() != baseline.PolicyKEDAQueue || len(m) != 2 || m[0].Name != "num_requests_running" || math.Abs(m[0].Target-0.7*8) > 1e-9 ||
		m[1].Name != "num_requests_waiting" || m[1].Target != 1 || !m[0].AverageValue || !m[1].AverageValue {
		t.Errorf("keda-queue %s: %+v", k.Name(), m)
	}
	if k.HPA().Config().Behavior == nil {
		t.Error("keda-queue's HPA has no behavior")
	}
}

// Every policy reports node-hours and peak nodes, the table shows them,
// and without node start-up the GPU-hours of the policies whose victims do
// not depend on the nodes stay those of the pool without nodes.
func TestRunReportsNodeHours(t *testing.T) {
	tr := generatedTrace(t, workload.ShapeStep, 3*time.Hour)
	base := Config{Concurrency: 8, Startup: 2 * time.Minute, SLO: 10 * time.Second, Policies: []string{PolicyOurs, baseline.PolicyHPA, baseline.PolicyStatic, baseline.PolicyOracle}}
	without, err := Run(tr, base)
	if err != nil {
		t.Fatal(err)
	}
	withNodes := base
	withNodes.Nodes = &sim.NodeModel{GPUsPerNode: 8, Placement: sim.PlacementSpread, Grace: 30 * time.Second}
	rep, err := Run(tr, withNodes)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range rep.Policies {
		if p.NodeHours <= 0 || p.PeakNodes < 1 {
			t.Errorf("%s: %.2f node-h, peak %d nodes", p.Name, p.NodeHours, p.PeakNodes)
		}
		if want := (p.PeakReplicas + 7) / 8; p.PeakNodes < want {
			t.Errorf("%s: peak %d nodes for %d workers of 8 per node", p.Name, p.PeakNodes, p.PeakReplicas)
		}
		if (p.Name == baseline.PolicyStatic || p.Name == baseline.PolicyOracle) && p.GPUHours != without.Policies[i].GPUHours {
			t.Errorf("%s: %.3f GPU-h with nodes that start at once, %.3f without", p.Name, p.GPUHours, without.Policies[i].GPUHours)
		}
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil || !strings.Contains(table.String(), "node-h") || !strings.Contains(table.String(), "peak nodes") {
		t.Errorf("table: %v\n%s", err, table.String())
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil || !strings.Contains(md.String(), "| node-h | peak nodes |") {
		t.Errorf("markdown: %v\n%s", err, md.String())
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil || !strings.Contains(js.String(), `"node_hours"`) || !strings.Contains(js.String(), `"peak_nodes"`) || !strings.Contains(js.String(), `"gpus_per_node": 8`) || !strings.Contains(js.String(), `"node_startup": "0s"`) {
		t.Errorf("JSON lacks the node figures or the model: %v", err)
	}
	table.Reset()
	if err := without.WriteTable(&table); err != nil || strings.Contains(table.String(), "node-h") {
		t.Errorf("table without nodes shows node columns: %v\n%s", err, table.String())
	}
}

// A set sized for other workers than the replay's is an error that says
// so; the embedded sets follow the workers.
func TestCapacityMismatch(t *testing.T) {
	tr := workload.Trace{Requests: []workload.Served{{Arrival: 0, Service: time.Second}}}
	set := DefaultSet() // slotsPerTask 8
	_, err := Run(tr, Config{Concurrency: 4, Set: set, Policies: []string{PolicyOurs}})
	if err == nil || !strings.Contains(err.Error(), "slotsPerTask 8") || !strings.Contains(err.Error(), "serves 4") {
		t.Errorf("slotsPerTask 8 against 4 slots: %v, want an error naming both", err)
	}
	file := Variant{Name: "mine", Set: set}
	if _, err := Run(tr, Config{Concurrency: 4, Policies: []string{baseline.PolicyStatic}, Variants: []Variant{file}}); err == nil || !strings.Contains(err.Error(), "variant mine") {
		t.Errorf("a variant's file at 8 slots against 4: %v, want an error naming the variant", err)
	}
	builtin, err := ParseVariant("slo")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(tr, Config{Concurrency: 4, Policies: []string{PolicyOurs}, Variants: []Variant{builtin}}); err != nil {
		t.Errorf("the embedded sets on 4 slots: %v", err)
	}
	if _, err := Run(tr, Config{Concurrency: 8, Set: set, Policies: []string{PolicyOurs}}); err != nil {
		t.Errorf("slotsPerTask 8 on 8 slots: %v", err)
	}
	if set.Spec.Autoscaling.Policy.Type != gputaskv1.SLOPolicy {
		t.Fatal("the default set is no longer an SLO set: this test checks nothing")
	}
}

// A set that sizes its tasks by the engine's capacity keeps it on workers
// that run the engine model, which serve as many sequences as the engine
// allows; on fixed-slot workers it is sized as the others.
func TestEngineSizedSetKeepsItsCapacity(t *testing.T) {
	v, err := ParseVariant("slo-engine")
	if err != nil {
		t.Fatal(err)
	}
	if got := withSlots(v.Set, 64, true).Spec.Autoscaling.Policy.SLO.SlotsPerTask; got != 0 {
		t.Errorf("on engine workers: slotsPerTask %d, want none (the engine's capacity)", got)
	}
	if err := checkCapacity("variant slo-engine", v.Set, 64, true); err != nil {
		t.Errorf("on engine workers: %v", err)
	}
	if got := withSlots(v.Set, 64, false).Spec.Autoscaling.Policy.SLO.SlotsPerTask; got != 64 {
		t.Errorf("on fixed-slot workers: slotsPerTask %d, want 64", got)
	}
	if err := checkCapacity("variant slo-engine", v.Set, 64, false); err == nil {
		t.Error("on fixed-slot workers without slotsPerTask: no error")
	}
	sized := withSlots(v.Set, 8, false)
	if err := checkCapacity("variant slo-engine", sized, 64, true); err == nil || !strings.Contains(err.Error(), "slotsPerTask 8") {
		t.Errorf("an override of 8 on engine workers of 64: %v, want the mismatch", err)
	}
}

// On engine workers the zero-wait oracle sizes a worker as the engine
// serves, not by --concurrency: 300 requests of a 1,024-token context
// arriving at once fill two workers of 256 sequences (vLLM's
// max_num_seqs, within a 50 ms ITL there), where slots of 64 would count
// five, and decode at the ITL of a batch of 256.
func TestOracleRunsTheEngine(t *testing.T) {
	profile, err := gpuprofile.Lookup("h100-llama-3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	var tr workload.Trace
	for range 300 {
		tr.Requests = append(tr.Requests, workload.Served{Service: time.Minute})
		tr.Tokens = append(tr.Tokens, workload.Tokens{InputTokens: 1000, OutputTokens: 48})
	}
	rep, err := Run(tr, Config{
		Concurrency: 64, Startup: 2 * time.Minute, SLOITL: 50 * time.Millisecond, SLOPercentile: 95,
		Engine:   &sim.EngineServing{Engine: enginemodel.Config{Profile: profile}},
		Policies: []string{baseline.PolicyOracle},
	})
	if err != nil {
		t.Fatal(err)
	}
	oracle, ok := rep.Oracle()
	if !ok {
		t.Fatal("no oracle")
	}
	itl := profile.ITL(256, 1024)
	if got := time.Duration(oracle.ITLP50 * float64(time.Second)); oracle.PeakReplicas != 2 || got.Round(time.Microsecond) != itl.Round(time.Microsecond) {
		t.Errorf("peak %d at an ITL of %v, want 2 at %v", oracle.PeakReplicas, got, itl)
	}
}
