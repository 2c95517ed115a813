package e2e

// Helpers shared by the tests of this package. Those that take the control
// plane as an argument serve tests that run their own controller with
// special flags and so need a control plane of their own: a controller acts
// on every namespace, and two of them on one control plane would both
// reconcile everything. The pool helpers work on the package's control plane,
// where each test has its own namespace and its own fake GPU nodes with a GPU
// model nobody else asks for, so the tests run in parallel without sharing
// GPUs.

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	gputaskinformers "github.com/gputask/gputask-controller/pkg/generated/informers/externalversions"
	gputasklisters "github.com/gputask/gputask-controller/pkg/generated/listers/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
	"github.com/gputask/gputask-controller/test/kwok"
)

const (
	// waitTimeout bounds each wait for the cluster to settle, a scaling
	// step or a condition.
	waitTimeout = 60 * time.Second
	// poolName is the GPUTaskSet of every autoscaling test; namespaces keep
	// them apart.
	poolName = "pool"
	// poolInterval is the default spec.autoscaling.interval of a pool:
	// short, so a test sees many decisions in a few seconds.
	poolInterval = time.Second
	// Loads against the default thresholds (up 0.8, down 0.5).
	loadHigh = 0.9
	loadMid  = 0.6
	loadLow  = 0.3
)

// gpuNode is a fake GPU node to create.
type gpuNode struct {
	name, model string
	gpus        int
}

// startCluster starts a control plane for one test, with the scheduler,
// the controller manager (garbage collection) and kwok, and creates nodes.
// No gputask-controller runs on it yet.
func startCluster(t *testing.T, nodes ...gpuNode) *framework.ControlPlane {
	t.Helper()
	c := framework.StartT(t, framework.Options{Scheduler: true, ControllerManager: true, Kwok: true})
	for _, n := range nodes {
		c.CreateGPUNodeT(t, n.name, n.model, n.gpus)
	}
	return c
}

// createGPUNodes creates n fake nodes with gpus GPUs each on the package's
// control plane, of a GPU model named after the namespace, and returns the
// model.
func createGPUNodes(t *testing.T, ns string, n, gpus int) string {
	t.Helper()
	model := "gpu-" + ns
	for i := range n {
		cp.CreateGPUNodeT(t, fmt.Sprintf("%s-%d", ns, i), model, gpus)
	}
	return model
}

// newTask returns a task asking for amount GPUs of model; edits adjust the spec.
func newTask(name, model string, amount int32, edits ...func(*gputaskv1.GPUTaskSpec)) *gputaskv1.GPUTask {
	a := intstr.FromInt32(amount)
	task := &gputaskv1.GPUTask{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       gputaskv1.GPUTaskSpec{GPU: model, GPUAmount: &a},
	}
	for _, edit := range edits {
		edit(&task.Spec)
	}
	return task
}

func createTask(t *testing.T, c *framework.ControlPlane, ns string, task *gputaskv1.GPUTask) {
	t.Helper()
	if _, err := c.GPUTask.GputaskV1().GPUTasks(ns).Create(context.Background(), task, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating gputask %s/%s: %v", ns, task.Name, err)
	}
}

// waitTask waits until the task satisfies ok and returns it.
func waitTask(t *testing.T, c *framework.ControlPlane, ns, name, what string, ok func(*gputaskv1.GPUTask) bool) *gputaskv1.GPUTask {
	t.Helper()
	var task *gputaskv1.GPUTask
	framework.Poll(t, waitTimeout, fmt.Sprintf("gputask %s/%s %s", ns, name, what), func(ctx context.Context) (bool, string) {
		got, err := c.GPUTask.GputaskV1().GPUTasks(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		task = got
		return ok(got), fmt.Sprintf("phase=%s node=%s reschedules=%d", got.Status.Phase, got.Status.NodeName, got.Status.Reschedules)
	})
	return task
}

func taskRunning(task *gputaskv1.GPUTask) bool {
	return task.Status.Phase == gputaskv1.GPUTaskRunning
}

// taskPod returns the task's pod (named like the task), or nil if there is none.
func taskPod(t *testing.T, c *framework.ControlPlane, ns, name string) *corev1.Pod {
	t.Helper()
	pod, err := c.Kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("getting pod %s/%s: %v", ns, name, err)
	}
	return pod
}

// podsOf returns the UIDs of the task's pods on the package's control plane.
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

