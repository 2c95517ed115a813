package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/scaling"
	"github.com/gputask/gputask-controller/test/framework"
	"github.com/gputask/gputask-controller/test/kwok"
)

// These tests prove the autoscaling rules for GPU workers on the real control
// plane, with the package's controller: at most one step per interval,
// startup-aware scale-up, graceful scale-in of busy workers, and scale to
// zero and back. Each has its own namespace and GPU model, as in
// taskset_test.go, and they share its helpers: the pool (pool_test.go), its
// load index (loadserver_test.go) and its recorder (poolrecorder_test.go).

// TestAutoscalerOneStepPerIntervalWhileEdited holds the load at 0.9 for 20
// intervals while the test edits the spec and toggles paused and stopped
// every few seconds, as a user would. Every edit is evaluated at once, but
// the count changes at most once per interval: no more writes than
// intervals, and no two writes closer than half an interval. The test sees
// each write when its watch event arrives, which on a loaded machine can
// come late by a good part of a second; a step taken on an edit would come
// 0.3 to 1.1 s after the last, the edits' gaps.
func TestAutoscalerOneStepPerIntervalWhileEdited(t *testing.T) {
	t.Parallel()
	const interval = 3 * time.Second
	ns, model, load, rec := setupPool(t, 1, 200, loadHigh)
	createPool(t, ns, poolSpec{replicas: 1, min: 1, max: 150, interval: interval, stepUp: 1, model: model, url: load.URL()})

	edits := []string{
		`{"spec":{"autoscaling":{"maxReplicas":149}}}`,
		`{"metadata":{"annotations":{"gputask.io/paused":"true"}}}`,
		`{"metadata":{"annotations":{"gputask.io/paused":null}}}`,
		`{"spec":{"autoscaling":{"policy":{"stepDown":2}}}}`,
		`{"spec":{"autoscaling":{"maxReplicas":150}}}`,
		`{"metadata":{"annotations":{"gputask.io/stopped":"true"}}}`,
		`{"metadata":{"annotations":{"gputask.io/stopped":null}}}`,
		`{"spec":{"autoscaling":{"failureThreshold":4}}}`,
		`{"metadata":{"annotations":{"gputask.io/paused":"true"}}}`,
		`{"metadata":{"annotations":{"gputask.io/paused":null}}}`,
	}
	start := time.Now()
	for i := 0; time.Since(start) < 20*interval; i++ {
		// Edits come at 0.3 to 2.4 s after each other, the gaps that used
		// to produce a second step.
		time.Sleep([]time.Duration{300 * time.Millisecond, 2400 * time.Millisecond, 1100 * time.Millisecond, 700 * time.Millisecond}[i%4])
		patchPool(t, ns, edits[i%len(edits)])
	}
	patchPool(t, ns, `{"metadata":{"annotations":{"gputask.io/paused":null,"gputask.io/stopped":null}}}`)

	steps, reasons := rec.snapshot()
	t.Logf("steps: %s", formatSteps(steps))
	t.Logf("decisions: %v", reasons)
	if len(steps) < 6 {
		t.Fatalf("only %d values of spec.replicas in %v; the test proves nothing", len(steps), 20*interval)
	}
	// steps[0] is the value at creation; the edits ran for 20 intervals
	// after it, so 21 writes at the most.
	if writes, most := len(steps)-1, int(time.Since(steps[0].at)/interval)+1; writes > most {
		t.Errorf("%d scale writes in %d intervals, want at most %d: more than one step per interval", writes, most-1, most)
	}
	minGap := interval / 2
	for i := 2; i < len(steps); i++ {
		if gap := steps[i].at.Sub(steps[i-1].at); gap < minGap {
			t.Errorf("scale writes to %d and %d came %v apart, want at least %v", steps[i-1].replicas, steps[i].replicas, gap, minGap)
		}
	}
	t.Logf("kubectl get gts -o wide:\n%s", cp.KubectlT(t, "get", "gts", "-o", "wide", "-n", ns))
}

