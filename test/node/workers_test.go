//go:build realnode

package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

// The worker pool: test/node/worker pods of 1 GPU each, slots and service
// time as below, autoscaled by the Step policy at its default thresholds
// (0.8 up, 0.5 down) one task per step.
const (
	workerSet         = "workers"
	workerPort        = 8000
	workerSlots       = 4
	workerServiceTime = 500 * time.Millisecond
	workerGrace       = 10
	poolInterval      = 2 * time.Second
	poolMax           = 3
)

// TestWorkersScaleWithLoad runs a pool of inference-server stand-ins on the
// real node, driven by a load generator that sends requests only to the
// worker pods' addresses on the node's bridge and serves the pool's load
// index there for the controller (in its pod) to read.
//
//   - 12 clients on one worker: it reports 4 running and 8 waiting on its
//     vLLM metrics, the index reads 3, and the set grows 1, 2, 3 and stays
//     at its maximum of 3 (12 clients on 12 slots read 1.0).
//   - 3 clients on 3 workers (0.25): the set shrinks 3, 2, 1. Every worker
//     holds work, so each victim is drained (DrainingTask events), not
//     deleted: the worker sees gputask.io/draining through the downward API,
//     refuses new work, finishes what it holds, clears gputask.io/busy, and
//     only then is its task deleted; on SIGTERM it exits 0.
//   - Every request sent was answered 200 (503s from a draining worker are
//     sent again elsewhere); none was lost, and the surviving worker counted
//     in vllm:request_success_total exactly the requests answered by it.
//   - The last worker's pod, deleted while it holds requests, answers them
//     all and exits 0; the task's new pod takes the requests after them.
func TestWorkersScaleWithLoad(t *testing.T) {
	ns := cp.NamespaceT(t)
	ctx := context.Background()
	createWorkerAccount(t, ns)

	pods := watchPods(t, ns)
	gen := newLoadGenerator(pods.lister)
	t.Cleanup(gen.stop)
	url := gen.serveLoadIndex(t)

	set := workerPool(url)
	if _, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cp.GPUTask.GputaskV1().GPUTaskSets(ns).Delete(context.Background(), workerSet, metav1.DeleteOptions{})
	})
	counts := recordReplicas(t, ns)
	started := time.Now()

	waitPool(t, ns, "1 Ready worker", 1)
	t.Logf("1 worker Ready after %s", time.Since(started).Round(100*time.Millisecond))

	gen.setClients(12)
	first := pods.serving()
	if len(first) != 1 {
		t.Fatalf("%d serving worker pods, want 1", len(first))
	}
	framework.Poll(t, 30*time.Second, "the one worker's metrics at 4 running and 8 waiting", func(ctx context.Context) (bool, string) {
		running, waiting, _, err := workerMetrics(ctx, first[0].Status.PodIP)
		if err != nil {
			return false, err.Error()
		}
		return running == workerSlots && waiting == 8, fmt.Sprintf("running %v, waiting %v", running, waiting)
	})
	waitPool(t, ns, "3 Ready workers", poolMax)
	t.Logf("3 workers Ready after %s", time.Since(started).Round(100*time.Millisecond))
	// Two more readings at 1.0: the set stays at its maximum.
	time.Sleep(2 * poolInterval)
	if got := counts.snapshot(); !slices.Equal(got, []int32{1, 2, 3}) {
		t.Fatalf("spec.replicas went %v under 12 clients, want [1 2 3]", got)
	}
	for _, p := range pods.serving() {
		if !pods.wasBusy(string(p.UID)) {
			t.Errorf("worker pod %s never marked itself busy", p.Name)
		}
	}

	gen.setClients(3)
	scaleIn := time.Now()
	waitPool(t, ns, "1 Ready worker, none draining", 1)
	t.Logf("scaled in to 1 worker %s after the load fell", time.Since(scaleIn).Round(100*time.Millisecond))
	gen.setClients(0)
	gen.wait()

	if got := counts.snapshot(); !slices.Equal(got, []int32{1, 2, 3, 2, 1}) {
		t.Errorf("spec.replicas went %v, want [1 2 3 2 1]", got)
	}
	s := gen.stats()
	t.Logf("requests: %d sent, %d answered 200, %d refused with 503 and sent again, %d lost; per pod %v; load index read %d times",
		s.sent, s.answered, s.refused, s.lost, s.perPod, s.indexReads)
	if s.sent == 0 || s.answered != s.sent || s.lost != 0 {
		t.Errorf("%d requests sent, %d answered, %d lost (%v); want every one answered", s.sent, s.answered, s.lost, s.errors)
	}
	if s.indexReads == 0 {
		t.Error("the controller never read the load index")
	}
	// The set controller may mark a task draining more than once (each
	// with an event) before its cache shows the first mark: tasks are
	// counted, not events.
	drains := setEvents(t, ns, gputaskv1.ReasonDrainingTask)
	if drained := uniq(drains); len(drained) != 2 {
		t.Errorf("DrainingTask events for %d tasks %v, want 2: both victims held work", len(drained), drains)
	}
	if undrained := setEvents(t, ns, gputaskv1.ReasonUndrainTask); len(undrained) != 0 {
		t.Errorf("drains taken back: %v", undrained)
	}

	// The two workers that left were drained and exited 0 on SIGTERM.
	framework.Poll(t, time.Minute, "two worker pods gone, each having exited 0", func(context.Context) (bool, string) {
		gone := pods.gone()
		var bad []string
		for name, code := range gone {
			if code != 0 {
				bad = append(bad, fmt.Sprintf("%s exit %d", name, code))
			}
		}
		return len(gone) == 2 && len(bad) == 0, fmt.Sprintf("gone %v", gone)
	})
	for _, uid := range pods.goneUIDs() {
		if !pods.wasDraining(uid) {
			t.Errorf("pod %s left without being marked draining", uid)
		}
	}

	last := pods.serving()
	if len(last) != 1 {
		t.Fatalf("%d serving worker pods, want 1", len(last))
	}
	running, waiting, success, err := workerMetrics(ctx, last[0].Status.PodIP)
	if err != nil {
		t.Fatal(err)
	}
	if running != 0 || waiting != 0 || success != float64(s.perPod[last[0].Name]) {
		t.Errorf("worker %s reports running %v, waiting %v, %v served; want 0, 0, %d", last[0].Name, running, waiting, success, s.perPod[last[0].Name])
	}

	// SIGTERM with work in hand: the last worker's pod is deleted while 3
	// clients send to it. It finishes what it holds within its grace period
	// and exits 0; the clients' later requests wait for the task's new pod.
	gen.setClients(3)
	var held int
	framework.Poll(t, 30*time.Second, "requests outstanding on the last worker", func(context.Context) (bool, string) {
		held = gen.outstandingOn(last[0].Name)
		return held > 0, fmt.Sprint(held, " outstanding")
	})
	if err := cp.Kube.CoreV1().Pods(ns).Delete(ctx, last[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, time.Minute, "the deleted worker gone, exited 0, and a new one serving", func(context.Context) (bool, string) {
		gone := pods.gone()
		code, left := gone[last[0].Name]
		now := pods.serving()
		return left && code == 0 && len(now) == 1 && now[0].UID != last[0].UID, fmt.Sprintf("gone %v, serving %d", gone, len(now))
	})
	gen.setClients(0)
	gen.wait()
	s = gen.stats()
	t.Logf("with the last worker deleted holding %d: %d sent, %d answered 200, %d refused with 503 and sent again, %d lost; per pod %v",
		held, s.sent, s.answered, s.refused, s.lost, s.perPod)
	if s.answered != s.sent || s.lost != 0 {
		t.Errorf("%d requests sent, %d answered, %d lost (%v); want every one answered", s.sent, s.answered, s.lost, s.errors)
	}
	if s.perPod[last[0].Name] <= int(success) {
		t.Errorf("the deleted worker answered %d requests, no more than the %v before its last clients came", s.perPod[last[0].Name], success)
	}
	t.Logf("kubectl get gts -o wide:\n%s", cp.KubectlT(t, "get", "gts", "-o", "wide", "-n", ns))
}