// podEvent is one watch event of a pod, as a test needs it.
type podEvent struct {
	at       time.Time
	typ      watch.EventType
	ns, name string
	uid      string
	phase    corev1.PodPhase
	deleting bool
}

// podRecorder records every watch event of the pods of a namespace (or of
// all namespaces) from the moment it starts, so a test can check the order
// in which pods came and went.
type podRecorder struct {
	mu     sync.Mutex
	events []podEvent
	// onEvent, if set, runs under mu after each event is recorded.
	onEvent func(all []podEvent)
	err     error
	stop    context.CancelFunc
	done    chan struct{}
}

// startPodRecorder watches the pods of ns ("" for all) until the test ends
// or stop is called.
func startPodRecorder(t *testing.T, c *framework.ControlPlane, ns string, onEvent func(all []podEvent)) *podRecorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.Kube.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		t.Fatalf("watching pods: %v", err)
	}
	r := &podRecorder{stop: cancel, done: make(chan struct{}), onEvent: onEvent}
	go r.run(ctx, w)
	t.Cleanup(r.Stop)
	return r
}

func (r *podRecorder) run(ctx context.Context, w watch.Interface) {
	defer close(r.done)
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok {
				r.mu.Lock()
				r.err = fmt.Errorf("pod watch closed early")
				r.mu.Unlock()
				return
			}
			pod, isPod := ev.Object.(*corev1.Pod)
			if !isPod {
				r.mu.Lock()
				r.err = fmt.Errorf("pod watch sent %s %T", ev.Type, ev.Object)
				r.mu.Unlock()
				continue
			}
			r.mu.Lock()
			r.events = append(r.events, podEvent{
				at: time.Now(), typ: ev.Type, ns: pod.Namespace, name: pod.Name, uid: string(pod.UID),
				phase: pod.Status.Phase, deleting: pod.DeletionTimestamp != nil,
			})
			if r.onEvent != nil {
				r.onEvent(r.events)
			}
			r.mu.Unlock()
		}
	}
}

// Stop ends the watch; it is safe to call more than once.
func (r *podRecorder) Stop() {
	r.stop()
	<-r.done
}

// Events returns the events so far, and the watch's error if it broke.
func (r *podRecorder) Events() ([]podEvent, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]podEvent(nil), r.events...), r.err
}

// checkPodOrder fails the test when any pod name was ADDED again before the
// pod of that name that came earlier was DELETED, i.e. when two pods of one
// task could have existed together. It returns the number of pods ADDED per
// name.
func checkPodOrder(t *testing.T, events []podEvent) map[string]int {
	t.Helper()
	added := map[string]int{}
	live := map[string]string{} // name -> uid of the pod that exists
	for _, e := range events {
		key := e.ns + "/" + e.name
		switch e.typ {
		case watch.Added:
			if uid, ok := live[key]; ok {
				t.Errorf("pod %s (uid %s) ADDED while pod uid %s of that name was not yet DELETED", key, e.uid, uid)
			}
			live[key] = e.uid
			added[key]++
		case watch.Deleted:
			if live[key] != e.uid {
				t.Errorf("pod %s uid %s DELETED, but the live pod of that name was %q", key, e.uid, live[key])
			}
			delete(live, key)
		}
	}
	return added
}

// identityRE finds the leader election identity a controller logs.
var identityRE = regexp.MustCompile(`"Waiting for leadership".*identity="([^"]+)"`)

// controllerIdentity waits for the controller to log its leader election
// identity and returns it.
func controllerIdentity(t *testing.T, p *framework.Process) string {
	t.Helper()
	var id string
	framework.Poll(t, 30*time.Second, "leader election identity in "+p.LogPath, func(context.Context) (bool, string) {
		if m := identityRE.FindStringSubmatch(readLog(p)); m != nil {
			id = m[1]
			return true, ""
		}
		return false, p.LogTail(5)
	})
	return id
}

// readLog returns the whole log of a process.
func readLog(p *framework.Process) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return ""
	}
	return string(b)
}

// logContains reports whether the process's log has a line containing every
// one of parts.
func logContains(p *framework.Process, parts ...string) bool {
	for _, line := range strings.Split(readLog(p), "\n") {
		all := true
		for _, part := range parts {
			all = all && strings.Contains(line, part)
		}
		if all {
			return true
		}
	}
	return false
}

