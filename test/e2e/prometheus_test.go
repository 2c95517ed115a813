package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/autoscaler"
	"github.com/gputask/gputask-controller/pkg/scaling"
	"github.com/gputask/gputask-controller/test/framework"
)

// These tests read the load index from a real Prometheus (bin/prometheus,
// built by `make tools`) that scrapes a gauge the test serves on 127.0.0.1,
// so the Prometheus source meets the real query API, not a handwritten fake.

const (
	// queueTarget is the queue depth per task that Proportional aims for.
	queueTarget = 10
	// queueInterval is spec.autoscaling.interval of the scaling set. It is a
	// few scrape intervals long, so that after a step Prometheus has scraped
	// the depth the new count brings before the next reading; a shorter one
	// would read the old depth again and scale twice, as an HPA does with a
	// metric that lags.
	queueInterval = 3 * time.Second
	// queueMetricName names the metric in status and events.
	queueMetricName = "queue-depth"
)

// TestPrometheusLoadIndex drives sets with the Proportional policy from
// PromQL instant queries on a gauge, queue_depth{queue="a"|"b"}, in parallel
// subtests that share one exporter and one Prometheus.
func TestPrometheusLoadIndex(t *testing.T) {
	t.Parallel()
	exporter := newQueueExporter(t)
	prom := cp.StartPrometheusT(t, exporter.Target())

	// The fixture the subtests rely on, as Prometheus itself answers.
	for query, want := range map[string]int{`avg(queue_depth)`: 1, `queue_depth`: 2, `avg(queue_depth{queue="c"})`: 0} {
		samples, err := prom.Query(context.Background(), query)
		if err != nil {
			t.Fatal(err)
		}
		if len(samples) != want {
			t.Fatalf("Prometheus answers %s with %d samples %v, want %d", query, len(samples), samples, want)
		}
	}

	t.Run("avg scales as the HPA rule says", func(t *testing.T) {
		t.Parallel()
		testProportional(t, exporter, prom)
	})
	t.Run("no sample fails and holds", func(t *testing.T) {
		t.Parallel()
		testQueryFails(t, prom, `avg(queue_depth{queue="c"})`, "invalid answer")
	})
	t.Run("several samples fail and hold", func(t *testing.T) {
		t.Parallel()
		testQueryFails(t, prom, `queue_depth`, "invalid answer")
	})
}

// testProportional: the two queues' work is shared by the set's tasks, so
// each task sees backlog/replicas jobs waiting, and avg(queue_depth) falls as
// tasks are added, as in a real system. With a target of 10 jobs per task
// the HPA rule, ceil(replicas × avg / target), asks for ceil(total / 20):
// backlogs 10+30 hold 2 tasks, 30+50 take them to 4, 70+90 to 8, and 10+30
// back to 2. After each step the depth is on target and the count holds.
func testProportional(t *testing.T, exporter *queueExporter, prom *framework.Prometheus) {
	ns := cp.NamespaceT(t)
	model := createGPUNodes(t, ns, 1, 8)
	rec := recordPool(t, ns)

	const initial = 2
	var mu sync.Mutex
	backlog := map[string]float64{"a": 10, "b": 30}
	setBacklog := func(a, b float64) {
		mu.Lock()
		defer mu.Unlock()
		backlog = map[string]float64{"a": a, "b": b}
	}
	exporter.Serve(func() map[string]float64 {
		replicas := int32(initial)
		if set, err := rec.setLister.GPUTaskSets(ns).Get(poolName); err == nil {
			replicas = max(ptr.Deref(set.Spec.Replicas, 1), 1)
		}
		mu.Lock()
		defer mu.Unlock()
		depth := make(map[string]float64, len(backlog))
		for queue, jobs := range backlog {
			depth[queue] = jobs / float64(replicas)
		}
		return depth
	})

	createPool(t, ns, queuePool(model, initial, queueInterval, prom.URL, `avg(queue_depth)`))

	steps := []struct {
		a, b float64
		want int32
		// reason is the decision that takes the set to want; then it holds
		// there, WithinTolerance.
		reason string
	}{
		{10, 30, 2, scaling.ReasonWithinTolerance},
		{30, 50, 4, scaling.ReasonProportionalScaleUp},
		{70, 90, 8, scaling.ReasonProportionalScaleUp},
		{10, 30, 2, scaling.ReasonProportionalScaleDown},
	}
	// sequence and reasons are what spec.replicas and the decisions go
	// through, each listed once per run of equal values.
	var sequence []int32
	var reasons []string
	for _, step := range steps {
		setBacklog(step.a, step.b)
		sequence = append(sequence, step.want)
		what := fmt.Sprintf("backlog %v+%v: %d tasks", step.a, step.b, step.want)
		if step.reason != scaling.ReasonWithinTolerance {
			rec.waitSet(t, what+" after "+step.reason, func(s *gputaskv1.GPUTaskSet) bool {
				return ptr.Deref(s.Spec.Replicas, 1) == step.want
			})
		}
		// A decision made at the new count, on the depth that count
		// brings, holds it: the step was one step, not a run.
		rec.waitSet(t, what+", held within tolerance", func(s *gputaskv1.GPUTaskSet) bool {
			d := s.Status.LastDecision
			return s.Status.Replicas == step.want && d != nil && d.From == step.want && d.To == step.want &&
				d.Reason == scaling.ReasonWithinTolerance && s.Status.LoadIndex == "10" &&
				conditionIs(s, gputaskv1.ConditionScalingActive, metav1.ConditionTrue, autoscaler.ReasonValidMetricFound)
		})
		if got := rec.replicaSequence(); !slices.Equal(got, sequence) {
			t.Fatalf("%s: spec.replicas went %v, want %v", what, got, sequence)
		}
		if step.reason != scaling.ReasonWithinTolerance {
			reasons = append(reasons, step.reason)
		}
		reasons = append(reasons, scaling.ReasonWithinTolerance)
		set := rec.set(t)
		t.Logf("%s: load index %s, decision %q", what, set.Status.LoadIndex, set.Status.LastDecision.Message)
	}
	if got := rec.reasons(); !slices.Equal(got, reasons) {
		t.Errorf("decisions went %v, want %v", got, reasons)
	}
	waitEvents(t, ns, gputaskv1.ReasonScaledUp, corev1.EventTypeNormal, "New size: 4", "New size: 8")
	waitEvents(t, ns, gputaskv1.ReasonScaledDown, corev1.EventTypeNormal, "New size: 2")
	t.Logf("kubectl get gts:\n%s", cp.KubectlT(t, "get", "gts", "-n", ns))
}

