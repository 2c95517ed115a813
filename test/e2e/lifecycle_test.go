package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

// The lifecycle test's own GPU model and node, so that its tasks never take
// GPUs that the other tests of the package count on.
const (
	lifecycleModel = "L4"
	lifecycleNode  = "lifecycle-l4"
)

// TestLifecycleStopStartRestartScale drives a GPUTaskSet with kubectl only,
// as an operator would, against the package's controller: stop (annotate
// gputask.io/stopped=true) takes every task away and keeps spec.replicas and
// spec.autoscaling; start (remove it) brings the count back; a rolling
// restart (annotate gputask.io/restartedAt) replaces every task's pod one
// task at a time, never leaving more than one task without a Running pod;
// and kubectl scale changes the count through the scale subresource.
func TestLifecycleStopStartRestartScale(t *testing.T) {
	cp.CreateGPUNodeT(t, lifecycleNode, lifecycleModel, 8)
	ns := cp.NamespaceT(t)
	ctx := context.Background()
	// A load between the thresholds; the autoscaler runs in dry-run mode, so
	// it is there to be kept by stop and start, not to change replicas.
	load := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"data":{"load_balance":0.6}}`)
	}))
	t.Cleanup(load.Close)

	sets := cp.GPUTask.GputaskV1().GPUTaskSets(ns)
	created, err := sets.Create(ctx, &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: "pool"},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To[int32](3),
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: newTask("", lifecycleModel, 1).Spec},
			Autoscaling: &gputaskv1.AutoscalingSpec{
				MinReplicas: ptr.To[int32](1),
				MaxReplicas: 5,
				Interval:    &gputaskv1.Duration{Duration: 2 * time.Second},
				DryRun:      true,
				Metrics:     []gputaskv1.MetricSpec{{Name: "load", HTTP: &gputaskv1.HTTPSource{URL: load.URL}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantSpec := created.Spec
	waitSetTasks(t, ns, "pool", 3)

	// Stop.
	cp.KubectlT(t, "annotate", "-n", ns, "gts/pool", gputaskv1.AnnotationStopped+"=true")
	waitSetTasks(t, ns, "pool", 0)
	framework.Poll(t, waitTimeout, "no pods left", func(ctx context.Context) (bool, string) {
		pods, err := cp.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d pods", len(pods.Items))
	})
	stopped, err := sets.Get(ctx, "pool", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(stopped.Spec.Replicas, wantSpec.Replicas) || !equality.Semantic.DeepEqual(stopped.Spec.Autoscaling, wantSpec.Autoscaling) {
		t.Errorf("stop changed the spec: replicas %v autoscaling %+v; want %v and %+v",
			ptr.Deref(stopped.Spec.Replicas, -1), stopped.Spec.Autoscaling, *wantSpec.Replicas, wantSpec.Autoscaling)
	}
	t.Logf("stopped:\n%s", cp.KubectlT(t, "get", "gts", "-n", ns))

	// Start.
	cp.KubectlT(t, "annotate", "-n", ns, "gts/pool", gputaskv1.AnnotationStopped+"-")
	waitSetTasks(t, ns, "pool", 3)

	testRollingRestart(t, ns)

	// Scale through the scale subresource, up and down.
	for _, n := range []int{5, 2} {
		cp.KubectlT(t, "scale", "-n", ns, "gts/pool", "--replicas="+strconv.Itoa(n))
		waitSetTasks(t, ns, "pool", n)
		got, err := sets.Get(ctx, "pool", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ptr.Deref(got.Spec.Replicas, -1) != int32(n) {
			t.Errorf("after kubectl scale --replicas=%d, spec.replicas is %v", n, ptr.Deref(got.Spec.Replicas, -1))
		}
	}
	t.Logf("after scaling:\n%s", cp.KubectlT(t, "get", "gts,gt", "-n", ns))
}

// testRollingRestart annotates the set with gputask.io/restartedAt and
// watches its pods until every task runs a new one.
func testRollingRestart(t *testing.T, ns string) {
	t.Helper()
	tasks := setTasks(t, ns, "pool")
	oldUIDs := map[string]string{}
	var newest time.Time
	for _, task := range tasks {
		pod := taskPod(t, cp, ns, task)
		if pod == nil {
			t.Fatalf("task %s has no pod", task)
		}
		oldUIDs[task] = string(pod.UID)
		if pod.CreationTimestamp.After(newest) {
			newest = pod.CreationTimestamp.Time
		}
	}
	// The request must be newer than every pod, at the whole second that an
	// RFC 3339 stamp (and a creationTimestamp) keeps.
	at := newest.Truncate(time.Second).Add(time.Second)
	if wait := time.Until(at); wait > 0 {
		time.Sleep(wait)
	}

	down := &downTracker{tasks: tasks}
	rec := startPodRecorder(t, cp, ns, down.observe)
	started := time.Now()
	cp.KubectlT(t, "annotate", "-n", ns, "gts/pool", gputaskv1.AnnotationRestartedAt+"="+at.UTC().Format(time.RFC3339), "--overwrite")

	framework.Poll(t, 2*waitTimeout, "every task Running with a new pod", func(context.Context) (bool, string) {
		var waiting []string
		for _, task := range tasks {
			pod := taskPod(t, cp, ns, task)
			if pod == nil || string(pod.UID) == oldUIDs[task] || pod.Status.Phase != "Running" || pod.DeletionTimestamp != nil {
				waiting = append(waiting, task)
			}
		}
		return len(waiting) == 0, fmt.Sprintf("waiting for %v", waiting)
	})
	took := time.Since(started)
	rec.Stop()
	events, err := rec.Events()
	if err != nil {
		t.Error(err)
	}
	added := checkPodOrder(t, events)
	for _, task := range tasks {
		// The controller replaced each pod once. kwok's fake kubelet may
		// delete the replacement too (it deletes by name, without the UID
		// precondition a real kubelet uses); the controller then simply
		// creates the pod again, which the watch shows as a further pod.
		if n := strings.Count(readLog(controller), fmt.Sprintf(`"Deleted pod to replace it" gputask="%s/%s"`, ns, task)); n != 1 {
			t.Errorf("the controller replaced the pod of task %s %d times, want once", task, n)
		}
		if n := added[ns+"/"+task] - 1; n != 1 {
			t.Logf("task %s got %d new pods: kwok deleted a replacement by name", task, n)
		}
	}
	var timeline []string
	for _, e := range events {
		timeline = append(timeline, fmt.Sprintf("%+6dms %-8s %s uid=%.8s phase=%s deleting=%v",
			e.at.Sub(started).Milliseconds(), e.typ, e.name, e.uid, e.phase, e.deleting))
	}
	t.Logf("pod events during the restart:\n%s", strings.Join(timeline, "\n"))
	maxDown := down.max
	t.Logf("rolling restart of %d tasks took %s; most tasks without a Running pod at once: %d", len(tasks), took.Round(100*time.Millisecond), maxDown)
	if maxDown > 1 {
		t.Errorf("%d tasks were without a Running pod at once during the restart, want at most 1 (maxUnavailable 1)", maxDown)
	}
	if maxDown < 1 {
		t.Errorf("no task was ever without a Running pod: the watch missed the restart")
	}
	if got := setTasks(t, ns, "pool"); !equality.Semantic.DeepEqual(got, tasks) {
		t.Errorf("tasks after the restart %v, want the same tasks %v", got, tasks)
	}
}

// downTracker counts, from pod watch events, the set's tasks whose pod is
// missing, not Running, or being deleted.
type downTracker struct {
	tasks   []string
	running map[string]bool
	max     int
}

// observe is a podRecorder hook; it runs under the recorder's lock.
func (d *downTracker) observe(all []podEvent) {
	if d.running == nil {
		d.running = map[string]bool{}
	}
	e := all[len(all)-1]
	d.running[e.name] = e.typ != watch.Deleted && e.phase == "Running" && !e.deleting
	// The watch starts with an ADDED event per existing pod; until it has
	// reported every task's pod, the count would be wrong, not low.
	if len(all) < len(d.tasks) {
		return
	}
	down := 0
	for _, task := range d.tasks {
		if !d.running[task] {
			down++
		}
	}
	d.max = max(d.max, down)
}
