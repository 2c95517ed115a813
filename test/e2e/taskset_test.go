package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/autoscaler"
	gputaskinformers "github.com/gputask/gputask-controller/pkg/generated/informers/externalversions"
	gputasklisters "github.com/gputask/gputask-controller/pkg/generated/listers/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/scaling"
)

// These tests drive the autoscaler of the package's controller (started in
// main_test.go; it watches every namespace, so a second controller here
// would only fight it over the same sets) with a load index that the test
// process serves on 127.0.0.1 and changes at will. Each test has its own
// namespace and its own fake GPU nodes with a GPU model nobody else asks
// for, so the tests run in parallel without sharing GPUs.

const (
	// tsPoolName is the GPUTaskSet of every test; namespaces keep them apart.
	tsPoolName = "pool"
	// tsInterval is spec.autoscaling.interval: short, so a test sees
	// many decisions in a few seconds.
	tsInterval = time.Second
	// Loads against the default thresholds (up 0.8, down 0.5).
	tsLoadHigh = 0.9
	tsLoadMid  = 0.6
	tsLoadLow  = 0.3
	// tsTimeout bounds each wait for a scaling step or a condition.
	tsTimeout = 60 * time.Second
)

// TestTaskSetScalesUpInStepsAndHolds: at load 0.9 a set of 1 grows by the
// default stepUp of 3 per decision, 1 → 4 → 7, and stops at maxReplicas 7
// with ScalingLimited True. At 0.6, between the thresholds, it holds.
func TestTaskSetScalesUpInStepsAndHolds(t *testing.T) {
	t.Parallel()
	ns := cp.NamespaceT(t)
	model := tsGPUNodesT(t, ns, 1, 16)
	load := tsNewLoadServer(t, tsLoadHigh)
	rec := tsRecordPool(t, ns)

	tsCreatePool(t, ns, tsPool{replicas: 1, min: 1, max: 7, model: model, gpus: 1, url: load.URL()})

	rec.waitSet(t, "7 running tasks, held at maxReplicas", func(s *gputaskv1.GPUTaskSet) bool {
		return s.Status.RunningReplicas == 7 && tsDecisionReason(s) == scaling.ReasonTooManyReplicas &&
			tsConditionIs(s, gputaskv1.ConditionScalingLimited, metav1.ConditionTrue, scaling.ReasonTooManyReplicas)
	})
	if got, want := rec.replicaSequence(), []int32{1, 4, 7}; !slices.Equal(got, want) {
		t.Errorf("spec.replicas went %v, want %v", got, want)
	}
	if got := rec.reasons(); !slices.Contains(got, scaling.ReasonScaleUpAboveThreshold) {
		t.Errorf("status.lastDecision.reason went %v, want %s among them", got, scaling.ReasonScaleUpAboveThreshold)
	}
	tsWaitEvents(t, ns, autoscaler.EventScaledUp, corev1.EventTypeNormal, "New size: 4", "New size: 7")

	load.Set(tsLoadMid)
	rec.waitSet(t, "a decision within the thresholds", func(s *gputaskv1.GPUTaskSet) bool {
		return tsDecisionReason(s) == scaling.ReasonWithinThresholds
	})
	reads := load.Reads()
	time.Sleep(5 * tsInterval)
	if n := load.Reads() - reads; n < 3 {
		t.Errorf("the load index was read %d times in 5 intervals; the hold proves nothing", n)
	}
	if got, want := rec.replicaSequence(), []int32{1, 4, 7}; !slices.Equal(got, want) {
		t.Errorf("at load %v spec.replicas went %v, want it held at 7 (%v)", tsLoadMid, got, want)
	}
	t.Logf("kubectl get gts:\n%s", cp.KubectlT(t, "get", "gts", "-n", ns))
}

