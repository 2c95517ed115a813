package e2e

// Fault tests: the controller killed with SIGKILL mid-way, a quota that
// refuses creates forever, a pod the API server refuses. Each asserts
// counts of objects and of API writes, never durations.

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

// TestFaultKill9WithoutGarbageCollector runs a control plane without
// kube-controller-manager, so no garbage collector deletes the pods of
// deleted tasks: the controller alone must. It SIGKILLs the controller in
// the middle of creating 200 tasks, then in the middle of a scale-in to
// 40 (and deletes 50 tasks while it is down), and after each restart
// counts exactly the wanted tasks and one pod for each, none left over.
func TestFaultKill9WithoutGarbageCollector(t *testing.T) {
	t.Parallel()
	const (
		created = 200
		kept    = 40
	)
	c := framework.StartT(t, framework.Options{})
	ns := c.NamespaceT(t)
	ctx := context.Background()
	args := []string{"--workers=4", "--kube-api-qps=200", "--kube-api-burst=400"}
	ctrl := c.StartControllerT(t, args...)

	createSet(t, c, ns, created)

	// Kill during the creation.
	waitCounts(t, c, ns, "some pods created", func(tasks, pods int) bool { return pods >= created/4 })
	ctrl.Kill()
	tasks, pods := countTasksAndPods(t, c, ns)
	t.Logf("killed during creation at %d tasks and %d pods", tasks.n, len(pods))
	ctrl = c.StartControllerT(t, args...)
	waitExact(t, c, ns, created)

	// Kill during the scale-in.
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, kept)
	if _, err := c.GPUTask.GputaskV1().GPUTaskSets(ns).Patch(ctx, "pool", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, c, ns, "scale-in under way", func(tasks, pods int) bool { return tasks <= created-40 })
	ctrl.Kill()
	// While the controller is down, 50 more tasks are deleted, as kubectl
	// delete would; with no garbage collector their pods stay.
	list, err := c.GPUTask.GputaskV1().GPUTasks(ns).List(ctx, metav1.ListOptions{Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range list.Items {
		if err := c.GPUTask.GputaskV1().GPUTasks(ns).Delete(ctx, task.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tasks, pods = countTasksAndPods(t, c, ns)
	orphans := orphanCount(tasks, pods)
	t.Logf("killed during scale-in; then %d tasks and %d pods, %d of them without their task", tasks.n, len(pods), orphans)
	if orphans < len(list.Items) {
		t.Fatalf("%d pods without their task before the restart, want at least %d", orphans, len(list.Items))
	}
	c.StartControllerT(t, args...)
	waitExact(t, c, ns, kept)

}

// TestFaultQuotaLoopBacksOff: a set of 5 under a quota of 3 GPUTasks fails
// every create for ever. After the first minute its failures must cost a
// handful of API writes a minute, not a loop: the ReplicaFailure message is
// the same on every attempt, so the status is not written again, and the
// retries follow the queue's backoff.
func TestFaultQuotaLoopBacksOff(t *testing.T) {
	// Beside the others, on a control plane of its own: the writes it
	// counts are the API server's, of every namespace. It needs no
	// scheduler: the quota refuses the tasks, not their pods.
	t.Parallel()
	c := framework.StartT(t, framework.Options{})
	c.StartControllerT(t, "--workers=2")
	ns := c.NamespaceT(t)
	ctx := context.Background()
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "gputasks"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/gputasks.gputask.io": resource.MustParse("3")}},
	}
	if _, err := c.Kube.CoreV1().ResourceQuotas(ns).Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The quota admission counts only once the quota's status is filled in:
	// without kube-controller-manager's quota controller, here.
	waitQuotaStatus(t, c, ns, quota)

	replicas := int32(5)
	amount := intstr.FromInt32(1)
	set := &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: "quota"},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: &replicas,
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{GPU: gpuModel, GPUAmount: &amount}},
		},
	}
	if _, err := c.GPUTask.GputaskV1().GPUTaskSets(ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var failure *metav1.Condition
	framework.Poll(t, waitTimeout, "ReplicaFailure on the set", func(ctx context.Context) (bool, string) {
		s, err := c.GPUTask.GputaskV1().GPUTaskSets(ns).Get(ctx, "quota", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		failure = meta.FindStatusCondition(s.Status.Conditions, gputaskv1.ConditionReplicaFailure)
		return failure != nil && s.Status.Replicas == 3, fmt.Sprintf("replicas %d, conditions %v", s.Status.Replicas, s.Status.Conditions)
	})
	if strings.Contains(failure.Message, "quota-") && !strings.Contains(failure.Message, "quota-*") {
		t.Errorf("ReplicaFailure message holds a generated name: %q", failure.Message)
	}

	// The first minute is the backoff's ramp.
	time.Sleep(time.Minute)
	before := gputaskWrites(t, c)
	time.Sleep(time.Minute)
	after := gputaskWrites(t, c)
	writes := after - before
	t.Logf("writes to gputasks and gputasksets in the second minute: %v", writes)
	if writes > 6 {
		t.Errorf("%v writes to gputasks and gputasksets in the second minute of a standing quota failure, want at most 6", writes)
	}
	if s, err := c.GPUTask.GputaskV1().GPUTaskSets(ns).Get(ctx, "quota", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if got := meta.FindStatusCondition(s.Status.Conditions, gputaskv1.ConditionReplicaFailure); got == nil || got.Message != failure.Message {
		t.Errorf("ReplicaFailure changed from %q to %+v", failure.Message, got)
	}
	if n := countTasks(t, c, ns); n != 3 {
		t.Errorf("%d tasks under a quota of 3", n)
	}
}

// TestFaultPodRefused: a task whose pod the API server refuses (an invalid
// environment variable name gets a 422) shows PodCreateFailed with the
// API's message, and its retries back off: a bounded number of creates.
func TestFaultPodRefused(t *testing.T) {
	// Beside the others: no other test makes a pod the API server refuses
	// as invalid.
	t.Parallel()
	ns := cp.NamespaceT(t)
	ctx := context.Background()
	before := apiRequests(t, cp, map[string]string{"resource": "pods", "verb": "POST", "code": "422"})
	amount := intstr.FromInt32(1)
	task := &gputaskv1.GPUTask{
		ObjectMeta: metav1.ObjectMeta{Name: "refused"},
		Spec:       gputaskv1.GPUTaskSpec{GPU: gpuModel, GPUAmount: &amount, Env: []corev1.EnvVar{{Name: "1=BAD", Value: "x"}}},
	}
	if _, err := cp.GPUTask.GputaskV1().GPUTasks(ns).Create(ctx, task, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitTask(t, cp, ns, "refused", "PodCreateFailed", func(task *gputaskv1.GPUTask) bool {
		return meta.IsStatusConditionTrue(task.Status.Conditions, gputaskv1.ConditionPodCreateFailed)
	})
	cond := meta.FindStatusCondition(got.Status.Conditions, gputaskv1.ConditionPodCreateFailed)
	if cond.Reason != "Invalid" || !strings.Contains(cond.Message, "env") {
		t.Errorf("PodCreateFailed = %s: %q, want reason Invalid and the API's message about env", cond.Reason, cond.Message)
	}

	// In 40 s, exponential backoff from 5 ms allows about 13 attempts; a
	// loop would make thousands.
	time.Sleep(40 * time.Second)
	attempts := apiRequests(t, cp, map[string]string{"resource": "pods", "verb": "POST", "code": "422"}) - before
	t.Logf("refused pod creates: %v", attempts)
	if attempts < 1 || attempts > 20 {
		t.Errorf("%v refused pod creates, want between 1 and 20", attempts)
	}
	if pods := podsOf(t, ns, "refused"); len(pods) != 0 {
		t.Errorf("refused task has pods %v", pods)
	}
}

// --- helpers ---

type taskCount struct {
	n    int
	uids map[types.UID]bool
}

// orphanCount counts the pods whose controlling task does not exist.
func orphanCount(tasks taskCount, pods []corev1.Pod) int {
	n := 0
	for _, pod := range pods {
		if ref := metav1.GetControllerOf(&pod); ref == nil || !tasks.uids[ref.UID] {
			n++
		}
	}
	return n
}

// orphanExamples describes up to max pods whose controlling task does not
// exist, for a failure message.
func orphanExamples(tasks taskCount, pods []corev1.Pod, max int) []string {
	var out []string
	for _, pod := range pods {
		ref := metav1.GetControllerOf(&pod)
		if ref != nil && tasks.uids[ref.UID] {
			continue
		}
		if len(out) == max {
			break
		}
		desc := fmt.Sprintf("%s (created %s, rv %s", pod.Name, pod.CreationTimestamp.Format(time.RFC3339), pod.ResourceVersion)
		if ref != nil {
			desc += fmt.Sprintf(", owner %s/%s", ref.Name, ref.UID)
		}
		if pod.DeletionTimestamp != nil {
			desc += ", terminating"
		}
		out = append(out, desc+")")
	}
	return out
}

func waitQuotaStatus(t *testing.T, c *framework.ControlPlane, ns string, quota *corev1.ResourceQuota) {
	t.Helper()
	framework.Poll(t, waitTimeout, "quota status", func(ctx context.Context) (bool, string) {
		q, err := c.Kube.CoreV1().ResourceQuotas(ns).Get(ctx, quota.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if len(q.Status.Hard) > 0 {
			return true, ""
		}
		q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{"count/gputasks.gputask.io": resource.MustParse("0")}}
		_, err = c.Kube.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, q, metav1.UpdateOptions{})
		return err == nil, fmt.Sprint(err)
	})
}

// gputaskWrites is the API server's count of create, update and patch
// requests on GPUTasks and GPUTaskSets, any namespace, any outcome.
func gputaskWrites(t *testing.T, c *framework.ControlPlane) float64 {
	t.Helper()
	var sum float64
	for _, res := range []string{"gputasks", "gputasksets"} {
		for _, verb := range []string{"POST", "PUT", "PATCH"} {
			sum += apiRequests(t, c, map[string]string{"group": gputaskv1.SchemeGroupVersion.Group, "resource": res, "verb": verb})
		}
	}
	return sum
}

var metricLabel = regexp.MustCompile(`(\w+)="([^"]*)"`)

// apiRequests sums apiserver_request_total over the series whose labels
// include want, read from the API server's /metrics.
func apiRequests(t *testing.T, c *framework.ControlPlane, want map[string]string) float64 {
	t.Helper()
	body, err := c.Kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("reading the API server's metrics: %v", err)
	}
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		end := strings.LastIndex(line, "}")
		labels := map[string]string{}
		for _, m := range metricLabel.FindAllStringSubmatch(line[:end], -1) {
			labels[m[1]] = m[2]
		}
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
		if err != nil {
			t.Fatalf("parsing %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// TestFaultAPIServerRestart restarts kube-apiserver while the controller
// creates 50 tasks, and again before a scale-in to 20. The controller
// recovers on its own each time and converges to exactly the wanted tasks,
// one pod each, never a duplicate.
func TestFaultAPIServerRestart(t *testing.T) {
	// Its own control plane: it runs beside the package's other tests.
	t.Parallel()
	c := framework.StartT(t, framework.Options{})
	ns := c.NamespaceT(t)
	ctx := context.Background()
	c.StartControllerT(t, "--workers=4")

	createSet(t, c, ns, 50)
	waitCounts(t, c, ns, "creation under way", func(tasks, pods int) bool { return tasks > 0 })
	if err := c.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	waitExact(t, c, ns, 50)

	if err := c.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GPUTask.GputaskV1().GPUTaskSets(ns).Patch(ctx, "pool", types.MergePatchType, []byte(`{"spec":{"replicas":20}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitExact(t, c, ns, 20)
}
