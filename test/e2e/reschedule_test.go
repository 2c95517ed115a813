package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
	"github.com/gputask/gputask-controller/test/kwok"
)

// Rescheduling settings of the controller under test: short enough that
// every time-based case happens within seconds.
const (
	rescheduleInterval       = 2 * time.Second
	reschedulePendingTimeout = 3 * time.Second
	rescheduleMaxConcurrent  = 2
)

// TestReschedule runs the controller with rescheduling on short timers, on a
// control plane of its own, and checks each reason a pod is placed again:
// a failed pod (and that Never leaves it alone), a deleted node, a pod that
// stays unschedulable, and the Periodic policy. A watch on every pod checks,
// for the whole test, that a replacement never exists next to the pod it
// replaces, and that no more than --max-concurrent-reschedules tasks are
// between the deletion of their old pod and the creation of the new one.
func TestReschedule(t *testing.T) {
	t.Parallel()
	c := startCluster(t,
		gpuNode{"a100-1", "A100", 8}, gpuNode{"a100-2", "A100", 8},
		// One GPU each, so the node-loss case can only move to the other.
		gpuNode{"h100-1", "H100", 1}, gpuNode{"h100-2", "H100", 1},
	)
	// The namespaces are made here, before the watch, so that their deletion
	// at the end (which deletes pods for good) comes after the watch stopped.
	ns := map[string]string{}
	for _, name := range []string{"failed", "node-lost", "unschedulable", "periodic", "dra"} {
		ns[name] = c.NamespaceT(t)
	}
	inflight := &inflightTracker{}
	rec := startPodRecorder(t, c, "", inflight.observe)
	controller := c.StartControllerT(t, "--workers=4",
		"--reschedule-interval="+rescheduleInterval.String(),
		"--pending-timeout="+reschedulePendingTimeout.String(),
		"--max-concurrent-reschedules="+strconv.Itoa(rescheduleMaxConcurrent))

	t.Run("cases", func(t *testing.T) {
		t.Run("FailedPod", func(t *testing.T) { t.Parallel(); testRescheduleFailedPod(t, c, ns["failed"], rec) })
		t.Run("NodeLost", func(t *testing.T) { t.Parallel(); testRescheduleNodeLost(t, c, ns["node-lost"], rec) })
		t.Run("Unschedulable", func(t *testing.T) { t.Parallel(); testRescheduleUnschedulable(t, c, ns["unschedulable"], rec) })
		t.Run("Periodic", func(t *testing.T) { t.Parallel(); testReschedulePeriodic(t, c, ns["periodic"], rec) })
		t.Run("DRAUnallocatable", func(t *testing.T) { t.Parallel(); testRescheduleDRA(t, c, ns["dra"], rec) })
	})

	rec.Stop()
	events, err := rec.Events()
	if err != nil {
		t.Error(err)
	}
	added := checkPodOrder(t, events)
	maxSeen := inflight.Max()
	t.Logf("%d pod events, %d pods created; most tasks seen between old and new pod at once: %d (limit %d); limit hit per the controller's log: %v",
		len(events), sumCounts(added), maxSeen, rescheduleMaxConcurrent, logContains(controller, "Too many pods being replaced"))
	if maxSeen > rescheduleMaxConcurrent {
		t.Errorf("%d tasks were without a pod at once because of replacements, want at most --max-concurrent-reschedules=%d", maxSeen, rescheduleMaxConcurrent)
	}
}

