package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gputask/gputask-controller/test/framework"
)

// TestObservability runs the controller (with leader election, so that
// /healthz includes the lease watchdog) on a control plane of its own, with
// its metrics and health servers on loopback ports. /healthz and /readyz
// answer 200 once the caches have synced; /metrics carries the workqueue,
// reconcile and autoscaler series an operator alerts on, including the
// load-index error counter once the endpoint fails; and the log is
// structured, with objects as namespace/name key=value pairs.
func TestObservability(t *testing.T) {
	t.Parallel()
	c := startCluster(t, gpuNode{"a100-1", "A100", 8})
	ctx := context.Background()
	leaseNS := c.NamespaceT(t)
	ns := c.NamespaceT(t)

	controller := c.StartControllerT(t, "--workers=2",
		"--metrics-bind-address=127.0.0.1:0", "--metrics-secure=false", "--health-probe-bind-address=127.0.0.1:0",
		"--leader-elect", "--leader-elect-resource-namespace="+leaseNS)
	metricsAddr, probeAddr := framework.ServingAddrT(t, controller, "metrics"), framework.ServingAddrT(t, controller, "health probes")

	sawNotReady := false
	framework.Poll(t, 30*time.Second, "/healthz and /readyz 200", func(ctx context.Context) (bool, string) {
		health, _ := framework.HTTPGet(ctx, "http://"+probeAddr+"/healthz")
		ready, body := framework.HTTPGet(ctx, "http://"+probeAddr+"/readyz")
		sawNotReady = sawNotReady || ready == http.StatusInternalServerError
		return health == http.StatusOK && ready == http.StatusOK, fmt.Sprintf("healthz %d, readyz %d %q", health, ready, body)
	})
	t.Logf("healthz and readyz 200; readyz answered 500 before the caches synced: %v", sawNotReady)
	if !logContains(controller, "Informer caches synced; ready") {
		t.Errorf("/readyz is 200 but the controller has not logged that its caches synced")
	}

	createTask(t, c, ns, newTask("probe", "A100", 1))
	waitTask(t, c, ns, "probe", "Running", taskRunning)
	waitMetrics(t, metricsAddr, []metricWant{
		{"workqueue_depth", map[string]string{"name": "gputask-controller"}, nil},
		{"workqueue_queue_duration_seconds_count", map[string]string{"name": "gputask-controller"}, atLeast(1)},
		{"workqueue_work_duration_seconds_count", map[string]string{"name": "gputask-controller"}, atLeast(1)},
		{"workqueue_adds_total", map[string]string{"name": "gputask-controller"}, atLeast(1)},
		{"gputask_reconcile_total", map[string]string{"controller": "gputask-controller", "result": "success"}, atLeast(1)},
		{"gputask_reconcile_duration_seconds_count", map[string]string{"controller": "gputask-controller"}, atLeast(1)},
		{"gputask_reconcile_duration_seconds_bucket", map[string]string{"controller": "gputask-controller", "le": "+Inf"}, atLeast(1)},
	})

	// An autoscaled set reading a load endpoint of the test's own.
	var failing atomic.Bool
	load := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if failing.Load() {
			http.Error(w, "backend down", http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, `{"data":{"load_balance":0.9}}`)
	}))
	t.Cleanup(load.Close)
	scaled := httpSet("scaled", "A100", load.URL, 3, time.Second)
	scaled.Spec.Autoscaling.Policy.StepUp = ptr.To[int32](1)
	_, err := c.GPUTask.GputaskV1().GPUTaskSets(ns).Create(ctx, scaled, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]string{"namespace": ns, "taskset": "scaled"}
	withMetric := map[string]string{"namespace": ns, "taskset": "scaled", "metric": "load"}
	up := map[string]string{"namespace": ns, "taskset": "scaled", "direction": "up"}
	waitMetrics(t, metricsAddr, []metricWant{
		{"gputask_taskset_load_index", withMetric, equals(0.9)},
		{"gputask_taskset_desired_replicas", set, atLeast(2)},
		{"gputask_taskset_current_replicas", set, atLeast(2)},
		{"gputask_taskset_scaling_decisions_total", up, atLeast(1)},
		{"gputask_reconcile_total", map[string]string{"controller": "gputaskset-controller", "result": "success"}, atLeast(1)},
	})

	failing.Store(true)
	waitMetrics(t, metricsAddr, []metricWant{
		{"gputask_taskset_load_index_errors_total", withMetric, atLeast(1)},
	})

	// Structured logs: klog.KObj renders objects as namespace/name values.
	for _, want := range [][]string{
		{`"Created pod"`, fmt.Sprintf(`gputask="%s/probe"`, ns), fmt.Sprintf(`pod="%s/probe"`, ns)},
		{fmt.Sprintf(`gputaskset="%s/scaled"`, ns)},
	} {
		if !logContains(controller, want...) {
			t.Errorf("no log line with %v in %s", want, controller.LogPath)
		}
	}
}

// metricWant is a series that must be in /metrics, with a check of its value
// (nil: any value).
type metricWant struct {
	name   string
	labels map[string]string
	ok     func(float64) bool
}