// TestAutoscalerWaitsForSlowStarts: pods take 15 s to become Ready. Under a
// steady load of 0.9 and an interval of 3 s, the count grows one step per
// batch of Ready tasks (each step comes when every task asked for is Ready),
// where without startup awareness it would grow every interval.
func TestAutoscalerWaitsForSlowStarts(t *testing.T) {
	t.Parallel()
	const interval = 3 * time.Second
	ns, model, load, rec := setupPool(t, 1, 64, loadHigh)
	createPool(t, ns, poolSpec{replicas: 1, min: 1, max: 7, interval: interval, stepUp: 2, model: model, url: load.URL(), slow: true})

	rec.waitSetWithin(t, 3*time.Minute, "7 Ready tasks", func(s *gputaskv1.GPUTaskSet) bool { return s.Status.ReadyReplicas == 7 })
	elapsed := time.Duration(0)
	steps, reasons := rec.snapshot()
	if len(steps) > 0 {
		elapsed = time.Since(steps[0].at)
	}
	t.Logf("steps: %s\ndecisions: %v\nall Ready after %v", formatSteps(steps), reasons, elapsed)

	var counts []int32
	for _, s := range steps {
		counts = append(counts, s.replicas)
	}
	if want := []int32{1, 3, 5, 7}; !slices.Equal(counts, want) {
		t.Errorf("spec.replicas went %v, want %v", counts, want)
	}
	for i := 1; i < len(steps); i++ {
		if steps[i].ready < int(steps[i-1].replicas) {
			t.Errorf("step to %d came with %d Ready tasks out of %d asked for: it did not wait for the starting tasks",
				steps[i].replicas, steps[i].ready, steps[i-1].replicas)
		}
		// A step per interval would come 3 s after the last; the margin
		// of an interval is for the watch, which may see a write late.
		if gap := steps[i].at.Sub(steps[i-1].at); gap < kwok.SlowStartup-interval {
			t.Errorf("steps %v apart, shorter than the %v start-up: more than one step per batch", gap, kwok.SlowStartup)
		}
	}
	if !slices.Contains(reasons, scaling.ReasonWaitingForStartingTasks) {
		t.Errorf("decisions %v, want %s among them", reasons, scaling.ReasonWaitingForStartingTasks)
	}
	if rec.maxStartingReplicas() == 0 {
		t.Error("status.startingReplicas never showed the starting tasks")
	}
	// Without the rule the set would have stepped every interval: 1, 3, 5, 7
	// within 3 intervals, long before the first batch was Ready.
	t.Logf("kubectl get gts -o wide:\n%s", cp.KubectlT(t, "get", "gts", "-o", "wide", "-n", ns))
}

