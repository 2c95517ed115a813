package e2e

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/autoscaler"
	"github.com/gputask/gputask-controller/pkg/scaling"
	"github.com/gputask/gputask-controller/test/framework"
	"github.com/gputask/gputask-controller/test/framework/fakevllm"
)

// The vLLM example's file, the Prometheus address it names (which the
// tests replace with their own), and its model name; and the fake pool.
const (
	vllmExample     = "artifacts/examples/autoscaling/gputaskset-vllm.yaml"
	vllmPlaceholder = "http://prometheus.monitoring:9090"
	vllmModel       = "llama"
	// The fake pool keeps one worker of 8 slots of 2s whatever the set's
	// count: the tests look at one decision, made before a new task serves.
	vllmWorkers      = 1
	vllmSlotsPerTask = 8
	vllmServiceTime  = 2 * time.Second
	// vllmArrivalRate is requests/s, twice what the pool finishes.
	vllmArrivalRate = 8
)

// TestVLLMMetrics scales SLO sets whose metrics are the documented vLLM
// block, the example's PromQL queries as they are, read from a real
// Prometheus scraping a fake vLLM pool (test/framework/fakevllm) on
// 127.0.0.1. The pool is one worker of 8 slots offered twice what it can
// serve, so requests run, wait and finish, and the queue time grows.
func TestVLLMMetrics(t *testing.T) {
	t.Parallel()
	pool := fakevllm.New(fakevllm.Config{
		ModelName: vllmModel, Rate: func(time.Duration) float64 { return vllmArrivalRate },
		ServiceTime: vllmServiceTime, SlotsPerWorker: vllmSlotsPerTask,
		Workers: func() int { return vllmWorkers }, Seed: 1,
	}.WithH100Tokens())
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", pool)
	// httptest listens on 127.0.0.1 with a free port.
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	prom := cp.StartPrometheusT(t, srv.Listener.Addr().String())
	example := vllmExampleSet(t, prom.URL)

	t.Run("every role is read and the count is the pure decision's", func(t *testing.T) {
		t.Parallel()
		// The pool finishes 4 requests/s. rate(...[1m]) divides what
		// finished by the whole minute, so it reads 4/s only once
		// Prometheus has scraped for a minute; half of that, some 30s in,
		// is a pool that serves, and half the wait.
		waitVLLMQueries(t, prom, example.Spec.Autoscaling.Metrics, gputaskv1.RoleCompletions, 0.5*vllmSlotsPerTask/vllmServiceTime.Seconds())
		testSLOExampleDecision(t, example)
	})
	t.Run("a set stored without a Running metric holds its count", func(t *testing.T) {
		t.Parallel()
		testVLLMMissingRole(t, example)
	})
}