// outstandingOn is how many requests wait for an answer from pod.
func (g *loadGenerator) outstandingOn(pod string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.outstanding[pod]
}

// workerPool is the set: 1 to 3 workers, read every 2 s, no stabilization
// window, a drain timeout far beyond what a drain takes here.
func workerPool(url string) *gputaskv1.GPUTaskSet {
	amount := intstr.FromInt32(1)
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	pod := corev1.PodSpec{
		ServiceAccountName:            "worker",
		TerminationGracePeriodSeconds: ptr.To(int64(workerGrace)),
		Containers: []corev1.Container{{
			Name:            "task",
			Image:           framework.WorkerImage,
			ImagePullPolicy: corev1.PullNever,
			Args: []string{
				fmt.Sprintf("--listen=:%d", workerPort), fmt.Sprintf("--slots=%d", workerSlots),
				"--service-time=" + workerServiceTime.String(), "--idle-after=1s", "--linger=1s",
			},
			Env:   []corev1.EnvVar{fieldEnv("POD_NAME", "metadata.name"), fieldEnv("POD_NAMESPACE", "metadata.namespace")},
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: workerPort}},
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(workerPort)}},
				PeriodSeconds: 1, FailureThreshold: 1,
			},
			VolumeMounts: []corev1.VolumeMount{{Name: "podinfo", MountPath: "/etc/podinfo", ReadOnly: true}},
			Resources:    smallRequests(),
		}},
		Volumes: []corev1.Volume{{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
			Items: []corev1.DownwardAPIVolumeFile{{Path: "annotations", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations"}}},
		}}}},
	}
	return &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: workerSet},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To[int32](1),
			ScaleIn:  &gputaskv1.ScaleInSpec{DrainTimeout: &gputaskv1.Duration{Duration: 5 * time.Minute}},
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{
				GPU: gpuModel, GPUAmount: &amount,
				Template: &gputaskv1.PodTemplate{Spec: pod},
			}},
			Autoscaling: &gputaskv1.AutoscalingSpec{
				MinReplicas:                  ptr.To[int32](1),
				MaxReplicas:                  poolMax,
				Interval:                     &gputaskv1.Duration{Duration: poolInterval},
				StartupTimeout:               &gputaskv1.Duration{Duration: time.Minute},
				Metrics:                      []gputaskv1.MetricSpec{{Name: "load", HTTP: &gputaskv1.HTTPSource{URL: url}}},
				Policy:                       gputaskv1.ScalingPolicy{Type: gputaskv1.StepPolicy, StepUp: ptr.To[int32](1), StepDown: ptr.To[int32](1)},
				ScaleDownStabilizationWindow: &gputaskv1.Duration{},
			},
		},
	}
}

