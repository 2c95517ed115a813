//go:build realnode

package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

// TestFaultCrashingContainer: a task whose container exits 3 after a
// second. Its pod (restartPolicy Never, the default) ends Failed with the
// container's exit code in its status, and the controller places a new pod
// on the node: status.reschedules counts it, a Rescheduled event says so,
// and the new container is started by the kubelet.
func TestFaultCrashingContainer(t *testing.T) {
	ns := cp.NamespaceT(t)
	ctx := context.Background()
	task := newTask("crasher", 1)
	c := &task.Spec.Template.Spec.Containers[0]
	c.Image = framework.WorkerImage
	c.Args = []string{"--crash-after=1s", "--crash-code=3"}
	// The Failed pod is replaced at once: an informer, started first, sees
	// it before it goes.
	pods := watchPods(t, ns)
	if _, err := cp.GPUTask.GputaskV1().GPUTasks(ns).Create(ctx, task, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cp.GPUTask.GputaskV1().GPUTasks(ns).Delete(context.Background(), task.Name, metav1.DeleteOptions{})
	})

	var first string
	framework.Poll(t, 2*time.Minute, "the task's first pod Failed, its container exited 3", func(context.Context) (bool, string) {
		var failed []string
		for uid, st := range pods.terminated() {
			if st.ExitCode == 3 && st.Reason == "Error" && st.phase == corev1.PodFailed && st.node == nodeName {
				failed = append(failed, uid)
			}
		}
		if len(failed) > 0 {
			first = failed[0]
		}
		return len(failed) > 0, fmt.Sprint(pods.terminated())
	})
	framework.Poll(t, 2*time.Minute, "a new pod of the task started on the node", func(ctx context.Context) (bool, string) {
		got, err := cp.GPUTask.GputaskV1().GPUTasks(ns).Get(ctx, task.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		p, err := cp.Kube.CoreV1().Pods(ns).Get(ctx, got.Status.PodName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		started := len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].ContainerID != ""
		return got.Status.Reschedules >= 1 && got.Status.LastRescheduleTime != nil && string(p.UID) != first && p.Spec.NodeName == nodeName && started,
			fmt.Sprintf("reschedules %d, pod %s (first %s) on %q, started %t", got.Status.Reschedules, p.UID, first, p.Spec.NodeName, started)
	})
	framework.Poll(t, time.Minute, "a Rescheduled event on the task", func(ctx context.Context) (bool, string) {
		events := taskEvents(ctx, ns, task.Name)
		return strings.Contains(events, gputaskv1.ReasonRescheduled), events
	})
	t.Logf("kubectl get gt:\n%s\nevents:\n%s", cp.KubectlT(t, "get", "gt", "-o", "wide", "-n", ns), taskEvents(ctx, ns, task.Name))
}

// TestFaultNodeDeleted: `kubectl delete node` under a running task. The
// kubelet goes on running but does not register its Node again, so it is
// restarted, as an operator would; the Node comes back with its GPUs, and
// the task's pod is placed on it again: a new pod, counted in
// status.reschedules, with a Rescheduled event.
func TestFaultNodeDeleted(t *testing.T) {
	TestNodeHasDevicePluginGPUs(t)
	ns := cp.NamespaceT(t)
	ctx := context.Background()
	before := runTask(t, ns, newTask("node-deleted", 1))
	cp.KubectlT(t, "delete", "node", nodeName)

	framework.Poll(t, time.Minute, "the task's pod replaced after its node went", func(ctx context.Context) (bool, string) {
		got, err := cp.GPUTask.GputaskV1().GPUTasks(ns).Get(ctx, "node-deleted", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return got.Status.Reschedules >= 1, fmt.Sprintf("phase %s, reschedules %d", got.Status.Phase, got.Status.Reschedules)
	})
	// The kubelet registers its Node once, when it starts.
	time.Sleep(5 * time.Second)
	if _, err := cp.Kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Logf("the Node came back by itself (%v)", err)
	} else {
		t.Log("the Node is still gone: restarting the kubelet")
		restart, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := node.StartKubelet(restart); err != nil {
			t.Fatal(err)
		}
	}
	TestNodeHasDevicePluginGPUs(t)
	runTaskPod(t, ns, "node-deleted", before)
	framework.Poll(t, time.Minute, "a Rescheduled event on the task", func(ctx context.Context) (bool, string) {
		events := taskEvents(ctx, ns, "node-deleted")
		return strings.Contains(events, gputaskv1.ReasonRescheduled), events
	})
	t.Logf("kubectl get gt:\n%s\nevents:\n%s", cp.KubectlT(t, "get", "gt", "-o", "wide", "-n", ns), taskEvents(ctx, ns, "node-deleted"))
}