// testSLOExampleDecision: the autoscaler reads each of the metrics by its
// role and scales to the count that scaling.Decide gives for the readings
// it shows in status, with the same reason and model inputs, and the pool
// then runs that many tasks.
func testSLOExampleDecision(t *testing.T, example *gputaskv1.GPUTaskSet) {
	ns := cp.NamespaceT(t)
	model := createGPUNodes(t, ns, 1, 8)
	rec := recordPool(t, ns)

	set := example.DeepCopy()
	set.Name = poolName
	set.Spec.Template.Spec.GPU = model
	// One decision within the test: the next would learn from this one's
	// readings, which the pure decision below does not have.
	set.Spec.Autoscaling.Interval = &gputaskv1.Duration{Duration: 10 * time.Minute}
	if _, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Create(context.Background(), set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := rec.waitSet(t, "the first decision", func(s *gputaskv1.GPUTaskSet) bool {
		d := s.Status.LastDecision
		return d != nil && (d.To == d.From || s.Status.LastScaleTime != nil)
	})
	d := got.Status.LastDecision
	t.Logf("decision %d -> %d %s: %s; inputs %s", d.From, d.To, d.Reason, d.Message, d.Inputs)

	readings := make([]scaling.MetricInput, 0, len(got.Spec.Autoscaling.Metrics))
	for _, m := range got.Spec.Autoscaling.Metrics {
		i := slices.IndexFunc(got.Status.Metrics, func(s gputaskv1.MetricStatus) bool { return s.Name == m.Name })
		if i < 0 || got.Status.Metrics[i].Value == "" || got.Status.Metrics[i].Error != "" {
			t.Fatalf("metric %s (role %s) was not read: %+v", m.Name, m.Role, got.Status.Metrics)
		}
		v, err := strconv.ParseFloat(got.Status.Metrics[i].Value, 64)
		if err != nil {
			t.Fatalf("metric %s: %v", m.Name, err)
		}
		r := scaling.MetricFor(m)
		r.Value = v
		readings = append(readings, r)
	}
	if !conditionIs(got, gputaskv1.ConditionScalingActive, metav1.ConditionTrue, autoscaler.ReasonValidMetricFound) {
		t.Errorf("ScalingActive is not True ValidMetricFound: %s", describeStatus(got))
	}

	// The decision as the autoscaler made it: from d.From tasks, of which
	// startingReplicas were starting, looking ahead by the start-up time
	// its inputs name, from a fresh start.
	before := got.DeepCopy()
	before.Spec.Replicas = ptr.To(d.From)
	before.Status = gputaskv1.GPUTaskSetStatus{}
	in := scaling.InputsFor(before, d.Time.Time, readings, nil, nil)
	in.Starting = got.Status.StartingReplicas
	in.Startup = inputDuration(t, d.Inputs, "startup")
	in.LastScaleTime = time.Time{}
	pure := scaling.Decide(in)
	if pure.Desired <= d.From {
		t.Fatalf("the pure decision is %d from %d (%s): the load must ask for a scale-up", pure.Desired, d.From, pure.Message)
	}
	if d.To != pure.Desired || ptr.Deref(got.Spec.Replicas, 0) != pure.Desired || d.Reason != pure.Reason {
		t.Errorf("decision %d -> %d %s, spec.replicas %d; the pure decision is %d %s: %s",
			d.From, d.To, d.Reason, ptr.Deref(got.Spec.Replicas, 0), pure.Desired, pure.Reason, pure.Message)
	}
	// The readings in status are rounded to 6 digits, so the inputs derived
	// from them agree to about that.
	want := parseInputs(pure.Inputs)
	have := parseInputs(d.Inputs)
	for key, w := range want {
		if !closeEnough(have[key], w) {
			t.Errorf("lastDecision.inputs %s=%s, the pure decision's %s", key, have[key], w)
		}
	}
	if _, ok := have["predicted-p95-wait"]; !ok {
		t.Errorf("lastDecision.inputs %q lacks the predicted wait", d.Inputs)
	}

	rec.waitSet(t, fmt.Sprintf("%d tasks Ready", pure.Desired), func(s *gputaskv1.GPUTaskSet) bool {
		return s.Status.Replicas == pure.Desired && s.Status.ReadyReplicas == pure.Desired
	})
	if seq := rec.replicaSequence(); !slices.Equal(seq, []int32{d.From, pure.Desired}) {
		t.Errorf("spec.replicas went %v, want %d then %d", seq, d.From, pure.Desired)
	}
	if d.PredictedWait == "" || !strings.Contains(d.Inputs, "predicted-p95-wait="+d.PredictedWait) {
		t.Errorf("lastDecision.predictedWait = %q, want the wait inputs %q predict", d.PredictedWait, d.Inputs)
	}
	out := cp.KubectlT(t, "get", "gts", "-n", ns)
	t.Logf("kubectl get gts:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !slices.Contains(strings.Fields(lines[0]), "PREDICTED-WAIT") || !slices.Contains(strings.Fields(lines[1]), d.PredictedWait) {
		t.Errorf("kubectl get gts shows no PREDICTED-WAIT column with %q:\n%s", d.PredictedWait, out)
	}
}

// TestSLOHTTPExample: the HTTP source reads the same roles by JSON path.
// The example set's four metrics, unchanged but for the URL, read the
// answer its comment shows from a router on 127.0.0.1, and the set scales
// to the pure decision's count as the vLLM set does.
func TestSLOHTTPExample(t *testing.T) {
	t.Parallel()
	const (
		file        = "artifacts/examples/autoscaling/gputaskset-slo-http.yaml"
		placeholder = "http://llm-router.inference.svc:8080/stats"
		answer      = `{"requests":{"completed_per_second":3.2,"running":20,"waiting":4,"wait_p95_seconds":1.8}}`
	)
	raw, err := os.ReadFile(filepath.Join(cp.Root, file))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), answer) {
		t.Fatalf("%s no longer shows the answer %s; update the test to match", file, answer)
	}
	router := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, answer)
	}))
	t.Cleanup(router.Close)
	testSLOExampleDecision(t, exampleSLOSet(t, file, placeholder, router.URL+"/stats"))
}

