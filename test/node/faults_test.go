//go:build realnode

package node

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/reschedule"
	"github.com/gputask/gputask-controller/test/framework"
)

// The fault tests' bounds, from the settings of the control plane
// (node.go) and of the chart's defaults. Each is an upper limit with a
// margin for a loaded 2-core machine, not a measure of speed: a count
// test fails on a second replacement, a bound on none at all.
const (
	// replaceBound: a pod the controller replaces for a reason that needs
	// no timer (a failure, its node deleted) is deleted and made again
	// within it: the pod's event, one delete, the delete's event, one
	// create.
	replaceBound = 10 * time.Second
	// crashAfter is how long the crashing container runs.
	crashAfter = time.Second
	// nodeMonitorGrace and tolerationSeconds are the control plane's
	// --node-monitor-grace-period and the kubelet-stopped task's
	// toleration of an unreachable node.
	nodeMonitorGrace  = 10 * time.Second
	tolerationSeconds = 2
	// evictionBound: a stopped kubelet's node is NotReady after the grace
	// period, within one --node-monitor-period (1 s), and its pods evicted
	// after their toleration; the rest is margin.
	evictionBound = nodeMonitorGrace + time.Second + tolerationSeconds*time.Second + 10*time.Second
	// terminationGrace is the tasks' pods' terminationGracePeriodSeconds
	// (newTask).
	terminationGrace = 5 * time.Second
)

// TestFaultCrashingContainer: a task whose container exits 3 a second
// after it starts, again and again. Its pod (restartPolicy Never, the
// default) ends Failed with the container's exit code in its status, and
// the controller replaces it, backing off as docs/api.md (Rescheduling)
// promises:
//
//   - the first failure is replaced within replaceBound (10 s) of the pod's
//     failure, and that is the only replacement until the second failure:
//     status.reschedules 1, one pod besides the original;
//   - the second failure waits 10 s, the third 20 s: each replacement is
//     made at least that long after the failed container's end (its
//     finishedAt, whole seconds, as the controller reads it) and within
//     the delay plus replaceBound of the pod's failure seen by the watch,
//     with one BackOff Warning naming the delay;
//   - the third replacement comes at least 20 s after the second, and the
//     three replacements take at least 30 s from the first failure, where
//     a crash loop would have made a replacement every few seconds; no pod
//     is made besides these (status.reschedules is the count of new UIDs).
//
// It runs about 45 s.
func TestFaultCrashingContainer(t *testing.T) {
	ns := cp.NamespaceT(t)
	ctx := context.Background()
	task := newTask("crasher", 1)
	c := &task.Spec.Template.Spec.Containers[0]
	c.Image = framework.WorkerImage
	c.Args = []string{"--crash-after=" + crashAfter.String(), "--crash-code=3"}
	// The Failed pod is replaced at once: an informer, started first, sees
	// it before it goes.
	pods := watchPods(t, ns)
	if _, err := cp.GPUTask.GputaskV1().GPUTasks(ns).Create(ctx, task, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cp.GPUTask.GputaskV1().GPUTasks(ns).Delete(context.Background(), task.Name, metav1.DeleteOptions{})
	})

	// uids[i] is the i-th pod of the task, uids[0] the original; failed[i]
	// is when it was seen Failed, ended[i] when its container finished as
	// its status says, made[i] when it was seen at all.
	var uids []string
	var made, failed, ended []time.Time
	nthFails := func(n int) {
		t.Helper()
		framework.Poll(t, 2*time.Minute, fmt.Sprintf("pod %d of the task Failed on the node, its container exited 3", n+1), func(context.Context) (bool, string) {
			uids, _ = pods.created()
			if len(uids) <= n {
				return false, fmt.Sprintf("%d pods seen", len(uids))
			}
			st, ok := pods.terminated()[uids[n]]
			at, failedOK := pods.failedAt(uids[n])
			if ok && failedOK && st.ExitCode == 3 && st.Reason == "Error" && st.phase == corev1.PodFailed && st.node == nodeName {
				failed, ended = append(failed, at), append(ended, st.FinishedAt.Time)
				return true, ""
			}
			return false, fmt.Sprint(pods.terminated())
		})
	}
	// nthReplaced waits for the n-th replacement, made at least atLeast
	// after the end of the container it replaces, and at most
	// atLeast+replaceBound after its pod was seen Failed.
	nthReplaced := func(n int, atLeast time.Duration) {
		t.Helper()
		framework.Poll(t, atLeast+replaceBound, fmt.Sprintf("replacement %d made", n), func(context.Context) (bool, string) {
			var seen map[string]time.Time
			uids, seen = pods.created()
			if len(uids) <= n {
				return false, fmt.Sprintf("%d pods seen", len(uids))
			}
			made = append(made, seen[uids[n]])
			return true, ""
		})
		if len(uids) != n+1 {
			t.Fatalf("%d pods seen once replacement %d was made, want %d: %v", len(uids), n, n+1, uids)
		}
		sinceEnd, sinceFailed := made[n].Sub(ended[n-1]), made[n].Sub(failed[n-1])
		t.Logf("replacement %d made %s after pod %d's container ended, %s after the pod was seen Failed",
			n, sinceEnd.Round(10*time.Millisecond), n, sinceFailed.Round(10*time.Millisecond))
		if sinceEnd < atLeast {
			t.Errorf("replacement %d made %s after the container it replaces ended, want at least %s", n, sinceEnd, atLeast)
		}
		if sinceFailed > atLeast+replaceBound {
			t.Errorf("replacement %d made %s after the pod it replaces was seen Failed, want at most %s", n, sinceFailed, atLeast+replaceBound)
		}
	}
	made = []time.Time{{}}
	nthFails(0)
	nthReplaced(1, 0)
	nthFails(1)
	// The first replacement is counted, and the only one so far: the
	// second waits 10 s.
	framework.Poll(t, 5*time.Second, "the first replacement counted", func(context.Context) (bool, string) {
		got := taskOf(t, ns, task.Name)
		return got.Status.Reschedules == 1 && got.Status.LastRescheduleTime != nil,
			fmt.Sprintf("status.reschedules %d, lastRescheduleTime %v", got.Status.Reschedules, got.Status.LastRescheduleTime)
	})
	nthReplaced(2, reschedule.FailureDelay(2))
	nthFails(2)
	nthReplaced(3, reschedule.FailureDelay(3))

	if gap := made[3].Sub(made[2]); gap < reschedule.FailureDelay(3) {
		t.Errorf("the third replacement came %s after the second, want at least the documented %s", gap, reschedule.FailureDelay(3))
	}
	if took, least := made[3].Sub(failed[0]), reschedule.FailureDelay(2)+reschedule.FailureDelay(3); took < least {
		t.Errorf("3 replacements took %s from the first failure, want at least %s: a crash loop", took, least)
	}
	framework.Poll(t, time.Minute, "status.reschedules 3, and each BackOff Warning once", func(ctx context.Context) (bool, string) {
		got := taskOf(t, ns, task.Name)
		backOffs := backOffEvents(ctx, ns, task.Name)
		want := map[string]int32{reschedule.FailureDelay(2).String(): 1, reschedule.FailureDelay(3).String(): 1}
		return got.Status.Reschedules == 3 && maps.Equal(backOffs, want),
			fmt.Sprintf("reschedules %d, BackOff events by delay %v (want %v)", got.Status.Reschedules, backOffs, want)
	})
	if uids, _ := pods.created(); len(uids) != 4 {
		t.Errorf("%d pods made, want the original and 3 replacements", len(uids))
	}
	t.Logf("kubectl get gt:\n%s\nevents:\n%s", cp.KubectlT(t, "get", "gt", "-o", "wide", "-n", ns), taskEvents(ctx, ns, task.Name))
}