// TestTaskSetScalesDownPastYoungTasks: at load 0.3 a set of 4 shrinks by
// one task per decision down to minReplicas 1. Its tasks run but are younger
// than minTaskAge at first, so the first scale-in is held back
// (status.heldBackReplicas, then decisions TasksTooYoung) and nothing is
// deleted until they come of age.
func TestTaskSetScalesDownPastYoungTasks(t *testing.T) {
	t.Parallel()
	const minTaskAge = 20 * time.Second
	ns := cp.NamespaceT(t)
	model := tsGPUNodesT(t, ns, 1, 8)
	load := tsNewLoadServer(t, tsLoadMid)
	rec := tsRecordPool(t, ns)

	tsCreatePool(t, ns, tsPool{replicas: 4, min: 1, max: 7, model: model, gpus: 1, url: load.URL(), minTaskAge: minTaskAge})
	rec.waitSet(t, "4 running tasks", func(s *gputaskv1.GPUTaskSet) bool { return s.Status.RunningReplicas == 4 })
	youngUntil := rec.oldestTask(t).Add(minTaskAge)
	if time.Until(youngUntil) < 5*time.Second {
		t.Fatalf("tasks took too long to run: they come of age in %v, too soon to test minTaskAge", time.Until(youngUntil))
	}

	load.Set(tsLoadLow)
	rec.waitSet(t, "scale-in held back by young tasks", func(s *gputaskv1.GPUTaskSet) bool {
		return s.Status.HeldBackReplicas > 0 && tsDecisionReason(s) == scaling.ReasonTasksTooYoung &&
			tsConditionIs(s, gputaskv1.ConditionAbleToScale, metav1.ConditionFalse, scaling.ReasonTasksTooYoung)
	})
	if time.Now().After(youngUntil) {
		t.Fatal("the tasks came of age before the hold could be checked")
	}
	set := rec.set(t)
	t.Logf("held: spec.replicas %d, status.replicas %d, heldBackReplicas %d, decision %q",
		*set.Spec.Replicas, set.Status.Replicas, set.Status.HeldBackReplicas, set.Status.LastDecision.Message)
	if set.Status.Replicas != 4 || len(rec.deletedTasks()) > 0 {
		t.Errorf("young tasks were removed: status.replicas %d, deleted %v", set.Status.Replicas, rec.deletedTasks())
	}

	rec.waitSet(t, "1 task at minReplicas", func(s *gputaskv1.GPUTaskSet) bool {
		return s.Status.Replicas == 1 && tsDecisionReason(s) == scaling.ReasonTooFewReplicas
	})
	if got, want := rec.replicaSequence(), []int32{4, 3, 2, 1}; !slices.Equal(got, want) {
		t.Errorf("spec.replicas went %v, want %v", got, want)
	}
	deleted := rec.deletedTasks()
	if len(deleted) != 3 {
		t.Errorf("deleted tasks %v, want 3", deleted)
	}
	for _, d := range deleted {
		if age := d.deleted.Sub(d.created); age < minTaskAge {
			t.Errorf("task %s was deleted %v after its creation, before minTaskAge %v", d.name, age, minTaskAge)
		}
	}
	tsWaitEvents(t, ns, autoscaler.EventScaledDown, corev1.EventTypeNormal, "New size: 3", "New size: 2", "New size: 1")
}

