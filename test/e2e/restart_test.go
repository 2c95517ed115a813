package e2e

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// TestControllerCrashAndRestart SIGKILLs the controller, as an OOM kill or a
// lost node would, creates a task while it is down, and starts a new one. The
// new controller picks the task up, and the pod of a task that ran before the
// crash is adopted, not replaced.
func TestControllerCrashAndRestart(t *testing.T) {
	ns := cp.NamespaceT(t)
	ctx := context.Background()
	tasks := cp.GPUTask.GputaskV1().GPUTasks(ns)
	amount := intstr.FromInt32(1)
	newTask := func(name string) {
		t.Helper()
		_, err := tasks.Create(ctx, &gputaskv1.GPUTask{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       gputaskv1.GPUTaskSpec{GPU: gpuModel, GPUAmount: &amount},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}

	newTask("before")
	waitRunning(t, ns, "before")
	podBefore := podsOf(t, ns, "before")

	controller.Kill()
	if !controller.Exited() {
		t.Fatal("controller still runs after SIGKILL")
	}
	newTask("during")
	time.Sleep(time.Second)
	if pods := podsOf(t, ns, "during"); len(pods) != 0 {
		t.Fatalf("task created while the controller was down has pods %v", pods)
	}

	restarted, err := cp.StartController(ctx, "--workers=4")
	if err != nil {
		t.Fatal(err)
	}
	controller = restarted
	waitRunning(t, ns, "during")
	if got := podsOf(t, ns, "before"); len(got) != 1 || got[0] != podBefore[0] {
		t.Errorf("pods of the task that ran before the crash: %v, want the same %v", got, podBefore)
	}
	if got := podsOf(t, ns, "during"); len(got) != 1 {
		t.Errorf("task created during the outage has pods %v, want exactly one", got)
	}
}

func waitRunning(t *testing.T, ns, name string) {
	t.Helper()
	var task *gputaskv1.GPUTask
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, settleTimeout, true, func(ctx context.Context) (bool, error) {
		var err error
		task, err = cp.GPUTask.GputaskV1().GPUTasks(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && task.Status.Phase == gputaskv1.GPUTaskRunning, nil
	})
	if err != nil {
		t.Fatalf("task %s/%s not Running (last status %+v): %v", ns, name, task.Status, err)
	}
}

// podsOf returns the UIDs of the task's pods.
func podsOf(t *testing.T, ns, task string) []string {
	t.Helper()
	list, err := cp.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: gputaskv1.LabelTask + "=" + task})
	if err != nil {
		t.Fatal(err)
	}
	uids := make([]string, 0, len(list.Items))
	for _, pod := range list.Items {
		uids = append(uids, string(pod.UID))
	}
	return uids
}
