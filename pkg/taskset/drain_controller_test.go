package taskset

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
	informers "github.com/gputask/gputask-controller/pkg/generated/informers/externalversions"
)

// drainFixture drives the controller over the tasks' caches and reports
// every write on both clients as "verb resource name patch".
type drainFixture struct {
	*fixture
	c       *Controller
	setIdx  cache.Indexer
	taskIdx cache.Indexer
}

func newDrainFixture(t *testing.T, ctx context.Context, set *gputaskv1.GPUTaskSet, tasks []*gputaskv1.GPUTask) *drainFixture {
	f := newFixture(t)
	f.addSet(set)
	f.addTasks(tasks...)
	f.newClients()
	factory := informers.NewSharedInformerFactory(f.client, 0)
	c := NewController(ctx, f.kubeclient, f.client, factory.Gputask().V1().GPUTaskSets(), factory.Gputask().V1().GPUTasks(), Options{
		Recorder: f.recorder, Clock: f.clock,
	})
	t.Cleanup(c.workqueue.ShutDown)
	d := &drainFixture{fixture: f, c: c,
		setIdx:  factory.Gputask().V1().GPUTaskSets().Informer().GetIndexer(),
		taskIdx: factory.Gputask().V1().GPUTasks().Informer().GetIndexer(),
	}
	controllertest.Preload(t, d.setIdx, set)
	controllertest.Preload(t, d.taskIdx, tasks...)
	return d
}

// sync runs one sync and returns the writes it made.
func (d *drainFixture) sync(ctx context.Context, key string) []string {
	d.t.Helper()
	d.client.ClearActions()
	d.kubeclient.ClearActions()
	name, _ := cache.ParseObjectName(key)
	if err := d.c.syncHandler(ctx, name); err != nil {
		d.t.Fatalf("sync: %v", err)
	}
	var out []string
	for _, a := range append(d.client.Actions(), d.kubeclient.Actions()...) {
		if a.GetVerb() == "list" || a.GetVerb() == "watch" || a.GetVerb() == "get" {
			continue
		}
		s := a.GetVerb() + " " + a.GetResource().Resource
		if sub := a.GetSubresource(); sub != "" {
			s += "/" + sub
		}
		if controllertest.IsApply(a) {
			out = append(out, "apply "+a.GetResource().Resource+"/"+a.GetSubresource())
			continue
		}
		switch a := a.(type) {
		case core.DeleteAction:
			s += " " + a.GetName()
		case core.PatchAction:
			s += " " + a.GetName() + " " + string(a.GetPatch())
		}
		out = append(out, s)
	}
	return out
}

// refresh copies the API server's tasks and set into the caches, as the
// informers would.
func (d *drainFixture) refresh(ctx context.Context, set *gputaskv1.GPUTaskSet) {
	d.t.Helper()
	for _, obj := range d.taskIdx.List() {
		tk := obj.(*gputaskv1.GPUTask)
		cur, err := d.client.GputaskV1().GPUTasks(tk.Namespace).Get(ctx, tk.Name, metav1.GetOptions{})
		if err != nil {
			_ = d.taskIdx.Delete(tk)
			continue
		}
		_ = d.taskIdx.Update(cur)
	}
	cur, err := d.client.GputaskV1().GPUTaskSets(set.Namespace).Get(ctx, set.Name, metav1.GetOptions{})
	if err != nil {
		d.t.Fatal(err)
	}
	_ = d.setIdx.Update(cur)
	// Deletions were observed by the informer.
	d.c.expectations.Delete(setKey(set))
}

