package main

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
	"github.com/gputask/gputask-controller/test/kwok"
)

// The demo plays the workers of the autoscaled set. Each one loads its model
// first: its pod carries kwok.FakeStartupEnv, so the fake node makes it
// Ready only after kwok.SlowStartup. Once Ready, two workers in three take
// jobs: busy for jobLength, then idle for restLength, over and over, each
// at its own offset in that cycle so that they do not all rest at once, and
// say so with gputask.io/busy "true", some on their pod and some on their
// task. A worker that the set marks gputask.io/draining finishes the job it
// has and takes no other, as a real one reading the annotation through the
// downward API would.
const (
	jobLength  = 40 * time.Second
	restLength = 6 * time.Second
)

// worker is what one task of the set looks like to the demo.
type worker struct {
	ready, busy, draining bool
	// finished tasks (Succeeded or Failed) neither start nor work.
	finished bool
}

// workerOf reads a worker off its task and its pod (nil while there is none).
// It is Ready when the task's Ready condition or the pod's is True (the
// task mirrors the pod a moment later), busy or draining when the task or
// the pod carries the annotation "true".
func workerOf(task *gputaskv1.GPUTask, pod *corev1.Pod) worker {
	w := worker{
		ready:    meta.IsStatusConditionTrue(task.Status.Conditions, gputaskv1.ConditionReady),
		busy:     task.Annotations[gputaskv1.AnnotationBusy] == "true",
		draining: task.Annotations[gputaskv1.AnnotationDraining] == "true",
		finished: task.Status.Phase == gputaskv1.GPUTaskSucceeded || task.Status.Phase == gputaskv1.GPUTaskFailed,
	}
	if pod != nil {
		w.ready = w.ready || podReady(pod)
		w.busy = w.busy || pod.Annotations[gputaskv1.AnnotationBusy] == "true"
		w.draining = w.draining || pod.Annotations[gputaskv1.AnnotationDraining] == "true"
	}
	return w
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// state is the worker in one word, for the GPUTasks section.
func (w worker) state() string {
	switch {
	case w.finished:
		return "-"
	case w.draining && w.busy:
		return "draining(busy)"
	case w.draining:
		return "draining"
	case !w.ready:
		return "starting"
	case w.busy:
		return "busy"
	}
	return "idle"
}

// workerCounts are the autoscaled set's workers at one moment. A task is
// counted once in starting or ready; busy and draining count among those.
type workerCounts struct {
	starting, ready, busy, draining int
}

func countWorkers(workers []worker) workerCounts {
	var c workerCounts
	for _, w := range workers {
		if w.finished {
			continue
		}
		if w.ready {
			c.ready++
		} else {
			c.starting++
		}
		if w.busy {
			c.busy++
		}
		if w.draining {
			c.draining++
		}
	}
	return c
}

// takesJobs says whether the named worker takes jobs at all: two in three
// do, so scale-in finds both idle and busy tasks.
func takesJobs(name string) bool { return nameHash(name)%3 != 0 }

// marksPod says whether the named worker marks its pod busy rather than its
// task; the set controller reads both.
func marksPod(name string) bool { return nameHash(name)%2 == 0 }

func nameHash(name string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return h.Sum32()
}

// cycleOffset is where in its cycle of jobs and rests the named worker is
// when it becomes Ready.
func cycleOffset(name string) time.Duration {
	return time.Duration(nameHash(name)%uint32((jobLength+restLength)/time.Second)) * time.Second
}

// busyAt says whether a worker that takes jobs, Ready since readySince and
// offset into its cycle then, is in the middle of a job at now. Its jobs
// follow one another with a rest between. Once it was marked draining at
// drainingSince (zero when it is not draining), it finishes the job it had
// then and starts no other.
func busyAt(readySince time.Time, offset time.Duration, drainingSince, now time.Time) bool {
	if now.Before(readySince) {
		return false
	}
	cycle := jobLength + restLength
	inJob := func(t time.Time) (int64, bool) {
		since := t.Sub(readySince) + offset
		return int64(since / cycle), since%cycle < jobLength
	}
	n, busy := inJob(now)
	if drainingSince.IsZero() || !busy {
		return busy
	}
	if drainingSince.Before(readySince) {
		return false
	}
	m, busyThen := inJob(drainingSince)
	return busyThen && m == n
}

// readySince is when the worker became Ready: the pod's Ready condition's
// transition time, else the task's.
func readySince(task *gputaskv1.GPUTask, pod *corev1.Pod) time.Time {
	if pod != nil {
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return c.LastTransitionTime.Time
			}
		}
	}
	if c := meta.FindStatusCondition(task.Status.Conditions, gputaskv1.ConditionReady); c != nil && c.Status == metav1.ConditionTrue {
		return c.LastTransitionTime.Time
	}
	return time.Time{}
}