// testRescheduleFailedPod: a pod that fails is replaced under OnFailure
// (new UID, status.reschedules counts, a Rescheduled event); under Never the
// task stays Failed with its one pod.
func testRescheduleFailedPod(t *testing.T, c *framework.ControlPlane, ns string, rec *podRecorder) {
	failing := func(policy gputaskv1.ReschedulePolicy) func(*gputaskv1.GPUTaskSpec) {
		return func(s *gputaskv1.GPUTaskSpec) {
			s.ReschedulePolicy = policy
			s.Env = []corev1.EnvVar{{Name: kwok.FakeExitCodeEnv, Value: "3"}}
		}
	}
	createTask(t, c, ns, newTask("on-failure", "A100", 1, failing(gputaskv1.RescheduleOnFailure)))
	createTask(t, c, ns, newTask("never", "A100", 1, failing(gputaskv1.RescheduleNever)))

	task := waitTask(t, c, ns, "on-failure", "rescheduled after its pod failed", func(task *gputaskv1.GPUTask) bool {
		return task.Status.Reschedules >= 1
	})
	if uids := recordedPodUIDs(rec, ns, "on-failure"); len(uids) < 2 {
		t.Errorf("on-failure: pods seen %v, want a new pod (new UID) after the failure", uids)
	}
	if task.Status.LastRescheduleTime == nil {
		t.Errorf("on-failure: status.lastRescheduleTime not set: %+v", task.Status)
	}
	framework.Poll(t, waitTimeout, "Rescheduled event of on-failure", func(context.Context) (bool, string) {
		n := taskEventCount(t, c, ns, "on-failure", "Rescheduled")
		return n >= 1, fmt.Sprintf("%d events", n)
	})

	never := waitTask(t, c, ns, "never", "Failed", func(task *gputaskv1.GPUTask) bool {
		return task.Status.Phase == gputaskv1.GPUTaskFailed
	})
	// Two intervals and more: a rescheduling would have happened by now.
	time.Sleep(2*rescheduleInterval + time.Second)
	never = waitTask(t, c, ns, "never", "still Failed", func(task *gputaskv1.GPUTask) bool { return true })
	if never.Status.Phase != gputaskv1.GPUTaskFailed || never.Status.Reschedules != 0 {
		t.Errorf("never: phase %s, reschedules %d; want Failed and 0", never.Status.Phase, never.Status.Reschedules)
	}
	if uids := recordedPodUIDs(rec, ns, "never"); len(uids) != 1 {
		t.Errorf("never: pods seen %v, want exactly its first pod", uids)
	}
	if pod := taskPod(t, c, ns, "never"); pod == nil || pod.Status.Phase != corev1.PodFailed {
		t.Errorf("never: pod %v, want the Failed pod kept", pod)
	}
}

// testRescheduleNodeLost deletes the node a task's pod runs on; the pod is
// created again and lands on the other node.
func testRescheduleNodeLost(t *testing.T, c *framework.ControlPlane, ns string, rec *podRecorder) {
	createTask(t, c, ns, newTask("mover", "H100", 1))
	before := waitTask(t, c, ns, "mover", "Running", taskRunning)
	lost := before.Status.NodeName
	if err := c.DeleteNode(context.Background(), lost); err != nil {
		t.Fatal(err)
	}
	after := waitTask(t, c, ns, "mover", "Running on another node", func(task *gputaskv1.GPUTask) bool {
		return taskRunning(task) && task.Status.NodeName != "" && task.Status.NodeName != lost && task.Status.Reschedules >= 1
	})
	pod := taskPod(t, c, ns, "mover")
	if pod == nil || pod.Spec.NodeName != after.Status.NodeName {
		t.Fatalf("pod %v, want it bound to %s", pod, after.Status.NodeName)
	}
	if uids := recordedPodUIDs(rec, ns, "mover"); len(uids) < 2 || uids[len(uids)-1] != string(pod.UID) {
		t.Errorf("pods seen %v, want a new pod %s after the node loss", uids, pod.UID)
	}
	t.Logf("node %s deleted; pod now on %s, reschedules=%d", lost, after.Status.NodeName, after.Status.Reschedules)
}