// setupPool gives an autoscaling test its own namespace, n fake nodes with
// gpus GPUs each of its own GPU model, a load index answering load, and a
// recorder of the pool, which the test then creates.
func setupPool(t *testing.T, n, gpus int, load float64) (ns, model string, index *loadServer, rec *poolRecorder) {
	t.Helper()
	ns = cp.NamespaceT(t)
	model = createGPUNodes(t, ns, n, gpus)
	index = newLoadServer(t, load)
	return ns, model, index, recordPool(t, ns)
}

// poolSpec is the GPUTaskSet named poolName that an autoscaling test creates.
type poolSpec struct {
	replicas, min, max int32
	model              string
	// gpus is each task's GPU amount; 0 asks for 1.
	gpus int32
	// interval is spec.autoscaling.interval; 0 keeps poolInterval.
	interval time.Duration
	// url is the HTTP load index the pool reads, unless prometheus is set.
	url string
	// timeout is the HTTP read timeout; 0 keeps the default.
	timeout    time.Duration
	prometheus *gputaskv1.PrometheusSource
	// metricName names the metric in status and events; "" is backend-load.
	metricName string
	// proportional picks the Proportional policy, aiming at target per task
	// ("" is 0.5); otherwise the Step policy at its defaults (thresholds 0.8
	// and 0.5, stepUp 3, stepDown 1), with stepUp if set.
	proportional  bool
	target        string
	stepUp        int32
	minTaskAge    time.Duration
	capacityAware bool
	// slow makes the pods take kwok.SlowStartup to become Ready.
	slow          bool
	drainTimeout  *time.Duration
	noAutoscaling bool
}

// createPool creates the pool with no scale-down stabilization, so every
// decision shows at once.
func createPool(t *testing.T, ns string, p poolSpec) {
	t.Helper()
	amount := intstr.FromInt32(max(p.gpus, 1))
	set := &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: poolName},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: &p.replicas,
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{GPU: p.model, GPUAmount: &amount}},
		},
	}
	if p.slow {
		set.Spec.Template.Spec.Env = []corev1.EnvVar{{Name: kwok.FakeStartupEnv, Value: kwok.FakeStartupSlow}}
	}
	if p.drainTimeout != nil {
		set.Spec.ScaleIn = &gputaskv1.ScaleInSpec{DrainTimeout: &gputaskv1.Duration{Duration: *p.drainTimeout}}
	}
	if p.minTaskAge > 0 {
		set.Spec.MinTaskAge = &gputaskv1.Duration{Duration: p.minTaskAge}
	}
	if !p.noAutoscaling {
		metric := gputaskv1.MetricSpec{Name: "backend-load", Prometheus: p.prometheus}
		if p.metricName != "" {
			metric.Name = p.metricName
		}
		if p.prometheus == nil {
			metric.HTTP = &gputaskv1.HTTPSource{URL: p.url}
			if p.timeout > 0 {
				metric.HTTP.Timeout = &gputaskv1.Duration{Duration: p.timeout}
			}
		}
		policy := gputaskv1.ScalingPolicy{Type: gputaskv1.StepPolicy}
		if p.stepUp > 0 {
			policy.StepUp = &p.stepUp
		}
		if p.proportional {
			policy.Type = gputaskv1.ProportionalPolicy
			target := resource.MustParse(cmp.Or(p.target, "0.5"))
			metric.Target = &target
		}
		interval := p.interval
		if interval == 0 {
			interval = poolInterval
		}
		set.Spec.Autoscaling = &gputaskv1.AutoscalingSpec{
			MinReplicas: &p.min, MaxReplicas: p.max,
			Interval:                     &gputaskv1.Duration{Duration: interval},
			Metrics:                      []gputaskv1.MetricSpec{metric},
			Policy:                       policy,
			ScaleDownStabilizationWindow: &gputaskv1.Duration{},
			CapacityAware:                p.capacityAware,
		}
	}
	if _, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Create(context.Background(), set, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating gputaskset %s/%s: %v", ns, poolName, err)
	}
}

// httpSet is a set of one task of one GPU of model, autoscaled between 1
// and maxReplicas tasks by the Step policy at its defaults from the load
// index at url (metric "load"), read every interval. At the loads the tests
// serve between the thresholds it holds.
func httpSet(name, model, url string, maxReplicas int32, interval time.Duration) *gputaskv1.GPUTaskSet {
	return &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To[int32](1),
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: newTask("", model, 1).Spec},
			Autoscaling: &gputaskv1.AutoscalingSpec{
				MinReplicas: ptr.To[int32](1),
				MaxReplicas: maxReplicas,
				Interval:    &gputaskv1.Duration{Duration: interval},
				Policy:      gputaskv1.ScalingPolicy{Type: gputaskv1.StepPolicy},
				Metrics:     []gputaskv1.MetricSpec{{Name: "load", HTTP: &gputaskv1.HTTPSource{URL: url}}},
			},
		},
	}
}