// testVLLMMissingRole: a set without the Running metric, as stored before
// the CRD required one, keeps its count and says why in ScalingActive
// (MissingMetricRole) and SpecValid.
func testVLLMMissingRole(t *testing.T, example *gputaskv1.GPUTaskSet) {
	ns := cp.NamespaceT(t)
	model := createGPUNodes(t, ns, 1, 8)
	rec := recordPool(t, ns)

	const replicas = 2
	set := example.DeepCopy()
	set.Name, set.Namespace = poolName, ns
	set.Spec.Template.Spec.GPU = model
	set.Spec.Replicas = ptr.To[int32](replicas)
	set.Spec.Autoscaling.Interval = &gputaskv1.Duration{Duration: time.Second}
	set.Spec.Autoscaling.Metrics = slices.DeleteFunc(set.Spec.Autoscaling.Metrics, func(m gputaskv1.MetricSpec) bool {
		return m.Role == gputaskv1.RoleRunning
	})
	if _, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Create(context.Background(), set, metav1.CreateOptions{}); err == nil ||
		!strings.Contains(err.Error(), "role Running") {
		t.Fatalf("the CRD let in an SLO set without a Running metric (err %v): the test needs it refused", err)
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(set)
	if err != nil {
		t.Fatal(err)
	}
	obj["apiVersion"], obj["kind"] = gputaskv1.SchemeGroupVersion.String(), "GPUTaskSet"
	delete(obj, "status")
	if err := cp.StoreUnvalidated(context.Background(), gputaskv1.SchemeGroupVersion.Group, "gputasksets", obj); err != nil {
		t.Fatal(err)
	}

	holding := fmt.Sprintf("the SLO policy needs a metric of role Running; holding at %d", replicas)
	got := rec.waitSet(t, "ScalingActive False MissingMetricRole", func(s *gputaskv1.GPUTaskSet) bool {
		c := meta.FindStatusCondition(s.Status.Conditions, gputaskv1.ConditionScalingActive)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == scaling.ReasonMissingMetricRole && c.Message == holding &&
			s.Status.Replicas == replicas
	})
	if c := meta.FindStatusCondition(got.Status.Conditions, gputaskv1.ConditionSpecValid); c == nil || c.Status != metav1.ConditionFalse ||
		!strings.Contains(c.Message, "role Running") {
		t.Errorf("SpecValid = %+v, want False naming the Running role", c)
	}
	if seq := rec.replicaSequence(); !slices.Equal(seq, []int32{replicas}) {
		t.Errorf("spec.replicas went %v, want it held at %d", seq, replicas)
	}
	if got.Status.LastDecision != nil {
		t.Errorf("lastDecision = %+v, want none: the set is not evaluated", got.Status.LastDecision)
	}
}

// vllmExampleSet is the vLLM example set with serverAddress pointed at the
// test's Prometheus, and nothing else changed.
func vllmExampleSet(t *testing.T, promURL string) *gputaskv1.GPUTaskSet {
	t.Helper()
	return exampleSLOSet(t, vllmExample, vllmPlaceholder, promURL)
}

// exampleSLOSet reads an example SLO set with the address placeholder
// replaced by url, and checks that it has a metric of every role.
func exampleSLOSet(t *testing.T, file, placeholder, url string) *gputaskv1.GPUTaskSet {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(cp.Root, file))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), placeholder) {
		t.Fatalf("%s no longer names %s; update the test to match", file, placeholder)
	}
	raw = []byte(strings.ReplaceAll(string(raw), placeholder, url))
	var set gputaskv1.GPUTaskSet
	if err := yaml.UnmarshalStrict(raw, &set); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	roles := map[gputaskv1.MetricRole]bool{}
	for _, m := range set.Spec.Autoscaling.Metrics {
		roles[m.Role] = true
	}
	for _, role := range []gputaskv1.MetricRole{gputaskv1.RoleCompletions, gputaskv1.RoleRunning, gputaskv1.RoleWaiting, gputaskv1.RoleWaitPercentile} {
		if !roles[role] {
			t.Fatalf("%s has no metric of role %s", file, role)
		}
	}
	return &set
}