// createWorkerAccount gives the workers a ServiceAccount that may patch
// pods in ns, their own busy annotation.
func createWorkerAccount(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	if _, err := cp.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "worker"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-busy"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "patch"}}},
	}
	if _, err := cp.Kube.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-busy"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "worker", Namespace: ns}},
	}
	if _, err := cp.Kube.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitPool waits until the set has n tasks, all Ready, none draining, and
// asks for n.
func waitPool(t *testing.T, ns, what string, n int32) {
	t.Helper()
	framework.Poll(t, 2*time.Minute, what, func(ctx context.Context) (bool, string) {
		s, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Get(ctx, workerSet, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st := s.Status
		return ptr.Deref(s.Spec.Replicas, 0) == n && st.Replicas == n && st.ReadyReplicas == n && st.DrainingReplicas == 0,
			fmt.Sprintf("spec.replicas %d, replicas %d, ready %d, draining %d, load %v", ptr.Deref(s.Spec.Replicas, 0), st.Replicas, st.ReadyReplicas, st.DrainingReplicas, st.LoadIndex)
	})
}

// replicaRecorder keeps every value spec.replicas took, polled faster than
// the autoscaler's interval.
type replicaRecorder struct {
	mu     sync.Mutex
	values []int32
}

func recordReplicas(t *testing.T, ns string) *replicaRecorder {
	r := &replicaRecorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if s, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Get(ctx, workerSet, metav1.GetOptions{}); err == nil {
				v := ptr.Deref(s.Spec.Replicas, 0)
				r.mu.Lock()
				if len(r.values) == 0 || r.values[len(r.values)-1] != v {
					r.values = append(r.values, v)
				}
				r.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return r
}

func (r *replicaRecorder) snapshot() []int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.values)
}