// patchPool merge-patches the pool.
func patchPool(t *testing.T, ns, patch string) {
	t.Helper()
	if _, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Patch(context.Background(), poolName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patching the pool with %s: %v", patch, err)
	}
}

// loadServer is a scripted load-index endpoint on 127.0.0.1. It answers
// {"data":{"load_balance":X}} with the value last set, or fails as told,
// and logs when it answered which value.
type loadServer struct {
	srv   *httptest.Server
	reads atomic.Int64
	// stop ends hanging requests when the server closes.
	stop      chan struct{}
	closeOnce sync.Once

	mu     sync.Mutex
	value  float64
	status int // an HTTP error status to answer with; 0 answers the value
	hang   bool
	// answers are the values answered, in order.
	answers []loadAnswer
}

type loadAnswer struct {
	at    time.Time
	value float64
}

func newLoadServer(t *testing.T, value float64) *loadServer {
	s := &loadServer{value: value, stop: make(chan struct{})}
	// httptest listens on 127.0.0.1 with a free port.
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *loadServer) serve(w http.ResponseWriter, r *http.Request) {
	s.reads.Add(1)
	s.mu.Lock()
	value, status, hang := s.value, s.status, s.hang
	if !hang && status == 0 {
		s.answers = append(s.answers, loadAnswer{at: time.Now(), value: value})
	}
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
func (s *loadServer) URL() string { return s.srv.URL + "/api/load" }

// Reads counts the requests served so far.
func (s *loadServer) Reads() int64 { return s.reads.Load() }

// Set answers value from now on.
func (s *loadServer) Set(value float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.value, s.status, s.hang = value, 0, false
}

// Fail answers the HTTP status code from now on.
func (s *loadServer) Fail(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.hang = code, false
}

// Hang answers nothing from now on, so reads time out.
func (s *loadServer) Hang() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hang = true
}