// TestBusyTasksDrainOnScaleIn: busy tasks survive a scale-in, marked
// draining on task and pod, until the worker clears busy or drainTimeout
// passes; a scale-up takes drains back before it creates any task.
func TestBusyTasksDrainOnScaleIn(t *testing.T) {
	t.Parallel()
	const drainTimeout = 20 * time.Second
	ns := cp.NamespaceT(t)
	model := createGPUNodes(t, ns, 1, 16)
	rec := recordPool(t, ns)
	timeout := drainTimeout
	createPool(t, ns, poolSpec{replicas: 4, model: model, noAutoscaling: true, drainTimeout: &timeout})
	rec.waitSet(t, "4 Ready tasks", func(s *gputaskv1.GPUTaskSet) bool { return s.Status.ReadyReplicas == 4 })

	tasks := rec.tasks(t)
	slices.SortFunc(tasks, func(a, b *gputaskv1.GPUTask) int { return strings.Compare(a.Name, b.Name) })
	busyPod, busyTask := tasks[0], tasks[1]
	ctx := context.Background()
	busy := `{"metadata":{"annotations":{"gputask.io/busy":"true"}}}`
	if _, err := cp.Kube.CoreV1().Pods(ns).Patch(ctx, busyPod.Status.PodName, types.MergePatchType, []byte(busy), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.GPUTask.GputaskV1().GPUTasks(ns).Patch(ctx, busyTask.Name, types.MergePatchType, []byte(busy), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The GPUTask controller mirrors the pod's mark on its task.
	time.Sleep(time.Second)

	patchPool(t, ns, `{"spec":{"replicas":0}}`)
	rec.waitSet(t, "2 busy tasks draining, the idle ones gone", func(s *gputaskv1.GPUTaskSet) bool {
		return s.Status.Replicas == 2 && s.Status.DrainingReplicas == 2
	})
	scaledIn := time.Now()
	var drainStarted time.Time
	for _, name := range []string{busyPod.Name, busyTask.Name} {
		task, err := cp.GPUTask.GputaskV1().GPUTasks(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("busy task %s is gone: %v", name, err)
		}
		if task.Annotations[gputaskv1.AnnotationDraining] != "true" {
			t.Errorf("task %s draining=%q, want \"true\"", name, task.Annotations[gputaskv1.AnnotationDraining])
		}
		if name == busyTask.Name {
			drainStarted, err = time.Parse(time.RFC3339, task.Annotations[gputaskv1.AnnotationDrainStartedAt])
			if err != nil {
				t.Fatalf("task %s: %s: %v", name, gputaskv1.AnnotationDrainStartedAt, err)
			}
		}
		// The GPUTask controller carries the task's mark to its pod, a
		// sync after the set's status counts the task draining.
		framework.Poll(t, waitTimeout, "task "+name+"'s pod marked draining", func(ctx context.Context) (bool, string) {
			pod, err := cp.Kube.CoreV1().Pods(ns).Get(ctx, task.Status.PodName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return pod.Annotations[gputaskv1.AnnotationDraining] == "true", fmt.Sprintf("pod %s draining=%q", pod.Name, pod.Annotations[gputaskv1.AnnotationDraining])
		})
	}

	// The worker on the pod finishes: its task goes; the other one stays
	// until the drain timeout.
	idle := `{"metadata":{"annotations":{"gputask.io/busy":null}}}`
	if _, err := cp.Kube.CoreV1().Pods(ns).Patch(ctx, busyPod.Status.PodName, types.MergePatchType, []byte(idle), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.waitSet(t, "the idle worker's task deleted", func(s *gputaskv1.GPUTaskSet) bool { return s.Status.Replicas == 1 })
	if time.Since(scaledIn) > drainTimeout/2 {
		t.Errorf("the task of the worker that turned idle went only after %v", time.Since(scaledIn))
	}
	rec.waitSetWithin(t, drainTimeout+waitTimeout, "the busy task deleted at the drain timeout", func(s *gputaskv1.GPUTaskSet) bool { return s.Status.Replicas == 0 })
	// The drain is measured from the mark's own time; the status that shows
	// the deletion comes after it.
	if held := time.Since(drainStarted); held < drainTimeout {
		t.Errorf("the busy task was deleted %v after it was marked draining, before the %v drain timeout", held, drainTimeout)
	} else {
		t.Logf("the busy task was deleted within %v of being marked draining (timeout %v)", held.Round(10*time.Millisecond), drainTimeout)
	}

	// Drain two busy tasks again, then scale up to 3: both come back, one is created.
	patchPool(t, ns, `{"spec":{"replicas":2}}`)
	rec.waitSet(t, "2 Ready tasks", func(s *gputaskv1.GPUTaskSet) bool { return s.Status.ReadyReplicas == 2 && s.Status.Replicas == 2 })
	var kept, keptPods []string
	for _, task := range rec.tasks(t) {
		if task.DeletionTimestamp == nil {
			kept, keptPods = append(kept, task.Name), append(keptPods, task.Status.PodName)
			if _, err := cp.GPUTask.GputaskV1().GPUTasks(ns).Patch(ctx, task.Name, types.MergePatchType, []byte(busy), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The set controller reads the tasks from the informer the GPUTask
	// controller shares: once that controller has protected the busy
	// tasks' pods, the set sees the tasks busy too, and the scale-in
	// drains them rather than deleting them.
	for _, name := range keptPods {
		framework.Poll(t, waitTimeout, "pod "+name+" protected from disruption", func(ctx context.Context) (bool, string) {
			pod, err := cp.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return gputaskv1.DisruptionProtected(pod), fmt.Sprintf("pod %s annotations %v", pod.Name, pod.Annotations)
		})
	}
	patchPool(t, ns, `{"spec":{"replicas":0}}`)
	rec.waitSet(t, "2 tasks draining", func(s *gputaskv1.GPUTaskSet) bool { return s.Status.DrainingReplicas == 2 })
	patchPool(t, ns, `{"spec":{"replicas":3}}`)
	rec.waitSet(t, "3 tasks, none draining", func(s *gputaskv1.GPUTaskSet) bool {
		return s.Status.Replicas == 3 && s.Status.DrainingReplicas == 0
	})
	var names []string
	created := 0
	for _, task := range rec.tasks(t) {
		names = append(names, task.Name)
		if !slices.Contains(kept, task.Name) {
			created++
		}
		if task.Annotations[gputaskv1.AnnotationDraining] != "" {
			t.Errorf("task %s still marked draining", task.Name)
		}
	}
	if created != 1 {
		t.Errorf("tasks %v after the scale-up, %d new; want the 2 drains %v taken back and 1 created", names, created, kept)
	}
	waitEvents(t, ns, "UndrainedTask", corev1.EventTypeNormal, kept...)
}

// TestAutoscalerScalesToZeroAndBack: with minReplicas 0, low load takes the
// set to 0; a load above the up threshold brings it back; a failing load
// index at 0 keeps it at 0. Proportional comes back at any load above 0.
func TestAutoscalerScalesToZeroAndBack(t *testing.T) {
	t.Parallel()
	const interval = time.Second
	ns, model, load, rec := setupPool(t, 1, 16, loadLow)
	createPool(t, ns, poolSpec{replicas: 2, min: 0, max: 6, interval: interval, model: model, url: load.URL()})

	rec.waitSet(t, "0 tasks", func(s *gputaskv1.GPUTaskSet) bool {
		return ptr.Deref(s.Spec.Replicas, 1) == 0 && s.Status.Replicas == 0
	})
	// Between the thresholds it stays at 0.
	load.Set(0.7)
	reads := load.Reads()
	time.Sleep(4 * interval)
	if set := rec.waitSet(t, "a hold at 0", func(s *gputaskv1.GPUTaskSet) bool { return true }); ptr.Deref(set.Spec.Replicas, 1) != 0 || load.Reads()-reads < 3 {
		t.Fatalf("at load 0.7: replicas %d after %d reads, want 0 after at least 3", ptr.Deref(set.Spec.Replicas, 1), load.Reads()-reads)
	}
	load.Set(loadHigh)
	rec.waitSet(t, "3 or more Ready tasks again", func(s *gputaskv1.GPUTaskSet) bool { return s.Status.ReadyReplicas >= 3 })

	load.Set(loadLow)
	rec.waitSet(t, "0 tasks again", func(s *gputaskv1.GPUTaskSet) bool { return ptr.Deref(s.Spec.Replicas, 1) == 0 })
	load.Fail(500)
	reads = load.Reads()
	rec.waitSet(t, "failures reported at 0", func(s *gputaskv1.GPUTaskSet) bool {
		return s.Status.ConsecutiveFailures >= 5 && conditionIs(s, gputaskv1.ConditionScalingActive, metav1.ConditionFalse, scaling.ReasonFailedGetLoadIndex)
	})
	if set := rec.waitSet(t, "the set", func(*gputaskv1.GPUTaskSet) bool { return true }); ptr.Deref(set.Spec.Replicas, 1) != 0 || set.Status.Replicas != 0 {
		t.Fatalf("a failing load index moved the set from 0 to %d (%d tasks) after %d reads", ptr.Deref(set.Spec.Replicas, 1), set.Status.Replicas, load.Reads()-reads)
	}

	// Proportional: any load above 0 brings it back, from the total.
	load.Set(0.6)
	patchPool(t, ns, `{"spec":{"autoscaling":{"policy":{"type":"Proportional"},"metrics":[{"name":"backend-load","http":{"url":"`+load.URL()+`"},"target":"0.5"}]}}}`)
	rec.waitSet(t, "2 tasks from a total load of 0.6 at target 0.5", func(s *gputaskv1.GPUTaskSet) bool {
		return ptr.Deref(s.Spec.Replicas, 1) == 2
	})
	steps, reasons := rec.snapshot()
	t.Logf("steps %s\ndecisions %v", formatSteps(steps), reasons)
}

// TestStabilizationWindowStartsAtLastHighReading measures, on the real
// control plane, when the scale-down stabilization window starts: the first
// step comes one window after the last reading at or above downThreshold
// (the last high reading), which is one interval less than a window after
// the first low reading. README's rule says the same. The window is not a
// multiple of the interval: the step then comes at the first evaluation a
// window after the last high reading, half an interval clear of the one a
// window after the first low reading would give, so an evaluation a few
// milliseconds late cannot move it to the next one.
func TestStabilizationWindowStartsAtLastHighReading(t *testing.T) {
	t.Parallel()
	const interval, window = 2 * time.Second, 9 * time.Second
	ns, model, load, rec := setupPool(t, 1, 8, loadMid)
	createPool(t, ns, poolSpec{replicas: 3, min: 1, max: 6, interval: interval, model: model, url: load.URL()})
	patchPool(t, ns, fmt.Sprintf(`{"spec":{"autoscaling":{"scaleDownStabilizationWindow":%q}}}`, window.String()))
	rec.waitSet(t, "3 Ready tasks held", func(s *gputaskv1.GPUTaskSet) bool {
		return s.Status.ReadyReplicas == 3 && decisionReason(s) == scaling.ReasonWithinThresholds
	})
	time.Sleep(2 * interval)

	load.Set(loadLow)
	rec.waitSetWithin(t, window+waitTimeout, "the first step down", func(s *gputaskv1.GPUTaskSet) bool { return ptr.Deref(s.Spec.Replicas, 1) == 2 })
	// The lister can show the step before the recorder's handler has noted
	// it; the step's time is the handler's.
	var steps []poolStep
	framework.Poll(t, waitTimeout, "the recorder noting the step", func(context.Context) (bool, string) {
		steps, _ = rec.snapshot()
		return steps[len(steps)-1].replicas == 2, formatSteps(steps)
	})
	stepAt := steps[len(steps)-1].at
	lastHigh, firstLow := load.LastAtLeast(0.5, stepAt), load.FirstBelow(0.5)
	sinceHigh, sinceLow := stepAt.Sub(lastHigh), stepAt.Sub(firstLow)
	t.Logf("first step %v after the last high reading, %v after the first low one (window %v, interval %v)",
		sinceHigh.Round(10*time.Millisecond), sinceLow.Round(10*time.Millisecond), window, interval)
	if sinceHigh < window-window/10 || sinceHigh > window+interval+interval/2 {
		t.Errorf("first step %v after the last high reading, want about one window (%v)", sinceHigh, window)
	}
	if sinceLow >= window {
		t.Errorf("first step %v after the first low reading: the window would start at the first low reading", sinceLow)
	}
}

// TestStoppedAndPausedAreVisible: a stopped set says so in its AbleToScale
// condition (reason Stopped) and in `kubectl get gts`; a paused one keeps
// its condition (reason ScalingDisabled).
func TestStoppedAndPausedAreVisible(t *testing.T) {
	t.Parallel()
	ns, model, load, rec := setupPool(t, 1, 4, loadMid)
	createPool(t, ns, poolSpec{replicas: 2, min: 1, max: 4, interval: time.Second, model: model, url: load.URL()})
	rec.waitSet(t, "2 Ready tasks", func(s *gputaskv1.GPUTaskSet) bool { return s.Status.ReadyReplicas == 2 })

	patchPool(t, ns, `{"metadata":{"annotations":{"gputask.io/paused":"true"}}}`)
	rec.waitSet(t, "AbleToScale False, ScalingDisabled", func(s *gputaskv1.GPUTaskSet) bool {
		return conditionIs(s, gputaskv1.ConditionAbleToScale, metav1.ConditionFalse, "ScalingDisabled")
	})
	patchPool(t, ns, `{"metadata":{"annotations":{"gputask.io/paused":null,"gputask.io/stopped":"true"}}}`)
	rec.waitSet(t, "AbleToScale False, Stopped, and no tasks", func(s *gputaskv1.GPUTaskSet) bool {
		return conditionIs(s, gputaskv1.ConditionAbleToScale, metav1.ConditionFalse, scaling.ReasonStopped) && s.Status.Replicas == 0
	})
	out := cp.KubectlT(t, "get", "gts", "-o", "wide", "-n", ns)
	t.Logf("kubectl get gts -o wide:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("kubectl get gts printed %d lines", len(lines))
	}
	header, row := strings.Fields(lines[0]), strings.Fields(lines[1])
	// Empty columns (STARTING, DRAINING at 0) shift the fields, so look
	// for the values rather than their positions.
	if !slices.Contains(row, "true") || !slices.Contains(row, scaling.ReasonStopped) || !slices.Contains(header, "STOPPED") || !slices.Contains(header, "READY") {
		t.Errorf("kubectl get gts -o wide does not show the set as stopped:\n%s", out)
	}
}
