package e2e

// The pool recorder: every step of a pool's spec.replicas and decisions,
// seen through informers.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	gputaskinformers "github.com/gputask/gputask-controller/pkg/generated/informers/externalversions"
	gputasklisters "github.com/gputask/gputask-controller/pkg/generated/listers/gputask/v1"
)

// poolRecorder watches the namespace's pool and tasks through informers, so
// that no step of the autoscaler goes unseen between two polls.
type poolRecorder struct {
	ns         string
	setLister  gputasklisters.GPUTaskSetLister
	taskLister gputasklisters.GPUTaskLister

	mu sync.Mutex
	// steps are the values of spec.replicas in the order seen, each listed
	// once per run of equal values.
	steps []poolStep
	// decisions are the reasons of status.lastDecision, likewise.
	decisions []string
	// maxStarting is the highest status.startingReplicas seen.
	maxStarting int32
	deleted     map[string]deletedTask
}

// poolStep is one change of spec.replicas as the recorder saw it.
type poolStep struct {
	at       time.Time
	replicas int32
	// ready is how many of the pool's tasks were Ready at that moment.
	ready int
}

// deletedTask is a task seen going away: its creation, and when the
// deletion was first seen (never before it happened).
type deletedTask struct {
	name             string
	created, deleted time.Time
}

// recordPool starts informers on the sets and tasks of ns, which stop with
// the test, and returns once their caches have synced.
func recordPool(t *testing.T, ns string) *poolRecorder {
	t.Helper()
	r := &poolRecorder{ns: ns, deleted: map[string]deletedTask{}}
	ctx, cancel := context.WithCancel(context.Background())
	factory := gputaskinformers.NewSharedInformerFactoryWithOptions(cp.GPUTask, 0, gputaskinformers.WithNamespace(ns))
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
	})
	sets, tasks := factory.Gputask().V1().GPUTaskSets(), factory.Gputask().V1().GPUTasks()
	// The listers are set before any handler runs, so handlers may read them.
	r.setLister, r.taskLister = sets.Lister(), tasks.Lister()
	_, err := sets.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.onSet,
		UpdateFunc: func(_, obj any) { r.onSet(obj) },
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tasks.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { r.onTaskGone(obj, false) },
		DeleteFunc: func(obj any) { r.onTaskGone(obj, true) },
	})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	for informer, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("informer %v did not sync", informer)
		}
	}
	return r
}

func (r *poolRecorder) onSet(obj any) {
	set, ok := obj.(*gputaskv1.GPUTaskSet)
	if !ok || set.Name != poolName {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.maxStarting = max(r.maxStarting, set.Status.StartingReplicas)
	if reason := decisionReason(set); reason != "" && (len(r.decisions) == 0 || r.decisions[len(r.decisions)-1] != reason) {
		r.decisions = append(r.decisions, reason)
	}
	if replicas := ptr.Deref(set.Spec.Replicas, 1); len(r.steps) == 0 || r.steps[len(r.steps)-1].replicas != replicas {
		// Readiness is read from the task cache at each step.
		r.steps = append(r.steps, poolStep{at: now, replicas: replicas, ready: r.readyTasks()})
	}
}

// onTaskGone notes a task being deleted. Tasks have no finalizers and
// usually vanish at once; a delete event may carry a tombstone.
func (r *poolRecorder) onTaskGone(obj any, deleted bool) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	task, ok := obj.(*gputaskv1.GPUTask)
	if !ok || (!deleted && task.DeletionTimestamp == nil) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, seen := r.deleted[task.Name]; !seen {
		r.deleted[task.Name] = deletedTask{name: task.Name, created: task.CreationTimestamp.Time, deleted: time.Now()}
	}
}

func (r *poolRecorder) readyTasks() int {
	tasks, err := r.taskLister.GPUTasks(r.ns).List(labels.SelectorFromSet(labels.Set{gputaskv1.LabelTaskSet: poolName}))
	if err != nil {
		return -1
	}
	n := 0
	for _, t := range tasks {
		if t.DeletionTimestamp == nil && meta.IsStatusConditionTrue(t.Status.Conditions, gputaskv1.ConditionReady) {
			n++
		}
	}
	return n
}

