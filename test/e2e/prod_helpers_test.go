package e2e

// Helpers of the production-readiness tests (ha, deploy, lifecycle,
// reschedule, observability). They take the control plane as an argument,
// because most of those tests run their own controller with special flags
// and so need a control plane of their own: a controller acts on every
// namespace, and two of them on one control plane would both reconcile
// everything.

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

// prodNode is a fake GPU node to create.
type prodNode struct {
	name, model string
	gpus        int
}

// startProdCluster starts a control plane for one test, with the scheduler,
// the controller manager (garbage collection) and kwok, and creates nodes.
// No gputask-controller runs on it yet.
func startProdCluster(t *testing.T, nodes ...prodNode) *framework.ControlPlane {
	t.Helper()
	c := framework.StartT(t, framework.Options{Scheduler: true, ControllerManager: true, Kwok: true})
	for _, n := range nodes {
		c.CreateGPUNodeT(t, n.name, n.model, n.gpus)
	}
	return c
}

// prodTask returns a task asking for amount GPUs of model; edits adjust the spec.
func prodTask(name, model string, amount int32, edits ...func(*gputaskv1.GPUTaskSpec)) *gputaskv1.GPUTask {
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

func prodCreateTask(t *testing.T, c *framework.ControlPlane, ns string, task *gputaskv1.GPUTask) {
	t.Helper()
	if _, err := c.GPUTask.GputaskV1().GPUTasks(ns).Create(context.Background(), task, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating gputask %s/%s: %v", ns, task.Name, err)
	}
}

// prodWaitTask waits until the task satisfies ok and returns it.
func prodWaitTask(t *testing.T, c *framework.ControlPlane, ns, name, what string, ok func(*gputaskv1.GPUTask) bool) *gputaskv1.GPUTask {
	t.Helper()
	var task *gputaskv1.GPUTask
	framework.Poll(t, settleTimeout, fmt.Sprintf("gputask %s/%s %s", ns, name, what), func(ctx context.Context) (bool, string) {
		got, err := c.GPUTask.GputaskV1().GPUTasks(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		task = got
		return ok(got), fmt.Sprintf("phase=%s node=%s reschedules=%d", got.Status.Phase, got.Status.NodeName, got.Status.Reschedules)
	})
	return task
}

func prodTaskRunning(task *gputaskv1.GPUTask) bool {
	return task.Status.Phase == gputaskv1.GPUTaskRunning
}

// prodPod returns the task's pod (named like the task), or nil if there is none.
func prodPod(t *testing.T, c *framework.ControlPlane, ns, name string) *corev1.Pod {
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

// prodEventCount sums the counts of the events with reason about the named
// GPUTask.
func prodEventCount(t *testing.T, c *framework.ControlPlane, ns, task, reason string) int {
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