// taskOf reads the task.
func taskOf(t *testing.T, ns, name string) *gputaskv1.GPUTask {
	t.Helper()
	got, err := cp.GPUTask.GputaskV1().GPUTasks(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// backOffEvents counts the task's BackOff Warnings by the delay their
// message names, from each event's own count: a Warning recorded again
// for the same pod would count 2.
func backOffEvents(ctx context.Context, ns, task string) map[string]int32 {
	events, err := cp.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	out := map[string]int32{}
	if err != nil {
		return out
	}
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == "GPUTask" && e.InvolvedObject.Name == task && e.Reason == gputaskv1.ReasonBackOff {
			delay, _, _ := strings.Cut(strings.TrimPrefix(e.Message, "Back-off "), " ")
			out[delay] += max(e.Count, 1)
		}
	}
	return out
}

// expectOneReplacement checks that the task was replaced exactly once: its
// status counts 1, and the pod watch saw its original pod and one more.
func expectOneReplacement(t *testing.T, ns, task string, pods *podTracker) {
	t.Helper()
	got := taskOf(t, ns, task)
	uids, _ := pods.created()
	if got.Status.Reschedules != 1 || len(uids) != 2 {
		t.Errorf("status.reschedules %d, %d pods seen (%v); want 1 replacement, 2 pods", got.Status.Reschedules, len(uids), uids)
	}
}

// TestFaultNodeDeleted: `kubectl delete node` under a running task. The
// controller sees the Node go and replaces the pod at once (NodeLost needs
// no timeout; the old pod is deleted without a grace period, as no kubelet
// would confirm its end): the new pod is made within replaceBound (10 s)
// of the deletion, and waits, no node left. The kubelet goes on running
// but does not register its Node again, so it is restarted, as an operator
// would; the Node comes back with its GPUs, and the new pod runs on it
// within 2 minutes of the restart. Exactly one replacement: status.reschedules
// 1, the original pod and one more seen, a Rescheduled event.
func TestFaultNodeDeleted(t *testing.T) {
	TestNodeHasDevicePluginGPUs(t)
	ns := cp.NamespaceT(t)
	ctx := context.Background()
	pods := watchPods(t, ns)
	before := runTask(t, ns, newTask("node-deleted", 1))
	fault := time.Now()
	cp.KubectlT(t, "delete", "node", nodeName)

	var replacement string
	framework.Poll(t, replaceBound, "the task's pod replaced after its node went", func(ctx context.Context) (bool, string) {
		uids, _ := pods.created()
		got, err := cp.GPUTask.GputaskV1().GPUTasks(ns).Get(ctx, "node-deleted", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if len(uids) > 1 {
			replacement = uids[1]
		}
		return got.Status.Reschedules >= 1 && len(uids) > 1, fmt.Sprintf("phase %s, reschedules %d, %d pods seen", got.Status.Phase, got.Status.Reschedules, len(uids))
	})
	t.Logf("replacement made %s after the Node's deletion", time.Since(fault).Round(10*time.Millisecond))
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
	after := runTaskPod(t, ns, "node-deleted", before)
	if string(after.UID) != replacement {
		t.Errorf("the running pod %s is not the replacement %s", after.UID, replacement)
	}
	framework.Poll(t, time.Minute, "a Rescheduled event on the task", func(ctx context.Context) (bool, string) {
		events := taskEvents(ctx, ns, "node-deleted")
		return strings.Contains(events, gputaskv1.ReasonRescheduled), events
	})
	expectOneReplacement(t, ns, "node-deleted", pods)
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
// stop its container; the controller, seeing someone else delete the pod,
// waits for it rather than replacing it (the chart's
// --node-not-ready-timeout, 1m, is not reached). The kubelet comes back,
// finishes the old pod, and the controller places a new one on the node.
// Bounds, on the test's clock:
//
//   - evicted within evictionBound (23 s: the 10 s grace, the 1 s monitor
//     period, the 2 s toleration, a 10 s margin) of the kubelet's stop;
//   - once the kubelet is back, the new pod made within the old pod's 5 s
//     grace period plus replaceBound (15 s), and Running within a minute.
//
// Exactly one replacement: status.reschedules 1, the original pod and one
// more seen; an Evicted Warning names the taint manager, and a Rescheduled
// event follows.
func TestFaultKubeletStopped(t *testing.T) {
	TestNodeHasDevicePluginGPUs(t)
	ns := cp.NamespaceT(t)
	ctx := context.Background()
	task := newTask("kubelet-stopped", 1)
	for _, key := range []string{corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady} {
		task.Spec.Template.Spec.Tolerations = append(task.Spec.Template.Spec.Tolerations, corev1.Toleration{
			Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(tolerationSeconds)),
		})
	}
	pods := watchPods(t, ns)
	before := runTask(t, ns, task)

	fault := time.Now()
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
	framework.Poll(t, evictionBound, "the node NotReady and the task's pod evicted by the taint manager", func(ctx context.Context) (bool, string) {
		n, err := cp.Kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		p, err := cp.Kube.CoreV1().Pods(ns).Get(ctx, before.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && p.DeletionTimestamp != nil && !framework.NodeReady(n) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("node %s, taints %v; pod deletion %v, conditions %v", readyCondition(n), n.Spec.Taints, p.DeletionTimestamp, p.Status.Conditions)
	})
	t.Logf("evicted %s after the kubelet stopped", time.Since(fault).Round(10*time.Millisecond))
	if uids, _ := pods.created(); len(uids) != 1 {
		t.Errorf("%d pods while the old one terminates, want only it: the controller must wait for it", len(uids))
	}
	restart, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := node.StartKubelet(restart); err != nil {
		t.Fatal(err)
	}
	restarted = true
	back := time.Now()
	t.Logf("the kubelet back, its node Ready, %s after it stopped", back.Sub(fault).Round(10*time.Millisecond))
	framework.Poll(t, terminationGrace+replaceBound, "the task's new pod made", func(context.Context) (bool, string) {
		uids, _ := pods.created()
		return len(uids) > 1, fmt.Sprintf("%d pods seen", len(uids))
	})
	t.Logf("replacement made %s after the kubelet came back", time.Since(back).Round(10*time.Millisecond))
	runTaskPod(t, ns, task.Name, before)
	framework.Poll(t, time.Minute, "Evicted and Rescheduled events on the task", func(ctx context.Context) (bool, string) {
		events := taskEvents(ctx, ns, task.Name)
		return strings.Contains(events, "Warning Evicted") && strings.Contains(events, gputaskv1.ReasonRescheduled), events
	})
	expectOneReplacement(t, ns, task.Name, pods)
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