// snapshot returns the steps and decisions so far.
func (r *poolRecorder) snapshot() ([]poolStep, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.steps), slices.Clone(r.decisions)
}

// replicaSequence returns the values spec.replicas went through.
func (r *poolRecorder) replicaSequence() []int32 {
	steps, _ := r.snapshot()
	out := make([]int32, 0, len(steps))
	for _, s := range steps {
		out = append(out, s.replicas)
	}
	return out
}

func (r *poolRecorder) reasons() []string {
	_, decisions := r.snapshot()
	return decisions
}

func (r *poolRecorder) maxStartingReplicas() int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxStarting
}

func (r *poolRecorder) deletedTasks() []deletedTask {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]deletedTask, 0, len(r.deleted))
	for _, d := range r.deleted {
		out = append(out, d)
	}
	return out
}

// set returns the pool as the informer last saw it.
func (r *poolRecorder) set(t *testing.T) *gputaskv1.GPUTaskSet {
	t.Helper()
	set, err := r.setLister.GPUTaskSets(r.ns).Get(poolName)
	if err != nil {
		t.Fatalf("getting the pool from the cache: %v", err)
	}
	return set
}

// tasks returns the pool's tasks as the informer last saw them.
func (r *poolRecorder) tasks(t *testing.T) []*gputaskv1.GPUTask {
	t.Helper()
	tasks, err := r.taskLister.GPUTasks(r.ns).List(labels.SelectorFromSet(labels.Set{gputaskv1.LabelTaskSet: poolName}))
	if err != nil {
		t.Fatal(err)
	}
	return tasks
}

// oldestTask returns the creation time of the pool's oldest task.
func (r *poolRecorder) oldestTask(t *testing.T) time.Time {
	t.Helper()
	tasks := r.tasks(t)
	if len(tasks) == 0 {
		t.Fatal("listing the pool's tasks: 0 tasks")
	}
	oldest := tasks[0].CreationTimestamp.Time
	for _, task := range tasks[1:] {
		if task.CreationTimestamp.Time.Before(oldest) {
			oldest = task.CreationTimestamp.Time
		}
	}
	return oldest
}

// waitSet waits up to waitTimeout until done holds for the pool in the
// cache, and returns it.
func (r *poolRecorder) waitSet(t *testing.T, what string, done func(*gputaskv1.GPUTaskSet) bool) *gputaskv1.GPUTaskSet {
	t.Helper()
	return r.waitSetWithin(t, waitTimeout, what, done)
}

// waitSetWithin waits until done holds for the pool in the cache and returns
// it; on timeout it fails the test with the steps, the decisions and the
// pool's last status.
func (r *poolRecorder) waitSetWithin(t *testing.T, timeout time.Duration, what string, done func(*gputaskv1.GPUTaskSet) bool) *gputaskv1.GPUTaskSet {
	t.Helper()
	var last *gputaskv1.GPUTaskSet
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		set, err := r.setLister.GPUTaskSets(r.ns).Get(poolName)
		if err != nil {
			return false, nil
		}
		last = set
		return done(set), nil
	})
	if err != nil {
		steps, decisions := r.snapshot()
		t.Fatalf("waiting for %s: %v\nsteps %s\ndecisions %v\nlast status: %s", what, err, formatSteps(steps), decisions, describeStatus(last))
	}
	return last
}

// formatSteps renders steps as "replicas@seconds since the first (ready)".
func formatSteps(steps []poolStep) string {
	parts := make([]string, 0, len(steps))
	for _, s := range steps {
		parts = append(parts, fmt.Sprintf("%d@%.1fs(%d ready)", s.replicas, s.at.Sub(steps[0].at).Seconds(), s.ready))
	}
	return strings.Join(parts, " ")
}
