package autoscaler

import (
	"errors"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubeinformers "k8s.io/client-go/informers"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
	informers "github.com/gputask/gputask-controller/pkg/generated/informers/externalversions"
)

// TestOneStepPerIntervalSequence holds the load at 0.9 for 20 intervals and
// evaluates the set every quarter interval, as a storm of informer events
// would, while it edits the spec, toggles the paused and stopped
// annotations, fails status writes right after a scale write (so the retry
// re-evaluates with the new count in the cache) and hands over to a new
// leader that only knows the status. Consecutive scale writes are never
// closer than the interval.
func TestOneStepPerIntervalSequence(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	const interval = 4 * time.Second
	f := newFixture(t)
	set := newSet("web", 1)
	set.Spec.Autoscaling.Interval = &gputaskv1.Duration{Duration: interval}
	set.Spec.Autoscaling.MaxReplicas = 1000
	set.Spec.Autoscaling.Policy.StepUp = ptr.To[int32](3)
	f.Add(set)
	f.scaleReplicas = 1
	f.readings["queue"] = fakeSource{value: 0.9}
	c := f.newController(ctx)
	inf := f.Informers
	indexer := inf.Gputask().V1().GPUTaskSets().Informer().GetIndexer()
	taskIndexer := inf.Gputask().V1().GPUTasks().Informer().GetIndexer()
	// readyTasks makes the set controller's work instant: as many Ready
	// tasks as spec.replicas asks for.
	readyTasks := func() {
		for i := len(taskIndexer.List()); i < int(f.scaleReplicas); i++ {
			tk := readyTask(fmt.Sprintf("web-%d", i), set, f.Clock.Now())
			controllertest.Preload(t, taskIndexer, tk)
		}
	}

	var steps []time.Time
	failStatus := false
	f.Client.PrependReactor("update", "gputasksets", func(action core.Action) (bool, runtime.Object, error) {
		switch {
		case action.GetSubresource() == "scale":
			steps = append(steps, f.Clock.Now())
		case action.GetSubresource() == "status" && failStatus:
			failStatus = false
			return true, nil, errors.New("etcd timeout")
		}
		return false, nil, nil
	})
	gvr := gputaskv1.SchemeGroupVersion.WithResource("gputasksets")
	// current is the set as the API server has it, with the scale applied.
	current := func() *gputaskv1.GPUTaskSet {
		obj, err := f.Client.Tracker().Get(gvr, metav1.NamespaceDefault, "web")
		if err != nil {
			t.Fatalf("getting set: %v", err)
		}
		s := obj.(*gputaskv1.GPUTaskSet).DeepCopy()
		s.Spec.Replicas = ptr.To(f.scaleReplicas)
		return s
	}
	edit := func(mutate func(*gputaskv1.GPUTaskSet)) {
		s := current()
		mutate(s)
		s.Generation++
		if err := f.Client.Tracker().Update(gvr, s, metav1.NamespaceDefault); err != nil {
			t.Fatalf("editing set: %v", err)
		}
	}
	newLeader := func() {
		linf := informers.NewSharedInformerFactory(f.Client, 0)
		kinf := kubeinformers.NewSharedInformerFactory(f.KubeClient, 0)
		c = NewController(ctx, f.KubeClient, f.Client,
			linf.Gputask().V1().GPUTaskSets(), linf.Gputask().V1().GPUTasks(),
			kinf.Core().V1().Nodes(), cachedPods{kinf.Core().V1().Pods().Lister()},
			Options{Clock: f.Clock, Recorder: f.Recorder, NewSource: f.newSource})
		indexer = linf.Gputask().V1().GPUTaskSets().Informer().GetIndexer()
		controllertest.Preload(t, indexer, current())
		for _, tk := range taskIndexer.List() {
			controllertest.Preload(t, linf.Gputask().V1().GPUTasks().Informer().GetIndexer(), tk)
		}
		taskIndexer = linf.Gputask().V1().GPUTasks().Informer().GetIndexer()
	}

	const ticks = 20 * 4
	for tick := range ticks {
		switch tick {
		case 3, 22, 41: // spec edits right after a step
			edit(func(s *gputaskv1.GPUTaskSet) { s.Spec.Autoscaling.MaxReplicas-- })
		case 10:
			edit(func(s *gputaskv1.GPUTaskSet) { s.Annotations = map[string]string{gputaskv1.AnnotationPaused: "true"} })
		case 13:
			edit(func(s *gputaskv1.GPUTaskSet) { s.Annotations = nil })
		case 30:
			edit(func(s *gputaskv1.GPUTaskSet) { s.Annotations = map[string]string{gputaskv1.AnnotationStopped: "true"} })
		case 31:
			edit(func(s *gputaskv1.GPUTaskSet) { s.Annotations = nil })
		case 48: // the step at this tick's evaluation loses its status write
			failStatus = true
		case 61:
			newLeader()
		}
		readyTasks()
		controllertest.Update(t, indexer, current())
		if _, err := f.sync(ctx, c, "web"); err != nil {
			// A retry is one more evaluation at once, as AddRateLimited
			// gives after a few milliseconds.
			controllertest.Update(t, indexer, current())
			if _, err := f.sync(ctx, c, "web"); err != nil {
				t.Fatalf("retry at tick %d: %v", tick, err)
			}
		}
		f.Clock.Step(interval / 4)
	}

	if len(steps) < 12 {
		t.Fatalf("%d scale writes in 20 intervals, want at least 12: %v", len(steps), steps)
	}
	for i := 1; i < len(steps); i++ {
		if gap := steps[i].Sub(steps[i-1]); gap < interval {
			t.Errorf("scale writes %d and %d are %v apart, want at least the interval %v", i-1, i, gap, interval)
		}
	}
}