func TestBusyTasksDrainUntilIdle(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	set := newSet("render", ptr.To[int32](1))
	busyOnTask := ownedTask(set, "render-t", time.Hour)
	busyOnTask.Annotations = map[string]string{gputaskv1.AnnotationBusy: "true"}
	// A worker that marks its pod busy: the GPUTask controller mirrors the
	// mark on the task, which is all this controller reads.
	busyOnPod := ownedTask(set, "render-p", 2*time.Hour)
	busyOnPod.Annotations = map[string]string{gputaskv1.AnnotationPodBusy: "true"}
	idle := ownedTask(set, "render-i", 3*time.Hour)
	d := newDrainFixture(t, ctx, set, []*gputaskv1.GPUTask{busyOnTask, busyOnPod, idle})

	// Two must go: the idle one at once; of the busy ones the younger is
	// drained, its task marked (the GPUTask controller marks the pod).
	got := d.sync(ctx, setKey(set))
	mark := `{"metadata":{"annotations":{"gputask.io/drainStartedAt":"` + testNow.Format(time.RFC3339) + `","gputask.io/draining":"true"}}}`
	want := []string{
		"patch gputasks render-t " + mark,
		"delete gputasks render-i",
		"apply gputasksets/status",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("writes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	st, _ := d.client.GputaskV1().GPUTaskSets(set.Namespace).Get(ctx, set.Name, metav1.GetOptions{})
	if st.Status.DrainingReplicas != 1 || st.Status.Replicas != 3 {
		t.Errorf("status replicas %d draining %d, want 3 and 1", st.Status.Replicas, st.Status.DrainingReplicas)
	}
	if n := controllertest.CountEvents(d.events(), "Normal DrainingTask"); n != 1 {
		t.Errorf("%d DrainingTask events, want 1", n)
	}

	// While the worker stays busy, a drain costs no writes and is not replaced.
	d.refresh(ctx, set)
	_ = d.taskIdx.Delete(idle)
	// Status writes of one set are paced a second apart.
	d.clock.Step(time.Second)
	if got := d.sync(ctx, setKey(set)); len(got) != 1 || got[0] != "apply gputasksets/status" {
		t.Fatalf("writes while draining = %v, want only the status (replicas 3 to 2)", got)
	}
	d.refresh(ctx, set)
	if got := d.sync(ctx, setKey(set)); len(got) != 0 {
		t.Fatalf("writes while draining = %v, want none", got)
	}

	// The worker clears busy: the task goes.
	cleared, _ := d.client.GputaskV1().GPUTasks(set.Namespace).Get(ctx, "render-t", metav1.GetOptions{})
	cleared = cleared.DeepCopy()
	delete(cleared.Annotations, gputaskv1.AnnotationBusy)
	_ = d.taskIdx.Update(cleared)
	got = d.sync(ctx, setKey(set))
	if len(got) < 1 || got[0] != "delete gputasks render-t" {
		t.Fatalf("writes after the worker turned idle = %v, want the delete of render-t", got)
	}
}

func TestDrainTimesOutAndScaleUpTakesDrainsBack(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	set := newSet("render", ptr.To[int32](1))
	set.Spec.ScaleIn = &gputaskv1.ScaleInSpec{DrainTimeout: &gputaskv1.Duration{Duration: 5 * time.Minute}}
	keep := ownedTask(set, "render-k", 3*time.Hour)
	draining := func(name string, since time.Duration) *gputaskv1.GPUTask {
		tk := ownedTask(set, name, time.Hour)
		tk.Annotations = map[string]string{gputaskv1.AnnotationBusy: "true", gputaskv1.AnnotationDraining: "true",
			gputaskv1.AnnotationDrainStartedAt: testNow.Add(-since).Format(time.RFC3339)}
		return tk
	}
	old, recent := draining("render-old", 6*time.Minute), draining("render-new", time.Minute)
	d := newDrainFixture(t, ctx, set, []*gputaskv1.GPUTask{keep, old, recent})

	got := d.sync(ctx, setKey(set))
	if len(got) < 1 || got[0] != "delete gputasks render-old" {
		t.Fatalf("writes = %v, want the timed-out drain deleted", got)
	}

	// Load rises: two more tasks. The drain is taken back first, then one task is created.
	d.refresh(ctx, set)
	_ = d.taskIdx.Delete(old)
	up, _ := d.client.GputaskV1().GPUTaskSets(set.Namespace).Get(ctx, set.Name, metav1.GetOptions{})
	up = up.DeepCopy()
	up.Spec.Replicas = ptr.To[int32](3)
	_ = d.setIdx.Update(up)
	got = d.sync(ctx, setKey(set))
	unmark := `{"metadata":{"annotations":{"gputask.io/drainStartedAt":null,"gputask.io/draining":null}}}`
	if len(got) < 2 || got[0] != "patch gputasks render-new "+unmark || got[1] != "create gputasks" {
		t.Fatalf("writes = %v, want the drain taken back before one create", got)
	}
	if n := controllertest.CountEvents(d.events(), "Normal SuccessfulCreate"); n != 1 {
		t.Errorf("%d tasks created, want 1", n)
	}
}