// testRescheduleUnschedulable asks for a GPU model no node has; once the pod
// has been unschedulable for longer than --pending-timeout it is created again.
func testRescheduleUnschedulable(t *testing.T, c *framework.ControlPlane, ns string, rec *podRecorder) {
	createTask(t, c, ns, newTask("nowhere", "B200", 1))
	var first time.Time
	framework.Poll(t, waitTimeout, "first pod of nowhere", func(context.Context) (bool, string) {
		if pod := taskPod(t, c, ns, "nowhere"); pod != nil {
			first = time.Now()
			return true, ""
		}
		return false, "no pod"
	})
	task := waitTask(t, c, ns, "nowhere", "rescheduled after the pending timeout", func(task *gputaskv1.GPUTask) bool {
		return task.Status.Reschedules >= 1
	})
	waited := time.Since(first)
	if task.Status.Phase != gputaskv1.GPUTaskPending {
		t.Errorf("phase %s, want Pending", task.Status.Phase)
	}
	if uids := recordedPodUIDs(rec, ns, "nowhere"); len(uids) < 2 {
		t.Errorf("pods seen %v, want a new pod after the pending timeout", uids)
	}
	if waited < reschedulePendingTimeout-time.Second {
		t.Errorf("rescheduled %s after the first pod appeared, before the pending timeout %s", waited, reschedulePendingTimeout)
	}
	t.Logf("unschedulable pod replaced %s after it appeared (pending timeout %s)", waited.Round(100*time.Millisecond), reschedulePendingTimeout)
}

