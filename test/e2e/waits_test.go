package e2e

// Waits for tasks, pods, sets and metrics to reach a state: each polls the
// API server (or /metrics) and, on timeout, fails the test with what it saw
// last.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

// waitTask waits until the task satisfies ok and returns it.
func waitTask(t *testing.T, c *framework.ControlPlane, ns, name, what string, ok func(*gputaskv1.GPUTask) bool) *gputaskv1.GPUTask {
	t.Helper()
	var task *gputaskv1.GPUTask
	framework.Poll(t, waitTimeout, fmt.Sprintf("gputask %s/%s %s", ns, name, what), func(ctx context.Context) (bool, string) {
		got, err := c.GPUTask.GputaskV1().GPUTasks(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		task = got
		return ok(got), fmt.Sprintf("phase=%s node=%s reschedules=%d", got.Status.Phase, got.Status.NodeName, got.Status.Reschedules)
	})
	return task
}

// waitPhases waits until the namespace's tasks (matching selector) are
// exactly wantRunning Running and wantPending Pending, and returns their names.
func waitPhases(t *testing.T, c *framework.ControlPlane, ns, selector string, wantRunning, wantPending int) (running, pending []string) {
	t.Helper()
	framework.Poll(t, waitTimeout, fmt.Sprintf("%d running and %d pending tasks in %s", wantRunning, wantPending, ns), func(ctx context.Context) (bool, string) {
		list, err := c.GPUTask.GputaskV1().GPUTasks(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		running, pending = nil, nil
		other := 0
		for _, task := range list.Items {
			switch {
			case task.DeletionTimestamp != nil:
				other++
			case task.Status.Phase == gputaskv1.GPUTaskRunning:
				running = append(running, task.Name)
			case task.Status.Phase == gputaskv1.GPUTaskPending && unschedulableForGPUs(&task):
				pending = append(pending, task.Name)
			default:
				other++
			}
		}
		return len(running) == wantRunning && len(pending) == wantPending && other == 0,
			fmt.Sprintf("running %v, pending %v, %d other", running, pending, other)
	})
	return running, pending
}

// waitCounts waits up to 3 minutes until ok holds for the number of the
// namespace's tasks (not being deleted) and pods.
func waitCounts(t *testing.T, c *framework.ControlPlane, ns, what string, ok func(tasks, pods int) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		tasks, pods := countTasksAndPods(t, c, ns)
		return ok(tasks.n, len(pods)), nil
	})
	if err != nil {
		tasks, pods := countTasksAndPods(t, c, ns)
		t.Fatalf("waiting for %s: %v (%d tasks, %d pods)", what, err, tasks.n, len(pods))
	}
}

// waitExact waits until ns holds exactly n tasks and n pods, each pod
// controlled by a task that exists, one per task.
func waitExact(t *testing.T, c *framework.ControlPlane, ns string, n int) {
	t.Helper()
	describe := func() (bool, string) {
		tasks, pods := countTasksAndPods(t, c, ns)
		perTask := map[types.UID]int{}
		dup := 0
		for _, pod := range pods {
			if ref := metav1.GetControllerOf(&pod); ref != nil {
				perTask[ref.UID]++
				if perTask[ref.UID] > 1 {
					dup++
				}
			}
		}
		orphans, examples := orphanCount(tasks, pods), orphanExamples(tasks, pods, 5)
		return tasks.n == n && len(tasks.uids) == n && len(pods) == n && orphans == 0 && dup == 0,
			fmt.Sprintf("%d tasks (%d incl. terminating), %d pods, %d without their task %v, %d duplicates", tasks.n, len(tasks.uids), len(pods), orphans, examples, dup)
	}
	framework.Poll(t, 3*time.Minute, fmt.Sprintf("exactly %d tasks and %d pods", n, n), func(context.Context) (bool, string) { return describe() })
	// Nothing more is coming: the counts hold.
	time.Sleep(3 * time.Second)
	if ok, state := describe(); !ok {
		t.Errorf("after settling: %s, want exactly %d tasks and %d pods", state, n, n)
	}
}

func countTasksAndPods(t *testing.T, c *framework.ControlPlane, ns string) (taskCount, []corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	tasks, err := c.GPUTask.GputaskV1().GPUTasks(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tc := taskCount{uids: map[types.UID]bool{}}
	for _, task := range tasks.Items {
		if task.DeletionTimestamp == nil {
			tc.n++
		}
		tc.uids[task.UID] = true
	}
	pods, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tc, pods.Items
}

func countTasks(t *testing.T, c *framework.ControlPlane, ns string) int {
	t.Helper()
	tasks, _ := countTasksAndPods(t, c, ns)
	return tasks.n
}

// waitSetTasks waits until the set has exactly n tasks, all Running, none
// being deleted, and its status says so.
func waitSetTasks(t *testing.T, ns, set string, n int) {
	t.Helper()
	framework.Poll(t, waitTimeout, fmt.Sprintf("gputaskset %s/%s at %d Running tasks", ns, set, n), func(ctx context.Context) (bool, string) {
		list, err := cp.GPUTask.GputaskV1().GPUTasks(ns).List(ctx, metav1.ListOptions{LabelSelector: gputaskv1.LabelTaskSet + "=" + set})
		if err != nil {
			return false, err.Error()
		}
		running := 0
		for _, task := range list.Items {
			if task.DeletionTimestamp == nil && task.Status.Phase == gputaskv1.GPUTaskRunning {
				running++
			}
		}
		got, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Get(ctx, set, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == n && running == n && got.Status.Replicas == int32(n) && got.Status.RunningReplicas == int32(n),
			fmt.Sprintf("%d tasks, %d running; status replicas=%d running=%d", len(list.Items), running, got.Status.Replicas, got.Status.RunningReplicas)
	})
}

// waitMetrics polls /metrics until every wanted series is there with a good value.
func waitMetrics(t *testing.T, addr string, wants []metricWant) {
	t.Helper()
	framework.Poll(t, waitTimeout, "metrics at "+addr, func(ctx context.Context) (bool, string) {
		status, body := framework.HTTPGet(ctx, "http://"+addr+"/metrics")
		if status != http.StatusOK {
			return false, fmt.Sprintf("status %d", status)
		}
		var missing []string
		for _, w := range wants {
			v, found := framework.MetricValue(body, w.name, w.labels)
			if !found || (w.ok != nil && !w.ok(v)) {
				missing = append(missing, fmt.Sprintf("%s%v (found %v, value %v)", w.name, w.labels, found, v))
			}
		}
		return len(missing) == 0, "missing or wrong: " + strings.Join(missing, "; ")
	})
}

func atLeast(floor float64) func(float64) bool { return func(v float64) bool { return v >= floor } }

func equals(want float64) func(float64) bool { return func(v float64) bool { return v == want } }
