package e2e

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// TestGPUCapacity fills the cluster past its GPUs: six tasks of 3 GPUs on two
// nodes of 8 fit four (two per node, 2 GPUs left on each). The other two stay
// Pending, and their status carries the scheduler's reason. Deleting a
// running task frees 3 GPUs, and a pending task takes them.
func TestGPUCapacity(t *testing.T) {
	ns := cp.NamespaceT(t)
	ctx := context.Background()
	tasks := cp.GPUTask.GputaskV1().GPUTasks(ns)
	amount := intstr.FromInt32(3)
	for i := range 6 {
		_, err := tasks.Create(ctx, &gputaskv1.GPUTask{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("job-%d", i)},
			Spec:       gputaskv1.GPUTaskSpec{GPU: gpuModel, GPUAmount: &amount},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}

	running, pending := waitForSplit(t, ns, 4, 2)
	perNode := map[string]int{}
	for _, task := range running {
		perNode[task.Status.NodeName]++
	}
	for _, node := range nodeNames {
		if perNode[node] != 2 {
			t.Errorf("node %s runs %d tasks, want 2 (running: %v)", node, perNode[node], perNode)
		}
	}
	for _, task := range pending {
		if task.Status.NodeName != "" {
			t.Errorf("pending task %s has node %q", task.Name, task.Status.NodeName)
		}
	}
	cond := meta.FindStatusCondition(pending[0].Status.Conditions, gputaskv1.ConditionScheduled)
	t.Logf("%s: Scheduled=%s reason=%s message=%q", pending[0].Name, cond.Status, cond.Reason, cond.Message)
	t.Logf("kubectl get gt:\n%s", cp.KubectlT(t, "get", "gt", "-n", ns))

	victim := running[0].Name
	if err := tasks.Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	running, pending = waitForSplit(t, ns, 4, 1)
	for _, task := range running {
		if task.Name == victim {
			t.Errorf("deleted task %s still listed as running", victim)
		}
	}
	t.Logf("after deleting %s: running %v, pending %v", victim, names(running), names(pending))
}

// waitForSplit waits until the namespace has exactly wantRunning Running
// tasks and wantPending Pending tasks whose Scheduled condition mirrors the
// scheduler's "Insufficient nvidia.com/gpu", and nothing else.
func waitForSplit(t *testing.T, ns string, wantRunning, wantPending int) (running, pending []gputaskv1.GPUTask) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := cp.GPUTask.GputaskV1().GPUTasks(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		running, pending = nil, nil
		var other []string
		for _, task := range list.Items {
			switch {
			case task.DeletionTimestamp != nil:
				other = append(other, task.Name+"=deleting")
			case task.Status.Phase == gputaskv1.GPUTaskRunning:
				running = append(running, task)
			case task.Status.Phase == gputaskv1.GPUTaskPending && unschedulableForGPUs(&task):
				pending = append(pending, task)
			default:
				other = append(other, fmt.Sprintf("%s=%s%v", task.Name, task.Status.Phase, task.Status.Conditions))
			}
		}
		last = fmt.Sprintf("running %v, pending %v, other %v", names(running), names(pending), other)
		return len(running) == wantRunning && len(pending) == wantPending && len(other) == 0, nil
	})
	if err != nil {
		t.Fatalf("want %d running and %d unschedulable tasks; last seen %s: %v", wantRunning, wantPending, last, err)
	}
	return running, pending
}

func names(tasks []gputaskv1.GPUTask) []string {
	out := make([]string, 0, len(tasks))
	for _, task := range tasks {
		out = append(out, task.Name)
	}
	sort.Strings(out)
	return out
}