// TestTaskSetHoldsWhileLoadIndexFails: while the endpoint answers 500, hangs
// past the read timeout, or refuses connections, the count stays as it was,
// even past the failure threshold (no fallback is set). ScalingActive turns
// False with reason FailedGetLoadIndex and a Warning event says why; a good
// answer makes it True again.
func TestTaskSetHoldsWhileLoadIndexFails(t *testing.T) {
	t.Parallel()
	ns := cp.NamespaceT(t)
	model := tsGPUNodesT(t, ns, 1, 8)
	load := tsNewLoadServer(t, tsLoadMid)
	rec := tsRecordPool(t, ns)

	tsCreatePool(t, ns, tsPool{replicas: 3, min: 1, max: 7, model: model, gpus: 1, url: load.URL(), timeout: time.Second})
	rec.waitSet(t, "3 running tasks, load index read", func(s *gputaskv1.GPUTaskSet) bool {
		return s.Status.RunningReplicas == 3 &&
			tsConditionIs(s, gputaskv1.ConditionScalingActive, metav1.ConditionTrue, autoscaler.ReasonValidMetricFound)
	})

	outages := []struct {
		name  string
		start func()
		// message is part of the ScalingActive message.
		message string
	}{
		{"HTTP 500", func() { load.Fail(http.StatusInternalServerError) }, "the server answered HTTP 5xx"},
		{"timeout", load.Hang, "load index unreachable"},
		{"connection refused", load.Close, "load index unreachable"},
	}
	for i, outage := range outages {
		if i > 0 {
			// Recover in between, so each outage starts from a good reading.
			load.Set(tsLoadMid)
			rec.waitSet(t, "recovery before "+outage.name, func(s *gputaskv1.GPUTaskSet) bool {
				return tsConditionIs(s, gputaskv1.ConditionScalingActive, metav1.ConditionTrue, autoscaler.ReasonValidMetricFound) &&
					s.Status.ConsecutiveFailures == 0
			})
		}
		outage.start()
		rec.waitSet(t, outage.name+": ScalingActive False past the failure threshold", func(s *gputaskv1.GPUTaskSet) bool {
			c := meta.FindStatusCondition(s.Status.Conditions, gputaskv1.ConditionScalingActive)
			return tsConditionIs(s, gputaskv1.ConditionScalingActive, metav1.ConditionFalse, scaling.ReasonFailedGetLoadIndex) &&
				strings.Contains(c.Message, outage.message) && s.Status.ConsecutiveFailures > scaling.DefaultFailureThreshold &&
				tsDecisionReason(s) == scaling.ReasonFailedGetLoadIndex
		})
		set := rec.set(t)
		t.Logf("%s: %d failures in a row, decision %q", outage.name, set.Status.ConsecutiveFailures, set.Status.LastDecision.Message)
		tsWaitEvents(t, ns, scaling.ReasonFailedGetLoadIndex, corev1.EventTypeWarning, outage.message)
		if got := rec.replicaSequence(); !slices.Equal(got, []int32{3}) {
			t.Errorf("%s: spec.replicas went %v, want it held at 3", outage.name, got)
		}
		if set.Status.Replicas != 3 {
			t.Errorf("%s: status.replicas %d, want 3", outage.name, set.Status.Replicas)
		}
	}
}

// TestTaskSetStopsAtGPUCapacity: with capacityAware, a set of 3-GPU tasks on
// two nodes of 8 GPUs grows to the 4 tasks that fit (two per node) and no
// further, although load 0.9 and maxReplicas 10 ask for more.
func TestTaskSetStopsAtGPUCapacity(t *testing.T) {
	t.Parallel()
	ns := cp.NamespaceT(t)
	model := tsGPUNodesT(t, ns, 2, 8)
	load := tsNewLoadServer(t, tsLoadHigh)
	rec := tsRecordPool(t, ns)

	tsCreatePool(t, ns, tsPool{replicas: 1, min: 1, max: 10, model: model, gpus: 3, url: load.URL(), capacityAware: true})
	rec.waitSet(t, "4 running tasks, capped at capacity", func(s *gputaskv1.GPUTaskSet) bool {
		return s.Status.RunningReplicas == 4 && s.Status.CapacityReplicas != nil && *s.Status.CapacityReplicas == 4 &&
			tsDecisionReason(s) == scaling.ReasonCapacityLimited &&
			tsConditionIs(s, gputaskv1.ConditionScalingLimited, metav1.ConditionTrue, scaling.ReasonCapacityLimited)
	})
	reads := load.Reads()
	time.Sleep(3 * tsInterval)
	if n := load.Reads() - reads; n < 2 {
		t.Errorf("the load index was read %d times in 3 intervals; the cap proves nothing", n)
	}
	if got, want := rec.replicaSequence(), []int32{1, 4}; !slices.Equal(got, want) {
		t.Errorf("spec.replicas went %v, want %v", got, want)
	}
	set := rec.set(t)
	t.Logf("capped: %s", set.Status.LastDecision.Message)
	if set.Status.PendingReplicas != 0 {
		t.Errorf("%d tasks pending; capacity should have kept them from being created", set.Status.PendingReplicas)
	}
	t.Logf("kubectl get gt:\n%s", cp.KubectlT(t, "get", "gt", "-n", ns))
}