// waitVLLMQueries waits until each query answers one finite sample, as
// the Prometheus source needs (the rates need two scrapes, and the queue
// time's percentile a finished request), and the metric of role atLeast
// answers at least floor.
func waitVLLMQueries(t *testing.T, prom *framework.Prometheus, metrics []gputaskv1.MetricSpec, role gputaskv1.MetricRole, floor float64) {
	t.Helper()
	framework.Poll(t, waitTimeout, fmt.Sprintf("every vLLM query to answer, %s at least %g", role, floor), func(ctx context.Context) (bool, string) {
		var answers []string
		for _, m := range metrics {
			samples, err := prom.Query(ctx, m.Prometheus.Query)
			if err != nil {
				return false, err.Error()
			}
			if len(samples) != 1 || math.IsNaN(samples[0].Value) || math.IsInf(samples[0].Value, 0) {
				return false, fmt.Sprintf("%s answers %v", m.Name, samples)
			}
			if m.Role == role && samples[0].Value < floor {
				return false, fmt.Sprintf("%s answers %g", m.Name, samples[0].Value)
			}
			answers = append(answers, fmt.Sprintf("%s=%g", m.Name, samples[0].Value))
		}
		t.Logf("the vLLM queries answer %s", strings.Join(answers, " "))
		return true, ""
	})
}

var inputPair = regexp.MustCompile(`([a-z0-9-]+)=(\S+)`)

// parseInputs splits lastDecision.inputs into its key=value pairs.
func parseInputs(s string) map[string]string {
	out := map[string]string{}
	for _, m := range inputPair.FindAllStringSubmatch(s, -1) {
		out[m[1]] = m[2]
	}
	return out
}

func inputDuration(t *testing.T, inputs, key string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(parseInputs(inputs)[key])
	if err != nil {
		t.Fatalf("lastDecision.inputs %q: %s: %v", inputs, key, err)
	}
	return d
}

// closeEnough compares two input values, numbers (with a unit such as
// "/s" or a duration) within 1e-4 of each other, and anything else as text.
func closeEnough(a, b string) bool {
	if a == b {
		return true
	}
	x, okA := inputNumber(a)
	y, okB := inputNumber(b)
	return okA && okB && math.Abs(x-y) <= 1e-4*max(math.Abs(x), math.Abs(y), 1e-9)
}

func inputNumber(s string) (float64, bool) {
	if v, err := strconv.ParseFloat(strings.TrimSuffix(s, "/s"), 64); err == nil {
		return v, true
	}
	if d, err := time.ParseDuration(s); err == nil {
		return d.Seconds(), true
	}
	return 0, false
}

// TestVLLMBlockDocumented: the metric block that docs/autoscaling.md shows
// for vLLM is the example's, which TestVLLMMetrics runs.
func TestVLLMBlockDocumented(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(cp.Root, "docs", "autoscaling.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "## Scaling to a wait SLO")
	if !ok {
		t.Fatal("docs/autoscaling.md has no section on the SLO policy")
	}
	_, block, ok := strings.Cut(section, "```yaml\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("the SLO section of docs/autoscaling.md has no yaml block")
	}
	var documented struct {
		Autoscaling gputaskv1.AutoscalingSpec `json:"autoscaling"`
	}
	if err := yaml.UnmarshalStrict([]byte(block), &documented); err != nil {
		t.Fatalf("the documented block: %v", err)
	}
	example := vllmExampleSet(t, vllmPlaceholder)
	if !equality.Semantic.DeepEqual(documented.Autoscaling.Metrics, example.Spec.Autoscaling.Metrics) {
		t.Errorf("docs/autoscaling.md documents the metrics\n%s\nbut %s has\n%s", toYAML(documented.Autoscaling.Metrics), vllmExample, toYAML(example.Spec.Autoscaling.Metrics))
	}
	// The documented policy spells out the defaults too; the objectives and
	// the slots are the example's.
	doc, ex := documented.Autoscaling.Policy.SLO, example.Spec.Autoscaling.Policy.SLO
	if doc == nil || ex == nil || !equality.Semantic.DeepEqual(doc.Wait, ex.Wait) || !equality.Semantic.DeepEqual(doc.TTFT, ex.TTFT) ||
		!equality.Semantic.DeepEqual(doc.ITL, ex.ITL) || doc.SlotsPerTask != ex.SlotsPerTask || !equality.Semantic.DeepEqual(doc.Percentile, ex.Percentile) {
		t.Errorf("docs/autoscaling.md documents the SLO %s, %s has %s", toYAML(doc), vllmExample, toYAML(ex))
	}
}

func toYAML(v any) string {
	out, err := yaml.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(out)
}