// setEvents returns the messages of the set's events of reason.
func setEvents(t *testing.T, ns, reason string) []string {
	t.Helper()
	events, err := cp.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == "GPUTaskSet" && e.InvolvedObject.Name == workerSet && e.Reason == reason {
			for range max(e.Count, 1) {
				out = append(out, e.Message)
			}
		}
	}
	return out
}

func uniq(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}

// workerMetrics scrapes a worker's vLLM metrics.
func workerMetrics(ctx context.Context, ip string) (running, waiting, success float64, err error) {
	body, err := httpGet(ctx, fmt.Sprintf("http://%s/metrics", net.JoinHostPort(ip, fmt.Sprint(workerPort))))
	if err != nil {
		return 0, 0, 0, err
	}
	model := map[string]string{"model_name": "worker"}
	var ok [3]bool
	running, ok[0] = framework.MetricValue(body, "vllm:num_requests_running", model)
	waiting, ok[1] = framework.MetricValue(body, "vllm:num_requests_waiting", model)
	success, ok[2] = framework.MetricValue(body, "vllm:request_success_total", model)
	if ok != [3]bool{true, true, true} {
		return 0, 0, 0, fmt.Errorf("metrics missing from %s", body)
	}
	return running, waiting, success, nil
}

var probeClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func httpGet(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: HTTP %d: %s", url, resp.StatusCode, body)
	}
	return string(body), err
}

// podTracker follows a namespace's pods through an informer: which marked
// themselves busy, which were marked draining, and how each that left
// ended.
type podTracker struct {
	lister corelisters.PodLister

	mu       sync.Mutex
	busy     map[string]bool // by UID
	draining map[string]bool
	// exit is how a pod's container ended, by UID; left holds the pods
	// deleted, by UID, with their names.
	exit map[string]podEnd
	left map[string]string
	// seen is when each pod was first seen, by UID, and failed when it was
	// first seen Failed, on the test's clock.
	seen, failed map[string]time.Time
}

// podEnd is how a pod's container ended, and where.
type podEnd struct {
	corev1.ContainerStateTerminated
	phase corev1.PodPhase
	node  string
}

func watchPods(t *testing.T, ns string) *podTracker {
	factory := informers.NewSharedInformerFactoryWithOptions(cp.Kube, 0, informers.WithNamespace(ns))
	informer := factory.Core().V1().Pods()
	w := &podTracker{lister: informer.Lister(), busy: map[string]bool{}, draining: map[string]bool{}, exit: map[string]podEnd{}, left: map[string]string{},
		seen: map[string]time.Time{}, failed: map[string]time.Time{}}
	record := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		uid := string(p.UID)
		if _, ok := w.seen[uid]; !ok {
			w.seen[uid] = now
		}
		if _, ok := w.failed[uid]; !ok && p.Status.Phase == corev1.PodFailed {
			w.failed[uid] = now
		}
		if p.Annotations[gputaskv1.AnnotationBusy] == "true" {
			w.busy[uid] = true
		}
		if p.Annotations[gputaskv1.AnnotationDraining] == "true" {
			w.draining[uid] = true
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Terminated != nil {
				w.exit[uid] = podEnd{ContainerStateTerminated: *c.State.Terminated, phase: p.Status.Phase, node: p.Spec.NodeName}
			}
		}
	}
	_, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				record(p)
				w.mu.Lock()
				w.left[string(p.UID)] = p.Name
				w.mu.Unlock()
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop); factory.Shutdown() })
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	return w
}