// readyTask is a task of owner created at created whose Ready condition is True.
func readyTask(name string, owner *gputaskv1.GPUTaskSet, created time.Time) *gputaskv1.GPUTask {
	tk := task(name, owner, "node-1")
	tk.CreationTimestamp = metav1.NewTime(created)
	tk.Status.Phase = gputaskv1.GPUTaskRunning
	tk.Status.Conditions = []metav1.Condition{{Type: gputaskv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "PodReady"}}
	return tk
}

// TestStepDatedByItsReading: a step is dated by the start of the reading it
// was decided on, so the time its write takes does not hold back the step
// that the next evaluation, one interval later, decides: no retry, and no
// extra reading between the two.
func TestStepDatedByItsReading(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	const interval = 4 * time.Second
	f := newFixture(t)
	set := newSet("web", 1)
	set.Spec.Autoscaling.Interval = &gputaskv1.Duration{Duration: interval}
	set.Spec.Autoscaling.MaxReplicas = 10
	set.Spec.Autoscaling.Policy.StepUp = ptr.To[int32](1)
	f.Add(set)
	f.scaleReplicas = 1
	f.readings["queue"] = fakeSource{value: 0.9}
	c := f.newController(ctx)
	indexer := f.Informers.Gputask().V1().GPUTaskSets().Informer().GetIndexer()
	taskIndexer := f.Informers.Gputask().V1().GPUTasks().Informer().GetIndexer()
	t0 := f.Clock.Now()
	var writes []time.Time
	f.Client.PrependReactor("update", "gputasksets", func(action core.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() == "scale" {
			// The write ends 300 ms after the decision.
			f.Clock.Step(300 * time.Millisecond)
			writes = append(writes, f.Clock.Now())
		}
		return false, nil, nil
	})
	for k := range 3 {
		f.Clock.SetTime(t0.Add(time.Duration(k) * interval))
		s := set.DeepCopy()
		s.Spec.Replicas = ptr.To(f.scaleReplicas)
		controllertest.Update(t, indexer, s)
		for i := len(taskIndexer.List()); i < int(f.scaleReplicas); i++ {
			controllertest.Preload(t, taskIndexer, readyTask(fmt.Sprintf("web-%d", i), set, f.Clock.Now()))
		}
		f.syncOK(ctx, c, "web")
	}
	if len(writes) != 3 || f.scaleReplicas != 4 {
		t.Errorf("%d scale writes %v to %d replicas in 3 evaluations an interval apart, want 3 to 4", len(writes), writes, f.scaleReplicas)
	}
	if n := f.readsStarted.Load(); n != 3 {
		t.Errorf("%d readings, want one per evaluation", n)
	}
	got := f.lastStatus().Status.LastScaleTime
	if want := t0.Add(2 * interval); got == nil || !got.Time.Equal(want) {
		t.Errorf("lastScaleTime %v, want %v: when the reading it was decided on began", got, want)
	}
}