// runTaskPod waits until the task is Running with a pod on the node other
// than old, and returns the pod.
func runTaskPod(t *testing.T, ns, task string, old *corev1.Pod) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	framework.Poll(t, 2*time.Minute, "task "+task+" Running with its pod on the real node", func(ctx context.Context) (bool, string) {
		got, err := cp.GPUTask.GputaskV1().GPUTasks(ns).Get(ctx, task, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if got.Status.PodName == "" {
			return false, "no pod, phase " + string(got.Status.Phase)
		}
		pod, err = cp.Kube.CoreV1().Pods(ns).Get(ctx, got.Status.PodName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == gputaskv1.GPUTaskRunning && pod.Status.Phase == corev1.PodRunning && pod.Spec.NodeName == nodeName && pod.UID != old.UID,
			fmt.Sprintf("task %s, pod %s %s on %q (the old one: %t)", got.Status.Phase, pod.UID, pod.Status.Phase, pod.Spec.NodeName, pod.UID == old.UID)
	})
	return pod
}

// taskEvents lists the task's events as `kubectl get events` shows them:
// type, reason, message.
func taskEvents(ctx context.Context, ns, task string) string {
	events, err := cp.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == "GPUTask" && e.InvolvedObject.Name == task {
			fmt.Fprintf(&b, "%s %s %s\n", e.Type, e.Reason, e.Message)
		}
	}
	return b.String()
}

// TestFaultKubeletStopped: the kubelet stops under a running task whose pod
// tolerates an unreachable or not-ready node for 2 s. The node goes
// NotReady after the control plane's 10 s grace period, the taint eviction
// controller evicts the pod, which stays Terminating while no kubelet can
// stop its container. The kubelet comes back, finishes the old pod, and the
// controller places a new one on the node: status.reschedules counts it, an
// Evicted Warning names the taint manager, and a Rescheduled event follows.
func TestFaultKubeletStopped(t *testing.T) {
	TestNodeHasDevicePluginGPUs(t)
	ns := cp.NamespaceT(t)
	ctx := context.Background()
	task := newTask("kubelet-stopped", 1)
	for _, key := range []string{corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady} {
		task.Spec.Template.Spec.Tolerations = append(task.Spec.Template.Spec.Tolerations, corev1.Toleration{
			Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(2)),
		})
	}
	before := runTask(t, ns, task)

	node.StopKubelet()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			restart, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := node.StartKubelet(restart); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	framework.Poll(t, time.Minute, "the node NotReady", func(ctx context.Context) (bool, string) {
		n, err := cp.Kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return !framework.NodeReady(n), fmt.Sprintf("conditions %v, taints %v", readyCondition(n), n.Spec.Taints)
	})
	framework.Poll(t, time.Minute, "the task's pod evicted by the taint manager", func(ctx context.Context) (bool, string) {
		p, err := cp.Kube.CoreV1().Pods(ns).Get(ctx, before.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && p.DeletionTimestamp != nil {
				return true, ""
			}
		}
		return false, fmt.Sprintf("deletion %v, conditions %v", p.DeletionTimestamp, p.Status.Conditions)
	})
	restart, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := node.StartKubelet(restart); err != nil {
		t.Fatal(err)
	}
	restarted = true
	runTaskPod(t, ns, task.Name, before)
	framework.Poll(t, time.Minute, "Evicted and Rescheduled events on the task", func(ctx context.Context) (bool, string) {
		events := taskEvents(ctx, ns, task.Name)
		return strings.Contains(events, "Warning Evicted") && strings.Contains(events, gputaskv1.ReasonRescheduled), events
	})
	got, err := cp.GPUTask.GputaskV1().GPUTasks(ns).Get(ctx, task.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Reschedules < 1 {
		t.Errorf("status.reschedules %d, want at least 1", got.Status.Reschedules)
	}
	t.Logf("kubectl get gt:\n%s\nevents:\n%s", cp.KubectlT(t, "get", "gt", "-o", "wide", "-n", ns), taskEvents(ctx, ns, task.Name))
}

func readyCondition(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return fmt.Sprintf("Ready=%s (%s)", c.Status, c.Reason)
		}
	}
	return "no Ready condition"
}