// testRescheduleDRA: a DRA task whose claim cannot be allocated (the one
// device is held) shows the scheduler's reason, is placed again after the
// pending timeout with a claim of its own each time, and runs once a
// device is there.
func testRescheduleDRA(t *testing.T, c *framework.ControlPlane, ns string, rec *podRecorder) {
	ctx := context.Background()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	c.KubectlT(t, "apply", "-f", filepath.Join(root, "artifacts", "examples", "dra", "deviceclass.yaml"))
	const model = "NVIDIA A100-SXM4-80GB"
	if _, err := c.CreateDRANode(ctx, "dra-1", "dra", model, 1); err != nil {
		t.Fatal(err)
	}
	dra := func(s *gputaskv1.GPUTaskSpec) { s.GPUAllocation = gputaskv1.GPUAllocationDRA }
	createTask(t, c, ns, newTask("holder", model, 1, dra))
	waitTask(t, c, ns, "holder", "Running", taskRunning)
	createTask(t, c, ns, newTask("waiting", model, 1, dra))
	claims := map[string]bool{}
	framework.Poll(t, waitTimeout, "waiting placed again with a claim of its own", func(context.Context) (bool, string) {
		if pod := taskPod(t, c, ns, "waiting"); pod != nil {
			for _, s := range pod.Status.ResourceClaimStatuses {
				if s.ResourceClaimName != nil {
					claims[*s.ResourceClaimName] = true
				}
			}
		}
		task, err := c.GPUTask.GputaskV1().GPUTasks(ns).Get(ctx, "waiting", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return task.Status.Reschedules >= 1 && len(claims) >= 2, fmt.Sprintf("reschedules %d, claims %v", task.Status.Reschedules, claims)
	})
	waitTask(t, c, ns, "waiting", "showing the scheduler's reason", waitingForDevices)
	// The driver publishes a second device (deleting the holder would look,
	// to the pod watch of TestReschedule, like a replacement never made).
	slice := framework.NewDRASlice("dra-1", model, 2)
	slice.Spec.Pool.Generation = 2
	current, err := c.Kube.ResourceV1().ResourceSlices().Get(ctx, slice.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slice.ResourceVersion = current.ResourceVersion
	if _, err := c.Kube.ResourceV1().ResourceSlices().Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	task := waitTask(t, c, ns, "waiting", "Running with the new device", func(tk *gputaskv1.GPUTask) bool {
		return taskRunning(tk) && tk.Status.GPUModel == model && len(tk.Status.Devices) == 1
	})
	if uids := recordedPodUIDs(rec, ns, "waiting"); len(uids) < 2 {
		t.Errorf("pods seen %v, want a new pod after the pending timeout", uids)
	}
	t.Logf("DRA task placed again %d times, claims %d, then Running on %v", task.Status.Reschedules, len(claims), task.Status.Devices)
}

// testReschedulePeriodic: a Periodic task's pod is placed again every
// interval, each time after the previous pod is gone.
func testReschedulePeriodic(t *testing.T, c *framework.ControlPlane, ns string, rec *podRecorder) {
	periodic := func(s *gputaskv1.GPUTaskSpec) { s.ReschedulePolicy = gputaskv1.ReschedulePeriodic }
	// Several, so that replacements overlap and the concurrency limit matters.
	names := []string{"periodic-0", "periodic-1", "periodic-2", "periodic-3"}
	for _, name := range names {
		createTask(t, c, ns, newTask(name, "A100", 1, periodic))
	}
	start := time.Now()
	for _, name := range names {
		waitTask(t, c, ns, name, "rescheduled twice", func(task *gputaskv1.GPUTask) bool {
			return task.Status.Reschedules >= 2
		})
	}
	t.Logf("every Periodic task rescheduled twice after %s", time.Since(start).Round(100*time.Millisecond))
	for _, name := range names {
		if uids := recordedPodUIDs(rec, ns, name); len(uids) < 3 {
			t.Errorf("%s: pods seen %v, want at least 3", name, uids)
		}
	}
	framework.Poll(t, waitTimeout, "Rescheduled events of periodic-0", func(context.Context) (bool, string) {
		n := taskEventCount(t, c, ns, "periodic-0", "Rescheduled")
		return n >= 2, fmt.Sprintf("%d events", n)
	})
}

// recordedPodUIDs returns the UIDs of the pods named name that were ADDED, in order.
func recordedPodUIDs(rec *podRecorder, ns, name string) []string {
	events, _ := rec.Events()
	var uids []string
	for _, e := range events {
		if e.typ == watch.Added && e.ns == ns && e.name == name {
			uids = append(uids, e.uid)
		}
	}
	return uids
}

// inflightTracker counts, from pod watch events, the pods whose deletion
// has begun and whose successor (same name) has not been ADDED yet. The
// watch delivers events in etcd order, and the controller reserves a slot
// before it deletes and frees it after it creates, so this count never
// exceeds the controller's own.
//
// kwok's fake kubelet deletes a terminating pod by name, without a UID
// precondition, and now and then a second time: that second delete can hit
// the replacement the controller has just created. A real kubelet deletes
// with the pod's UID as a precondition. Those stray deletes are not the
// controller's, so a deletion only counts for a pod that existed for at
// least minAge: the controller under test never replaces a younger one
// (its interval and pending timeout are longer).
type inflightTracker struct {
	// open and addedAt are keyed by namespace/name.
	open    map[string]bool
	addedAt map[string]time.Time
	max     int
}

const inflightMinAge = time.Second

// observe is a podRecorder hook; it runs under the recorder's lock.
func (f *inflightTracker) observe(all []podEvent) {
	if f.open == nil {
		f.open, f.addedAt = map[string]bool{}, map[string]time.Time{}
	}
	e := all[len(all)-1]
	key := e.ns + "/" + e.name
	switch {
	case e.typ == watch.Added:
		delete(f.open, key)
		f.addedAt[key] = e.at
	case e.typ == watch.Deleted || e.deleting:
		if e.at.Sub(f.addedAt[key]) >= inflightMinAge {
			f.open[key] = true
		}
	}
	f.max = max(f.max, len(f.open))
}

// Max is only read after the recorder stopped.
func (f *inflightTracker) Max() int { return f.max }

func sumCounts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// taskEventCount sums the counts of the events with reason about the named
// GPUTask.
func taskEventCount(t *testing.T, c *framework.ControlPlane, ns, task, reason string) int {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": "GPUTask", "involvedObject.name": task, "reason": reason}.AsSelector().String()
	list, err := c.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatalf("listing events of %s/%s: %v", ns, task, err)
	}
	n := 0
	for _, e := range list.Items {
		n += int(max(e.Count, 1))
	}
	return n
}