// tsPool is the GPUTaskSet a test creates.
type tsPool struct {
	replicas, min, max int32
	model              string
	gpus               int32
	url                string
	minTaskAge         time.Duration
	capacityAware      bool
	// timeout is the read timeout; 0 keeps the default.
	timeout time.Duration
}

// tsCreatePool creates the set with a Step policy at its defaults (thresholds
// 0.8 and 0.5, stepUp 3, stepDown 1) and no scale-down stabilization, so
// every decision shows at once.
func tsCreatePool(t *testing.T, ns string, p tsPool) {
	t.Helper()
	amount := intstr.FromInt32(p.gpus)
	source := &gputaskv1.HTTPSource{URL: p.url}
	if p.timeout > 0 {
		source.Timeout = &gputaskv1.Duration{Duration: p.timeout}
	}
	set := &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: tsPoolName},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: &p.replicas,
			Template: gputaskv1.GPUTaskTemplateSpec{
				Spec: gputaskv1.GPUTaskSpec{GPU: p.model, GPUAmount: &amount},
			},
			Autoscaling: &gputaskv1.AutoscalingSpec{
				MinReplicas:                  &p.min,
				MaxReplicas:                  p.max,
				Interval:                     &gputaskv1.Duration{Duration: tsInterval},
				Metrics:                      []gputaskv1.MetricSpec{{Name: "backend-load", HTTP: source}},
				Policy:                       gputaskv1.ScalingPolicy{Type: gputaskv1.StepPolicy},
				ScaleDownStabilizationWindow: &gputaskv1.Duration{},
				CapacityAware:                p.capacityAware,
			},
		},
	}
	if p.minTaskAge > 0 {
		set.Spec.MinTaskAge = &gputaskv1.Duration{Duration: p.minTaskAge}
	}
	if _, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Create(context.Background(), set, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating gputaskset %s/%s: %v", ns, tsPoolName, err)
	}
}

// tsGPUNodesT creates n fake nodes with gpus GPUs each, of a GPU model named
// after the namespace, and returns the model.
func tsGPUNodesT(t *testing.T, ns string, n, gpus int) string {
	t.Helper()
	model := "gpu-" + ns
	for i := range n {
		cp.CreateGPUNodeT(t, fmt.Sprintf("%s-%d", ns, i), model, gpus)
	}
	return model
}

// tsLoadServer is a scripted load-index endpoint on 127.0.0.1. It answers
// {"data":{"load_balance":X}} with the value last set, or fails as told.
type tsLoadServer struct {
	srv   *httptest.Server
	reads atomic.Int64
	// stop ends hanging requests when the server closes.
	stop      chan struct{}
	closeOnce sync.Once

	mu     sync.Mutex
	value  float64
	status int // an HTTP error status to answer with; 0 answers the value
	hang   bool
}