// serves reports whether clients may send to a worker pod: Ready, with an
// address, neither being deleted nor draining.
func serves(p *corev1.Pod) bool {
	return p.Status.PodIP != "" && p.DeletionTimestamp == nil && podReady(p) && p.Annotations[gputaskv1.AnnotationDraining] != "true"
}

// serving returns the pods clients may send to, by name.
func (w *podTracker) serving() []*corev1.Pod {
	pods, _ := w.lister.List(labels.Everything())
	var out []*corev1.Pod
	for _, p := range pods {
		if serves(p) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (w *podTracker) wasBusy(uid string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.busy[uid]
}

func (w *podTracker) wasDraining(uid string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.draining[uid]
}

// gone returns the pods deleted, by name, with their container's exit code
// (-1 when none was seen).
func (w *podTracker) gone() map[string]int32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int32{}
	for uid, name := range w.left {
		end, ok := w.exit[uid]
		if !ok {
			end.ExitCode = -1
		}
		out[name] = end.ExitCode
	}
	return out
}

// terminated returns how each pod whose container ended ended, by UID.
func (w *podTracker) terminated() map[string]podEnd {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.exit)
}

// created returns the pods seen, by UID, in the order they were first
// seen, with when.
func (w *podTracker) created() ([]string, map[string]time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	uids := slices.Collect(maps.Keys(w.seen))
	slices.SortFunc(uids, func(a, b string) int { return w.seen[a].Compare(w.seen[b]) })
	return uids, maps.Clone(w.seen)
}

// failedAt is when the pod of uid was first seen Failed; ok is false
// until it is.
func (w *podTracker) failedAt(uid string) (at time.Time, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok = w.failed[uid]
	return at, ok
}

func (w *podTracker) goneUIDs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for uid := range w.left {
		out = append(out, uid)
	}
	return out
}

// loadGenerator is the pool's clients and its router: closed-loop clients,
// each sending one request after the other to the serving worker with the
// fewest outstanding requests. A request a worker refuses with 503
// (draining, or stopping) is sent again to another. It also serves the
// pool's load index: the mean of the serving workers' own reports.
type loadGenerator struct {
	pods   corelisters.PodLister
	client *http.Client

	mu          sync.Mutex
	outstanding map[string]int
	clients     []chan struct{}
	wg          sync.WaitGroup
	s           loadStats
	srv         *http.Server
}

type loadStats struct {
	sent, answered, refused, lost, indexReads int
	perPod                                    map[string]int
	errors                                    []string
}

func newLoadGenerator(pods corelisters.PodLister) *loadGenerator {
	return &loadGenerator{
		pods: pods,
		// A new connection for each request: a worker that stops closes
		// its idle connections, and a request sent on one would be lost
		// for a reason no server has.
		client:      &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}},
		outstanding: map[string]int{},
		s:           loadStats{perPod: map[string]int{}},
	}
}

// setClients starts or stops clients until n run; a client stopped
// finishes its request first.
func (g *loadGenerator) setClients(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for len(g.clients) > n {
		last := len(g.clients) - 1
		close(g.clients[last])
		g.clients = g.clients[:last]
	}
	for len(g.clients) < n {
		stop := make(chan struct{})
		g.clients = append(g.clients, stop)
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				g.request()
			}
		}()
	}
}

// wait waits for the clients stopped to finish.
func (g *loadGenerator) wait() { g.wg.Wait() }

func (g *loadGenerator) stop() {
	g.setClients(0)
	g.wait()
	if g.srv != nil {
		_ = g.srv.Close()
	}
}

func (g *loadGenerator) stats() loadStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.s
	s.perPod = map[string]int{}
	for k, v := range g.s.perPod {
		s.perPod[k] = v
	}
	s.errors = slices.Clone(g.s.errors)
	return s
}