// Close stops the server; its port then refuses connections.
func (s *loadServer) Close() {
	s.closeOnce.Do(func() {
		close(s.stop)
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
}

// LastAtLeast and FirstBelow find the last answer at or above threshold
// before a time, and the first answer below threshold.
func (s *loadServer) LastAtLeast(threshold float64, before time.Time) (last time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.answers {
		if a.value >= threshold && a.at.Before(before) {
			last = a.at
		}
	}
	return last
}

func (s *loadServer) FirstBelow(threshold float64) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.answers {
		if a.value < threshold {
			return a.at
		}
	}
	return time.Time{}
}

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

// waitEvents waits until the pool has events of the reason and type whose
// messages contain each of wants.
func waitEvents(t *testing.T, ns, reason, eventType string, wants ...string) {
	t.Helper()
	selector := fields.Set{
		"involvedObject.kind": "GPUTaskSet",
		"involvedObject.name": poolName,
		"reason":              reason,
		"type":                eventType,
	}.AsSelector().String()
	var messages []string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
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

func decisionReason(set *gputaskv1.GPUTaskSet) string {
	if set.Status.LastDecision == nil {
		return ""
	}
	return set.Status.LastDecision.Reason
}

func conditionIs(set *gputaskv1.GPUTaskSet, condType string, status metav1.ConditionStatus, reason string) bool {
	c := meta.FindStatusCondition(set.Status.Conditions, condType)
	return c != nil && c.Status == status && c.Reason == reason
}

func describeStatus(set *gputaskv1.GPUTaskSet) string {
	if set == nil {
		return "no set"
	}
	s := set.Status
	out := fmt.Sprintf("spec.replicas=%d replicas=%d running=%d pending=%d heldBack=%d load=%q failures=%d",
		ptr.Deref(set.Spec.Replicas, 1), s.Replicas, s.RunningReplicas, s.PendingReplicas, s.HeldBackReplicas, s.LoadIndex, s.ConsecutiveFailures)
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

// unschedulableForGPUs reports whether the task's Scheduled condition carries
// the scheduler's verdict that no node has enough GPUs.
func unschedulableForGPUs(task *gputaskv1.GPUTask) bool {
	cond := meta.FindStatusCondition(task.Status.Conditions, gputaskv1.ConditionScheduled)
	return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == "Unschedulable" &&
		strings.Contains(cond.Message, "Insufficient nvidia.com/gpu")
}

// applyDeployWithoutDeployment applies what `kubectl kustomize
// artifacts/deploy` renders, less the Deployment: the controller runs as a
// process here, with the ServiceAccount's rights.
func applyDeployWithoutDeployment(t *testing.T, c *framework.ControlPlane, dir string) {
	t.Helper()
	ctx := context.Background()
	rendered := c.KubectlT(t, "kustomize", dir)
	var kept []string
	for _, doc := range strings.Split(rendered, "\n---\n") {
		if !kindDeployment.MatchString(doc) {
			kept = append(kept, doc)
		}
	}
	if len(kept) == len(strings.Split(rendered, "\n---\n")) {
		t.Fatalf("no Deployment in the rendered kustomization:\n%s", rendered)
	}
	out, err := c.KubectlWithInput(ctx, []byte(strings.Join(kept, "\n---\n")), "apply", "-f", "-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("applied:\n%s", out)
}

// waitPhases waits until the namespace's tasks (matching selector) are
// exactly wantRunning Running and wantPending Pending, and returns their names.
func waitPhases(t *testing.T, c *framework.ControlPlane, ns, selector string, wantRunning, wantPending int) (running, pending []string) {
	t.Helper()
	framework.Poll(t, waitTimeout, fmt.Sprintf("%d running and %d pending tasks in %s", wantRunning, wantPending, ns), func(ctx context.Context) (bool, string) {
		list, err := c.GPUTask.GputaskV1().GPUTasks(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		running, pending = nil, nil
		other := 0
		for _, task := range list.Items {
			switch {
			case task.DeletionTimestamp != nil:
				other++
			case task.Status.Phase == gputaskv1.GPUTaskRunning:
				running = append(running, task.Name)
			case task.Status.Phase == gputaskv1.GPUTaskPending && unschedulableForGPUs(&task):
				pending = append(pending, task.Name)
			default:
				other++
			}
		}
		return len(running) == wantRunning && len(pending) == wantPending && other == 0,
			fmt.Sprintf("running %v, pending %v, %d other", running, pending, other)
	})
	return running, pending
}

// forbiddenLines returns the log lines of p that report a refused request.
func forbiddenLines(p *framework.Process) []string {
	var bad []string
	for _, line := range strings.Split(readLog(p), "\n") {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			bad = append(bad, line)
		}
	}
	return bad
}

// lineWith returns the first line of s that contains part.
func lineWith(s, part string) string {
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, part) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

func atLeast(floor float64) func(float64) bool { return func(v float64) bool { return v >= floor } }

func equals(want float64) func(float64) bool { return func(v float64) bool { return v == want } }

// waitMetrics polls /metrics until every wanted series is there with a good value.
func waitMetrics(t *testing.T, addr string, wants []metricWant) {
	t.Helper()
	framework.Poll(t, waitTimeout, "metrics at "+addr, func(ctx context.Context) (bool, string) {
		status, body := framework.HTTPGet(ctx, "http://"+addr+"/metrics")
		if status != http.StatusOK {
			return false, fmt.Sprintf("status %d", status)
		}
		var missing []string
		for _, w := range wants {
			v, found := framework.MetricValue(body, w.name, w.labels)
			if !found || (w.ok != nil && !w.ok(v)) {
				missing = append(missing, fmt.Sprintf("%s%v (found %v, value %v)", w.name, w.labels, found, v))
			}
		}
		return len(missing) == 0, "missing or wrong: " + strings.Join(missing, "; ")
	})
}

func waitCounts(t *testing.T, c *framework.ControlPlane, ns, what string, ok func(tasks, pods int) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		tasks, pods := countTasksAndPods(t, c, ns)
		return ok(tasks.n, len(pods)), nil
	})
	if err != nil {
		tasks, pods := countTasksAndPods(t, c, ns)
		t.Fatalf("waiting for %s: %v (%d tasks, %d pods)", what, err, tasks.n, len(pods))
	}
}

// waitExact waits until ns holds exactly n tasks and n pods, each pod
// controlled by a task that exists, one per task.
func waitExact(t *testing.T, c *framework.ControlPlane, ns string, n int) {
	t.Helper()
	describe := func() (bool, string) {
		tasks, pods := countTasksAndPods(t, c, ns)
		perTask := map[types.UID]int{}
		dup := 0
		for _, pod := range pods {
			if ref := metav1.GetControllerOf(&pod); ref != nil {
				perTask[ref.UID]++
				if perTask[ref.UID] > 1 {
					dup++
				}
			}
		}
		orphans, examples := orphanCount(tasks, pods), orphanExamples(tasks, pods, 5)
		return tasks.n == n && len(tasks.uids) == n && len(pods) == n && orphans == 0 && dup == 0,
			fmt.Sprintf("%d tasks (%d incl. terminating), %d pods, %d without their task %v, %d duplicates", tasks.n, len(tasks.uids), len(pods), orphans, examples, dup)
	}
	framework.Poll(t, 3*time.Minute, fmt.Sprintf("exactly %d tasks and %d pods", n, n), func(context.Context) (bool, string) { return describe() })
	// Nothing more is coming: the counts hold.
	time.Sleep(3 * time.Second)
	if ok, state := describe(); !ok {
		t.Errorf("after settling: %s, want exactly %d tasks and %d pods", state, n, n)
	}
}

func countTasksAndPods(t *testing.T, c *framework.ControlPlane, ns string) (taskCount, []corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	tasks, err := c.GPUTask.GputaskV1().GPUTasks(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tc := taskCount{uids: map[types.UID]bool{}}
	for _, task := range tasks.Items {
		if task.DeletionTimestamp == nil {
			tc.n++
		}
		tc.uids[task.UID] = true
	}
	pods, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tc, pods.Items
}

func countTasks(t *testing.T, c *framework.ControlPlane, ns string) int {
	t.Helper()
	tasks, _ := countTasksAndPods(t, c, ns)
	return tasks.n
}

// createSet creates the set "pool" of replicas tasks of gpuModel, without
// autoscaling, on c.
func createSet(t *testing.T, c *framework.ControlPlane, ns string, replicas int32) {
	t.Helper()
	set := &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: "pool"},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: &replicas,
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{GPU: gpuModel}},
		},
	}
	if _, err := c.GPUTask.GputaskV1().GPUTaskSets(ns).Create(context.Background(), set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitLeaseHolder waits until the Lease's holder satisfies ok and returns it.
func waitLeaseHolder(t *testing.T, c *framework.ControlPlane, ns, name string, ok func(string) bool) string {
	t.Helper()
	var holder string
	framework.Poll(t, 30*time.Second, fmt.Sprintf("holder of lease %s/%s", ns, name), func(ctx context.Context) (bool, string) {
		lease, err := c.Kube.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		holder = ptr.Deref(lease.Spec.HolderIdentity, "")
		return ok(holder), "holder " + holder
	})
	return holder
}

// waitSetTasks waits until the set has exactly n tasks, all Running, none
// being deleted, and its status says so.
func waitSetTasks(t *testing.T, ns, set string, n int) {
	t.Helper()
	framework.Poll(t, waitTimeout, fmt.Sprintf("gputaskset %s/%s at %d Running tasks", ns, set, n), func(ctx context.Context) (bool, string) {
		list, err := cp.GPUTask.GputaskV1().GPUTasks(ns).List(ctx, metav1.ListOptions{LabelSelector: gputaskv1.LabelTaskSet + "=" + set})
		if err != nil {
			return false, err.Error()
		}
		running := 0
		for _, task := range list.Items {
			if task.DeletionTimestamp == nil && task.Status.Phase == gputaskv1.GPUTaskRunning {
				running++
			}
		}
		got, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Get(ctx, set, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == n && running == n && got.Status.Replicas == int32(n) && got.Status.RunningReplicas == int32(n),
			fmt.Sprintf("%d tasks, %d running; status replicas=%d running=%d", len(list.Items), running, got.Status.Replicas, got.Status.RunningReplicas)
	})
}

// setTasks returns the sorted names of the set's tasks that are not being deleted.
func setTasks(t *testing.T, ns, set string) []string {
	t.Helper()
	list, err := cp.GPUTask.GputaskV1().GPUTasks(ns).List(context.Background(), metav1.ListOptions{LabelSelector: gputaskv1.LabelTaskSet + "=" + set})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, task := range list.Items {
		if task.DeletionTimestamp == nil {
			out = append(out, task.Name)
		}
	}
	sort.Strings(out)
	return out
}