func tsNewLoadServer(t *testing.T, value float64) *tsLoadServer {
	s := &tsLoadServer{value: value, stop: make(chan struct{})}
	// httptest listens on 127.0.0.1 with a free port.
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *tsLoadServer) serve(w http.ResponseWriter, r *http.Request) {
	s.reads.Add(1)
	s.mu.Lock()
	value, status, hang := s.value, s.status, s.hang
	s.mu.Unlock()
	switch {
	case hang:
		// Answer nothing until the client gives up.
		select {
		case <-r.Context().Done():
		case <-s.stop:
		}
	case status != 0:
		http.Error(w, "load index unavailable", status)
	default:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"data":{"load_balance":%g}}`, value)
	}
}

// URL is the endpoint's address, for spec.autoscaling.metrics[].http.url.
func (s *tsLoadServer) URL() string { return s.srv.URL + "/api/load" }

// Reads counts the requests served so far.
func (s *tsLoadServer) Reads() int64 { return s.reads.Load() }

// Set answers value from now on.
func (s *tsLoadServer) Set(value float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.value, s.status, s.hang = value, 0, false
}

// Fail answers the HTTP status code from now on.
func (s *tsLoadServer) Fail(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.hang = code, false
}

// Hang answers nothing from now on, so reads time out.
func (s *tsLoadServer) Hang() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hang = true
}

// Close stops the server; its port then refuses connections.
func (s *tsLoadServer) Close() {
	s.closeOnce.Do(func() {
		close(s.stop)
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
}

// tsRecorder watches the namespace's pool and tasks through informers, so
// that no step of the autoscaler goes unseen between two polls.
type tsRecorder struct {
	ns         string
	setLister  gputasklisters.GPUTaskSetLister
	taskLister gputasklisters.GPUTaskLister

	mu sync.Mutex
	// replicas are the values of spec.replicas in the order seen, each
	// listed once per run of equal values.
	replicas []int32
	// decisions are the reasons of status.lastDecision, likewise.
	decisions []string
	deleted   map[string]tsDeletedTask
}

// tsDeletedTask is a task seen going away: its creation, and when the
// deletion was first seen (never before it happened).
type tsDeletedTask struct {
	name             string
	created, deleted time.Time
}

func tsRecordPool(t *testing.T, ns string) *tsRecorder {
	t.Helper()
	r := &tsRecorder{ns: ns, deleted: map[string]tsDeletedTask{}}
	tsWatchPool(t, ns, &r.setLister, &r.taskLister, r.onSet, cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { r.onTaskGone(obj, false) },
		DeleteFunc: func(obj any) { r.onTaskGone(obj, true) },
	})
	return r
}

// tsWatchPool starts informers on the sets and tasks of ns, sets the
// listers (before any handler runs, so handlers may read them), calls onSet
// with every add and update of a set, hands task events to onTask, and
// returns once the caches have synced. They stop with the test.
func tsWatchPool(t *testing.T, ns string, setLister *gputasklisters.GPUTaskSetLister, taskLister *gputasklisters.GPUTaskLister,
	onSet func(any), onTask cache.ResourceEventHandler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	factory := gputaskinformers.NewSharedInformerFactoryWithOptions(cp.GPUTask, 0, gputaskinformers.WithNamespace(ns))
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
	})
	sets, tasks := factory.Gputask().V1().GPUTaskSets(), factory.Gputask().V1().GPUTasks()
	*setLister, *taskLister = sets.Lister(), tasks.Lister()
	_, err := sets.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    onSet,
		UpdateFunc: func(_, obj any) { onSet(obj) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tasks.Informer().AddEventHandler(onTask); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	for informer, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("informer %v did not sync", informer)
		}
	}
}

func (r *tsRecorder) onSet(obj any) {
	set, ok := obj.(*gputaskv1.GPUTaskSet)
	if !ok || set.Name != tsPoolName {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if replicas := tsPtrOr(set.Spec.Replicas, 1); len(r.replicas) == 0 || r.replicas[len(r.replicas)-1] != replicas {
		r.replicas = append(r.replicas, replicas)
	}
	if reason := tsDecisionReason(set); reason != "" && (len(r.decisions) == 0 || r.decisions[len(r.decisions)-1] != reason) {
		r.decisions = append(r.decisions, reason)
	}
}

// onTaskGone notes a task being deleted. Tasks have no finalizers and
// usually vanish at once; a delete event may carry a tombstone.
func (r *tsRecorder) onTaskGone(obj any, deleted bool) {
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
		r.deleted[task.Name] = tsDeletedTask{name: task.Name, created: task.CreationTimestamp.Time, deleted: time.Now()}
	}
}

func (r *tsRecorder) replicaSequence() []int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.replicas)
}

func (r *tsRecorder) reasons() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.decisions)
}

func (r *tsRecorder) deletedTasks() []tsDeletedTask {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]tsDeletedTask, 0, len(r.deleted))
	for _, d := range r.deleted {
		out = append(out, d)
	}
	return out
}

// set returns the pool as the informer last saw it.
func (r *tsRecorder) set(t *testing.T) *gputaskv1.GPUTaskSet {
	t.Helper()
	set, err := r.setLister.GPUTaskSets(r.ns).Get(tsPoolName)
	if err != nil {
		t.Fatalf("getting the pool from the cache: %v", err)
	}
	return set
}

// oldestTask returns the creation time of the pool's oldest task.
func (r *tsRecorder) oldestTask(t *testing.T) time.Time {
	t.Helper()
	tasks, err := r.taskLister.GPUTasks(r.ns).List(labels.SelectorFromSet(labels.Set{gputaskv1.LabelTaskSet: tsPoolName}))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("listing the pool's tasks: %d tasks, %v", len(tasks), err)
	}
	oldest := tasks[0].CreationTimestamp.Time
	for _, task := range tasks[1:] {
		if task.CreationTimestamp.Time.Before(oldest) {
			oldest = task.CreationTimestamp.Time
		}
	}
	return oldest
}

// waitSet waits until done holds for the pool, and fails the test with the
// pool's last state otherwise.
func (r *tsRecorder) waitSet(t *testing.T, what string, done func(*gputaskv1.GPUTaskSet) bool) {
	t.Helper()
	tsPollPool(t, r.setLister, r.ns, tsTimeout, what, done, func() string {
		return fmt.Sprintf("spec.replicas went %v, decisions %v", r.replicaSequence(), r.reasons())
	})
}

// tsPollPool waits until done holds for the pool in the cache and returns
// it; on timeout it fails the test with history() and the pool's last status.
func tsPollPool(t *testing.T, lister gputasklisters.GPUTaskSetLister, ns string, timeout time.Duration, what string,
	done func(*gputaskv1.GPUTaskSet) bool, history func() string) *gputaskv1.GPUTaskSet {
	t.Helper()
	var last *gputaskv1.GPUTaskSet
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		set, err := lister.GPUTaskSets(ns).Get(tsPoolName)
		if err != nil {
			return false, nil
		}
		last = set
		return done(set), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v\n%s\nlast status: %s", what, err, history(), tsDescribeStatus(last))
	}
	return last
}

// tsWaitEvents waits until the pool has events of the reason and type whose
// messages contain each of wants.
func tsWaitEvents(t *testing.T, ns, reason, eventType string, wants ...string) {
	t.Helper()
	selector := fields.Set{
		"involvedObject.kind": "GPUTaskSet",
		"involvedObject.name": tsPoolName,
		"reason":              reason,
		"type":                eventType,
	}.AsSelector().String()
	var messages []string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, tsTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := cp.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return false, nil
		}
		messages = messages[:0]
		for _, e := range list.Items {
			messages = append(messages, e.Message)
		}
		for _, want := range wants {
			if !slices.ContainsFunc(messages, func(m string) bool { return strings.Contains(m, want) }) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("want %s events %s with %q; got %q: %v", eventType, reason, wants, messages, err)
	}
}

func tsDecisionReason(set *gputaskv1.GPUTaskSet) string {
	if set.Status.LastDecision == nil {
		return ""
	}
	return set.Status.LastDecision.Reason
}

func tsConditionIs(set *gputaskv1.GPUTaskSet, condType string, status metav1.ConditionStatus, reason string) bool {
	c := meta.FindStatusCondition(set.Status.Conditions, condType)
	return c != nil && c.Status == status && c.Reason == reason
}

func tsDescribeStatus(set *gputaskv1.GPUTaskSet) string {
	if set == nil {
		return "no set"
	}
	s := set.Status
	out := fmt.Sprintf("spec.replicas=%d replicas=%d running=%d pending=%d heldBack=%d load=%q failures=%d",
		tsPtrOr(set.Spec.Replicas, 1), s.Replicas, s.RunningReplicas, s.PendingReplicas, s.HeldBackReplicas, s.LoadIndex, s.ConsecutiveFailures)
	if s.CapacityReplicas != nil {
		out += fmt.Sprintf(" capacity=%d", *s.CapacityReplicas)
	}
	if d := s.LastDecision; d != nil {
		out += fmt.Sprintf("\n  decision %d->%d %s: %s", d.From, d.To, d.Reason, d.Message)
	}
	for _, c := range s.Conditions {
		out += fmt.Sprintf("\n  %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
	}
	return out
}

func tsPtrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