// pick returns the serving worker with the fewest outstanding requests,
// leaving out those that refused this request, and counts the request
// against it.
func (g *loadGenerator) pick(refused map[string]bool) *corev1.Pod {
	pods, _ := g.pods.List(labels.Everything())
	g.mu.Lock()
	defer g.mu.Unlock()
	var best *corev1.Pod
	for _, p := range pods {
		if !serves(p) || refused[p.Name] {
			continue
		}
		if best == nil || g.outstanding[p.Name] < g.outstanding[best.Name] ||
			(g.outstanding[p.Name] == g.outstanding[best.Name] && p.Name < best.Name) {
			best = p
		}
	}
	if best != nil {
		g.outstanding[best.Name]++
	}
	return best
}

func (g *loadGenerator) request() {
	g.mu.Lock()
	g.s.sent++
	g.mu.Unlock()
	fail := func(err error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.s.lost++
		if len(g.s.errors) < 10 {
			g.s.errors = append(g.s.errors, err.Error())
		}
	}
	refused := map[string]bool{}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		p := g.pick(refused)
		if p == nil {
			// Every worker refused this one: they may all be stopping
			// while a new one starts.
			clear(refused)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		code, err := g.send(p)
		g.mu.Lock()
		g.outstanding[p.Name]--
		g.mu.Unlock()
		switch {
		case err != nil:
			fail(fmt.Errorf("pod %s: %w", p.Name, err))
			return
		case code == http.StatusServiceUnavailable:
			refused[p.Name] = true
			g.mu.Lock()
			g.s.refused++
			g.mu.Unlock()
		case code == http.StatusOK:
			g.mu.Lock()
			g.s.answered++
			g.s.perPod[p.Name]++
			g.mu.Unlock()
			return
		default:
			fail(fmt.Errorf("pod %s: HTTP %d", p.Name, code))
			return
		}
	}
	fail(errors.New("no worker took the request within a minute"))
}

func (g *loadGenerator) send(p *corev1.Pod) (int, error) {
	url := fmt.Sprintf("http://%s/generate", net.JoinHostPort(p.Status.PodIP, fmt.Sprint(workerPort)))
	resp, err := g.client.Post(url, "application/json", strings.NewReader(`{"prompt":"hello"}`))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// serveLoadIndex serves the pool's load index on the node's bridge address,
// where the controller's pod reaches it, and returns its URL.
func (g *loadGenerator) serveLoadIndex(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(framework.NodeIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/load", func(rw http.ResponseWriter, r *http.Request) {
		v, err := g.poolLoad(r.Context())
		if err != nil {
			http.Error(rw, err.Error(), http.StatusServiceUnavailable)
			return
		}
		g.mu.Lock()
		g.s.indexReads++
		g.mu.Unlock()
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(map[string]any{"data": map[string]float64{"load_balance": v}})
	})
	g.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = g.srv.Serve(ln) }()
	return "http://" + ln.Addr().String() + "/load"
}

// poolLoad is the mean of the load the serving workers report; all have
// the same slots.
func (g *loadGenerator) poolLoad(ctx context.Context) (float64, error) {
	pods, _ := g.pods.List(labels.Everything())
	var sum float64
	var n int
	for _, p := range pods {
		if !serves(p) {
			continue
		}
		body, err := httpGet(ctx, fmt.Sprintf("http://%s/load", net.JoinHostPort(p.Status.PodIP, fmt.Sprint(workerPort))))
		if err != nil {
			return 0, err
		}
		var report struct {
			Data struct {
				LoadBalance *float64 `json:"load_balance"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(body), &report); err != nil || report.Data.LoadBalance == nil {
			return 0, fmt.Errorf("pod %s reported %q: %v", p.Name, body, err)
		}
		sum += *report.Data.LoadBalance
		n++
	}
	if n == 0 {
		return 0, errors.New("no serving worker")
	}
	return sum / float64(n), nil
}
