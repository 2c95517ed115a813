package taskset

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
)

// expectPatch expects the merge patch of the task name.
func (f *fixture) expectPatch(namespace, name, patch string) {
	f.Actions = append(f.Actions, core.NewPatchAction(tasksResource, namespace, name, types.MergePatchType, []byte(patch)))
}

// withDraining is set with the status of n running tasks on one node,
// draining of them draining.
func withDraining(set *gputaskv1.GPUTaskSet, n, draining int32) *gputaskv1.GPUTaskSet {
	s := withStatus(set, n, n, 0, 0, 1)
	s.Status.DrainingReplicas = draining
	return s
}

// refresh copies the API server's tasks and set into the caches, as the
// informers would.
func (f *fixture) refresh(ctx context.Context, c *Controller, set *gputaskv1.GPUTaskSet) {
	f.T.Helper()
	for _, obj := range f.Informers.Gputask().V1().GPUTasks().Informer().GetIndexer().List() {
		tk := obj.(*gputaskv1.GPUTask)
		cur, err := f.Client.GputaskV1().GPUTasks(tk.Namespace).Get(ctx, tk.Name, metav1.GetOptions{})
		if err != nil {
			f.Remove(tk)
			continue
		}
		f.Update(cur)
	}
	cur, err := f.Client.GputaskV1().GPUTaskSets(set.Namespace).Get(ctx, set.Name, metav1.GetOptions{})
	if err != nil {
		f.T.Fatal(err)
	}
	f.Update(cur)
	// Deletions were observed by the informer.
	c.expectations.Delete(setKey(set))
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
	f := newFixture(t)
	f.Add(set)
	f.addTasks(busyOnTask, busyOnPod, idle)

	// Two must go: the idle one at once; of the busy ones the younger is
	// drained, its task marked (the GPUTask controller marks the pod).
	f.expectPatch(set.Namespace, "render-t", `{"metadata":{"annotations":{"gputask.io/drainStartedAt":"`+testNow.Format(time.RFC3339)+`","gputask.io/draining":"true"}}}`)
	f.expectDelete(set.Namespace, "render-i")
	f.ExpectApplyStatus(withDraining(set, 3, 1))
	c := f.newController(ctx)
	f.Run(ctx, key(set))
	st, _ := f.Client.GputaskV1().GPUTaskSets(set.Namespace).Get(ctx, set.Name, metav1.GetOptions{})
	if st.Status.DrainingReplicas != 1 || st.Status.Replicas != 3 {
		t.Errorf("status replicas %d draining %d, want 3 and 1", st.Status.Replicas, st.Status.DrainingReplicas)
	}
	if n := controllertest.CountEvents(f.events(), "Normal DrainingTask"); n != 1 {
		t.Errorf("%d DrainingTask events, want 1", n)
	}

	// While the worker stays busy, a drain costs no writes and is not
	// replaced. Status writes of one set are paced a second apart: the
	// first sync writes replicas 3 to 2, the next nothing.
	f.refresh(ctx, c, set)
	f.Remove(idle)
	f.Clock.Step(time.Second)
	f.ExpectApplyStatus(withDraining(set, 2, 1))
	f.Run(ctx, key(set))
	f.refresh(ctx, c, set)
	f.Run(ctx, key(set))

	// The worker clears busy: the task goes.
	cleared, _ := f.Client.GputaskV1().GPUTasks(set.Namespace).Get(ctx, "render-t", metav1.GetOptions{})
	cleared = cleared.DeepCopy()
	delete(cleared.Annotations, gputaskv1.AnnotationBusy)
	f.Update(cleared)
	f.expectDelete(set.Namespace, "render-t")
	f.Run(ctx, key(set))
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
	f := newFixture(t)
	f.Add(set)
	f.addTasks(keep, old, recent)

	f.expectDelete(set.Namespace, "render-old")
	f.ExpectApplyStatus(withDraining(set, 3, 1))
	c := f.newController(ctx)
	f.Run(ctx, key(set))

	// Load rises: two more tasks. The drain is taken back first, then one
	// task is created; the status waits its turn, a second after the last.
	f.refresh(ctx, c, set)
	f.Remove(old)
	up, _ := f.Client.GputaskV1().GPUTaskSets(set.Namespace).Get(ctx, set.Name, metav1.GetOptions{})
	up = up.DeepCopy()
	up.Spec.Replicas = ptr.To[int32](3)
	f.Update(up)
	f.expectPatch(set.Namespace, "render-new", `{"metadata":{"annotations":{"gputask.io/drainStartedAt":null,"gputask.io/draining":null}}}`)
	f.expectCreate(expectedTask(up))
	f.Run(ctx, key(set))
	if n := controllertest.CountEvents(f.events(), "Normal SuccessfulCreate"); n != 1 {
		t.Errorf("%d tasks created, want 1", n)
	}
}

// TestDrainMarkedOnceWhileTheCacheLags: until the cache shows a task's
// draining mark, the next sync leaves the task alone: one patch and one
// DrainingTask event per drain, however soon the set is synced again.
func TestDrainMarkedOnceWhileTheCacheLags(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	set := newSet("render", ptr.To[int32](1))
	older := ownedTask(set, "render-a", 2*time.Hour)
	younger := ownedTask(set, "render-b", time.Hour)
	for _, tk := range []*gputaskv1.GPUTask{older, younger} {
		tk.Annotations = map[string]string{gputaskv1.AnnotationBusy: "true"}
	}
	f := newFixture(t)
	f.Add(set)
	f.addTasks(older, younger)
	f.expectPatch(set.Namespace, "render-b", `{"metadata":{"annotations":{"gputask.io/drainStartedAt":"`+testNow.Format(time.RFC3339)+`","gputask.io/draining":"true"}}}`)
	f.ExpectApplyStatus(withDraining(set, 2, 1))
	c := f.newController(ctx)
	f.Run(ctx, key(set))

	// The cache shows the set's new status but render-b still unmarked:
	// no write.
	cur, err := f.Client.GputaskV1().GPUTaskSets(set.Namespace).Get(ctx, set.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.Update(cur)
	f.Run(ctx, key(set))
	if n := controllertest.CountEvents(f.events(), "Normal DrainingTask"); n != 1 {
		t.Errorf("%d DrainingTask events, want 1", n)
	}

	// The informer shows the mark: the set may act again, and all is in
	// sync.
	marked, err := f.Client.GputaskV1().GPUTasks(set.Namespace).Get(ctx, "render-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	marked = marked.DeepCopy()
	marked.ResourceVersion = "2"
	f.Update(marked)
	c.updateTask(klog.FromContext(ctx), younger, marked)
	if !c.expectations.Satisfied(setKey(set)) {
		t.Error("the mark is in the cache; want the set's expectations satisfied")
	}
}