// testQueryFails: a query that does not answer exactly one sample is a
// failed read, not a zero or a sum: ScalingActive turns False with reason
// FailedGetLoadIndex and a message saying what came back, a Warning event
// says the same, and the count holds past the failure threshold.
func testQueryFails(t *testing.T, prom *framework.Prometheus, query, message string) {
	const replicas = 3
	ns := cp.NamespaceT(t)
	model := createGPUNodes(t, ns, 1, replicas)
	rec := recordPool(t, ns)

	createPool(t, ns, queuePool(model, replicas, poolInterval, prom.URL, query))

	rec.waitSet(t, "ScalingActive False past the failure threshold", func(s *gputaskv1.GPUTaskSet) bool {
		c := meta.FindStatusCondition(s.Status.Conditions, gputaskv1.ConditionScalingActive)
		return conditionIs(s, gputaskv1.ConditionScalingActive, metav1.ConditionFalse, scaling.ReasonFailedGetLoadIndex) &&
			strings.Contains(c.Message, message) && s.Status.ConsecutiveFailures > scaling.DefaultFailureThreshold &&
			decisionReason(s) == scaling.ReasonFailedGetLoadIndex && s.Status.RunningReplicas == replicas
	})
	waitEvents(t, ns, scaling.ReasonFailedGetLoadIndex, corev1.EventTypeWarning, message)
	set := rec.set(t)
	t.Logf("%s: %d failures in a row, decision %q", query, set.Status.ConsecutiveFailures, set.Status.LastDecision.Message)
	if got := rec.replicaSequence(); !slices.Equal(got, []int32{replicas}) {
		t.Errorf("spec.replicas went %v, want it held at %d", got, replicas)
	}
	if set.Status.Replicas != replicas || len(rec.deletedTasks()) > 0 {
		t.Errorf("status.replicas %d, deleted tasks %v; want %d tasks and none deleted",
			set.Status.Replicas, rec.deletedTasks(), replicas)
	}
	if set.Status.LoadIndex != "" {
		t.Errorf("status.loadIndex = %q, want none: no value was ever read", set.Status.LoadIndex)
	}
}

// queuePool is a pool with the Proportional policy at its default
// tolerance (0.1), reading query from the Prometheus at serverAddress, with
// no scale-down stabilization so that every decision shows at once.
func queuePool(model string, replicas int32, interval time.Duration, serverAddress, query string) poolSpec {
	return poolSpec{
		replicas: replicas, min: 1, max: 10, model: model, interval: interval,
		prometheus:   &gputaskv1.PrometheusSource{ServerAddress: serverAddress, Query: query},
		metricName:   queueMetricName,
		proportional: true,
		target:       fmt.Sprint(queueTarget),
	}
}

// queueExporter serves the gauge queue_depth, one series per queue, in the
// Prometheus text format on 127.0.0.1, with the values its depth function
// gives at each scrape.
type queueExporter struct {
	srv *httptest.Server

	mu    sync.Mutex
	depth func() map[string]float64
}

func newQueueExporter(t *testing.T) *queueExporter {
	e := &queueExporter{depth: func() map[string]float64 { return map[string]float64{"a": 5, "b": 15} }}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", e.serve)
	// httptest listens on 127.0.0.1 with a free port.
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	return e
}

// Target is the exporter's host:port, for Prometheus's static_configs.
func (e *queueExporter) Target() string { return e.srv.Listener.Addr().String() }

// Serve makes each scrape answer depth's values from now on.
func (e *queueExporter) Serve(depth func() map[string]float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.depth = depth
}

func (e *queueExporter) serve(w http.ResponseWriter, _ *http.Request) {
	e.mu.Lock()
	depth := e.depth()
	e.mu.Unlock()
	// Prometheus 3 refuses a scrape without a known Content-Type.
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	fmt.Fprintln(w, "# HELP queue_depth Jobs waiting per task, by queue.")
	fmt.Fprintln(w, "# TYPE queue_depth gauge")
	for _, queue := range slices.Sorted(maps.Keys(depth)) {
		fmt.Fprintf(w, "queue_depth{queue=%q} %g\n", queue, depth[queue])
	}
}