// workers plays the autoscaled set's workers until ctx ends.
type workers struct {
	cp *framework.ControlPlane
	// drainingSince is when the demo first saw each task draining.
	drainingSince map[string]time.Time
	logf          func(string, ...any)
}

func newWorkers(cp *framework.ControlPlane, logf func(string, ...any)) *workers {
	return &workers{cp: cp, drainingSince: map[string]time.Time{}, logf: logf}
}

// run moves every worker once a second. A failed read or write is tried
// again on the next tick; the view shows what the cluster holds.
func (ws *workers) run(ctx context.Context) {
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		if err := ws.step(ctx, time.Now()); err != nil && ctx.Err() == nil {
			ws.logf("workers: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func (ws *workers) step(ctx context.Context, now time.Time) error {
	tasks, pods, err := setTasksAndPods(ctx, ws.cp)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for i := range tasks {
		task := &tasks[i]
		seen[task.Name] = true
		pod := pods[task.Status.PodName]
		w := workerOf(task, pod)
		if w.draining {
			if _, ok := ws.drainingSince[task.Name]; !ok {
				ws.drainingSince[task.Name] = now
			}
		} else {
			delete(ws.drainingSince, task.Name)
		}
		want := false
		if since := readySince(task, pod); w.ready && !w.finished && !since.IsZero() && takesJobs(task.Name) {
			want = busyAt(since, cycleOffset(task.Name), ws.drainingSince[task.Name], now)
		}
		if want == w.busy {
			continue
		}
		if err := ws.markBusy(ctx, task, pod, want); err != nil {
			return err
		}
	}
	for name := range ws.drainingSince {
		if !seen[name] {
			delete(ws.drainingSince, name)
		}
	}
	return nil
}

// markBusy sets gputask.io/busy on the worker's pod or task, or clears it
// from whichever carries it.
func (ws *workers) markBusy(ctx context.Context, task *gputaskv1.GPUTask, pod *corev1.Pod, busy bool) error {
	value := any(nil)
	if busy {
		value = "true"
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{gputaskv1.AnnotationBusy: value}}})
	if err != nil {
		return fmt.Errorf("encoding the busy patch: %w", err)
	}
	onPod, onTask := busy && pod != nil && marksPod(task.Name), busy && (pod == nil || !marksPod(task.Name))
	if !busy {
		onPod = pod != nil && pod.Annotations[gputaskv1.AnnotationBusy] != ""
		onTask = task.Annotations[gputaskv1.AnnotationBusy] != ""
	}
	if onPod {
		if _, err := ws.cp.Kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("marking pod %s busy=%v: %w", pod.Name, busy, err)
		}
	}
	if onTask {
		if _, err := ws.cp.GPUTask.GputaskV1().GPUTasks(task.Namespace).Patch(ctx, task.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("marking task %s busy=%v: %w", task.Name, busy, err)
		}
	}
	return nil
}

// setTasksAndPods lists the autoscaled set's tasks that are not being
// deleted, and the pods of the namespace by name.
func setTasksAndPods(ctx context.Context, cp *framework.ControlPlane) ([]gputaskv1.GPUTask, map[string]*corev1.Pod, error) {
	selector := gputaskv1.LabelTaskSet + "=" + autoscaledSetName
	taskList, err := cp.GPUTask.GputaskV1().GPUTasks(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, nil, fmt.Errorf("listing the tasks of %s: %w", autoscaledSetName, err)
	}
	podList, err := cp.Kube.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing pods: %w", err)
	}
	pods := make(map[string]*corev1.Pod, len(podList.Items))
	for i := range podList.Items {
		pods[podList.Items[i].Name] = &podList.Items[i]
	}
	tasks := taskList.Items[:0]
	for _, t := range taskList.Items {
		if t.DeletionTimestamp == nil {
			tasks = append(tasks, t)
		}
	}
	return tasks, pods, nil
}

// slowStartEnv is what the demo adds to the autoscaled set's template so
// that its pods take kwok.SlowStartup to become Ready.
var slowStartEnv = corev1.EnvVar{Name: kwok.FakeStartupEnv, Value: kwok.FakeStartupSlow}
