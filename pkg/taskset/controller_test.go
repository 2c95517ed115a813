package taskset

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
	"github.com/gputask/gputask-controller/pkg/expectations"
	"github.com/gputask/gputask-controller/pkg/generated/clientset/versioned/fake"
)

// testNow is the fixed "now" of every test in this package.
var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

var (
	tasksResource = gputaskv1.SchemeGroupVersion.WithResource("gputasks")
	setsResource  = gputaskv1.SchemeGroupVersion.WithResource("gputasksets")
)

// fixture is the shared controllertest fixture with the GPUTaskSet
// controller over it.
type fixture struct {
	*controllertest.Fixture

	// statusClient, when set, is Options.StatusClient.
	statusClient *fake.Clientset
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{Fixture: controllertest.NewFixture(t, testNow)}
	f.OwnedStatus = ownedStatus
	return f
}

// newController builds the controller over fake clients and preloaded
// caches. The informers are not started: the test drives syncHandler.
func (f *fixture) newController(ctx context.Context) *Controller {
	f.Start()
	opts := Options{Recorder: f.Recorder, Clock: f.Clock}
	if f.statusClient != nil {
		opts.StatusClient = f.statusClient
	}
	c := NewController(ctx, f.KubeClient, f.Client, f.Informers.Gputask().V1().GPUTaskSets(), f.Informers.Gputask().V1().GPUTasks(),
		f.KubeInformers.Core().V1().Nodes(), opts)
	c.workqueue = f.RecordQueue(c.workqueue)
	f.SyncHandler = c.syncHandler
	f.Preload()
	return c
}

// ownedStatus is the apply the set controller's field manager owns for
// set: its counts (nodes included), selector and observed generation, zeros included, and
// the ReplicaFailure condition when there is one. The autoscaler's fields
// are never in it.
func ownedStatus(obj runtime.Object) any {
	set := obj.(*gputaskv1.GPUTaskSet)
	st := set.Status
	status := map[string]any{
		"replicas": st.Replicas, "runningReplicas": st.RunningReplicas, "pendingReplicas": st.PendingReplicas,
		"readyReplicas": st.ReadyReplicas, "drainingReplicas": st.DrainingReplicas, "heldBackReplicas": st.HeldBackReplicas,
		"nodes": st.Nodes, "selector": st.Selector, "observedGeneration": st.ObservedGeneration,
	}
	if c := meta.FindStatusCondition(st.Conditions, gputaskv1.ConditionReplicaFailure); c != nil {
		status["conditions"] = []metav1.Condition{*c}
	}
	return map[string]any{
		"apiVersion": gputaskv1.SchemeGroupVersion.String(), "kind": "GPUTaskSet",
		"metadata": map[string]any{"name": set.Name, "namespace": set.Namespace},
		"status":   status,
	}
}

func (f *fixture) expectCreate(task *gputaskv1.GPUTask) {
	f.Actions = append(f.Actions, core.NewCreateAction(tasksResource, task.Namespace, task))
}

// expectDelete expects the deletion of the task name, whose UID is uid-name,
// guarded by that UID.
func (f *fixture) expectDelete(namespace, name string) {
	f.Actions = append(f.Actions, core.NewDeleteActionWithOptions(tasksResource, namespace, name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(types.UID("uid-" + name))}}))
}

func (f *fixture) expectRestartPatch(namespace, name, value string) {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, gputaskv1.AnnotationRestartedAt, value)
	f.Actions = append(f.Actions, core.NewPatchAction(tasksResource, namespace, name, types.MergePatchType, []byte(patch)))
}

// events drains the recorded events.
func (f *fixture) events() []string { return controllertest.Events(f.Recorder) }

// --- builders ---

// renderTemplate is the template of the sets these tests build;
// expectedTask spells out the task it must produce.
var renderTemplate = gputaskv1.GPUTaskTemplateSpec{
	Metadata: gputaskv1.TaskTemplateMeta{
		Labels:      map[string]string{"app": "render"},
		Annotations: map[string]string{"team": "vision"},
	},
	Spec: gputaskv1.GPUTaskSpec{
		GPU:       "NVIDIA-A100-SXM4-80GB",
		GPUAmount: ptr.To(intstr.FromInt32(2)),
		Memory:    ptr.To(intstr.FromString("16Gi")),
		Image:     "registry.example/render:1",
		Args:      []string{"--serve"},
	},
}

// newSet is a day-old set at generation 3 with renderTemplate, changed by
// opts.
func newSet(name string, replicas *int32, opts ...controllertest.SetOption) *gputaskv1.GPUTaskSet {
	base := []controllertest.SetOption{
		controllertest.Generation(3), controllertest.CreatedAt(testNow.Add(-24 * time.Hour)), controllertest.Template(renderTemplate),
		controllertest.SetFunc(func(s *gputaskv1.GPUTaskSet) { s.Spec.Replicas = replicas }),
	}
	return controllertest.Set(name, append(base, opts...)...)
}

// ownedTask is a task the set controls, created age before testNow from the
// set's template, Running on a node; opts change it.
func ownedTask(set *gputaskv1.GPUTaskSet, name string, age time.Duration, opts ...controllertest.TaskOption) *gputaskv1.GPUTask {
	base := []controllertest.TaskOption{
		controllertest.ControlledBy(set), controllertest.CreatedAt(testNow.Add(-age)),
		controllertest.Labels(map[string]string{"app": "render"}), controllertest.TaskSpec(set.Spec.Template.Spec),
		controllertest.TaskStatus(gputaskv1.GPUTaskStatus{Phase: gputaskv1.GPUTaskRunning, PodName: name, NodeName: "gpu-node-1"}),
		controllertest.TaskFunc(func(t *gputaskv1.GPUTask) { t.ResourceVersion = "1" }),
	}
	return controllertest.Task(name, append(base, opts...)...)
}

// Variants of ownedTask.
var (
	// withoutPod is a task whose pod does not exist yet.
	withoutPod = controllertest.TaskStatus(gputaskv1.GPUTaskStatus{Phase: gputaskv1.GPUTaskPending})
	// deleting is a task being deleted, held by a finalizer.
	deleting = controllertest.Deleting(testNow, "example.com/hold")
)

// expectCreates expects n tasks created from set's template.
func (f *fixture) expectCreates(set *gputaskv1.GPUTaskSet, n int) {
	for range n {
		f.expectCreate(expectedTask(set))
	}
}

// expectedTask is the task the controller must create for set, written out
// field by field rather than with newTask, so the test checks newTask.
func expectedTask(set *gputaskv1.GPUTaskSet) *gputaskv1.GPUTask {
	return &gputaskv1.GPUTask{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: set.Name + "-",
			Namespace:    set.Namespace,
			Labels:       map[string]string{"app": "render", gputaskv1.LabelTaskSet: set.Name},
			Annotations:  map[string]string{"team": "vision"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         "gputask.io/v1",
				Kind:               "GPUTaskSet",
				Name:               set.Name,
				UID:                set.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: gputaskv1.GPUTaskSpec{
			GPU:       "NVIDIA-A100-SXM4-80GB",
			GPUAmount: ptr.To(intstr.FromInt32(2)),
			Memory:    ptr.To(intstr.FromString("16Gi")),
			Image:     "registry.example/render:1",
			Args:      []string{"--serve"},
		},
	}
}

// withStatus returns a copy of set whose owned status fields are the ones
// the controller computes for these tasks, so that it is in sync. nodes is
// how many nodes the tasks are on: ownedTask puts every task on gpu-node-1.
func withStatus(set *gputaskv1.GPUTaskSet, replicas, running, pending, heldBack, nodes int32) *gputaskv1.GPUTaskSet {
	s := set.DeepCopy()
	s.Status.Replicas = replicas
	s.Status.RunningReplicas = running
	s.Status.PendingReplicas = pending
	s.Status.HeldBackReplicas = heldBack
	s.Status.Nodes = nodes
	s.Status.Selector = gputaskv1.LabelTaskSet + "=" + set.Name
	s.Status.ObservedGeneration = set.Generation
	return s
}

func (f *fixture) addTasks(tasks ...*gputaskv1.GPUTask) {
	for _, t := range tasks {
		f.Add(t)
	}
}

// key is the set's queue key.
func key(set *gputaskv1.GPUTaskSet) cache.ObjectName { return cache.MetaObjectToName(set) }

// setKey is the set's key as its expectations are kept.
func setKey(set *gputaskv1.GPUTaskSet) string { return key(set).String() }

// --- tests ---

func TestCreatesTasksFromTemplate(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](3))
	f.Add(set)

	f.expectCreates(set, 3)
	f.ExpectApplyStatus(withStatus(set, 0, 0, 0, 0, 0))
	c := f.newController(ctx)
	f.Run(ctx, key(set))

	// One event for the step, not one per task.
	controllertest.ExpectEvents(t, f.events(), "Normal SuccessfulCreate Created 3 tasks")
	if c.expectations.Satisfied(setKey(set)) {
		t.Error("expectations satisfied before the informer saw the new tasks")
	}
}

func TestNilReplicasMeansOne(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", nil)
	f.Add(set)
	f.expectCreate(expectedTask(set))
	f.ExpectApplyStatus(withStatus(set, 0, 0, 0, 0, 0))
	f.newController(ctx)
	f.Run(ctx, key(set))
}

func TestTemplateChangeLeavesExistingTasks(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](2))
	old := ownedTask(set, "render-old", time.Hour)
	set.Spec.Template.Spec.Image = "registry.example/render:2"
	f.Add(withStatus(set, 1, 1, 0, 0, 1))
	f.addTasks(old)

	// One new task from the new template; the old task is not updated.
	want := expectedTask(set)
	want.Spec.Image = "registry.example/render:2"
	f.expectCreate(want)
	f.newController(ctx)
	f.Run(ctx, key(set))
}

func TestNoWritesWhenInSync(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](3))
	pending := ownedTask(set, "render-c", time.Minute, withoutPod)
	inSync := withStatus(set, 3, 2, 1, 0, 1)
	// Fields the autoscaler owns do not matter to this controller.
	inSync.Status.LoadIndex = "0.83"
	inSync.Status.Conditions = []metav1.Condition{{Type: gputaskv1.ConditionAbleToScale, Status: metav1.ConditionTrue, Reason: "ReadyForNewScale"}}
	f.Add(inSync)
	f.addTasks(ownedTask(set, "render-a", time.Hour), ownedTask(set, "render-b", time.Hour), pending)

	f.newController(ctx)
	f.Run(ctx, key(set)) // no actions expected
	if events := f.events(); len(events) > 0 {
		t.Errorf("events when in sync: %v", events)
	}
}

func TestIgnoresTasksItDoesNotControl(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](1))
	f.Add(withStatus(set, 1, 1, 0, 0, 1))

	orphan := ownedTask(set, "render-orphan", time.Hour)
	orphan.OwnerReferences = nil
	oldSet := ownedTask(set, "render-of-old-set", time.Hour)
	oldSet.OwnerReferences[0].UID = "uid-of-a-deleted-set"
	notController := ownedTask(set, "render-not-controller", time.Hour)
	notController.OwnerReferences[0].Controller = ptr.To(false)
	otherLabel := ownedTask(set, "render-other-label", time.Hour)
	otherLabel.Labels[gputaskv1.LabelTaskSet] = "other"
	f.addTasks(ownedTask(set, "render-mine", time.Hour), orphan, oldSet, notController, otherLabel,
		ownedTask(set, "render-terminating", time.Hour, deleting))

	// One task is controlled and active, so the set is in sync: the others
	// are neither counted, adopted, deleted again nor restarted.
	f.newController(ctx)
	f.Run(ctx, key(set))
}

func TestTerminatingTaskIsReplacedNotDeletedTwice(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](1))
	f.Add(withStatus(set, 0, 0, 0, 0, 0))
	f.addTasks(ownedTask(set, "render-terminating", time.Hour, deleting))

	f.expectCreate(expectedTask(set))
	f.newController(ctx)
	f.Run(ctx, key(set))
}

func TestScaleInDeletesTheRightVictims(t *testing.T) {
	tests := []struct {
		name     string
		replicas int32
		tasks    func(set *gputaskv1.GPUTaskSet) []*gputaskv1.GPUTask
		want     []string
		// status after the sync: running and pending among all the tasks,
		// and the nodes they are on
		running, pending, nodes int32
		// event, when set, is one of the events recorded
		event string
	}{{
		name:     "a task without a pod goes first",
		replicas: 2,
		tasks: func(set *gputaskv1.GPUTaskSet) []*gputaskv1.GPUTask {
			return []*gputaskv1.GPUTask{ownedTask(set, "render-a", time.Hour), ownedTask(set, "render-nopod", 3*time.Hour, withoutPod), ownedTask(set, "render-b", 2*time.Hour)}
		},
		want: []string{"render-nopod"}, running: 2, pending: 1, nodes: 1,
	}, {
		name:     "an unscheduled pod goes before a scheduled one",
		replicas: 1,
		tasks: func(set *gputaskv1.GPUTaskSet) []*gputaskv1.GPUTask {
			unscheduled := ownedTask(set, "render-unscheduled", time.Hour)
			unscheduled.Status.Phase, unscheduled.Status.NodeName = gputaskv1.GPUTaskPending, ""
			scheduled := ownedTask(set, "render-scheduled", time.Minute)
			scheduled.Status.Phase = gputaskv1.GPUTaskScheduled
			return []*gputaskv1.GPUTask{scheduled, unscheduled}
		},
		want: []string{"render-unscheduled"}, running: 0, pending: 2, nodes: 1,
	}, {
		name:     "Scheduled before Running",
		replicas: 1,
		tasks: func(set *gputaskv1.GPUTaskSet) []*gputaskv1.GPUTask {
			scheduled := ownedTask(set, "render-scheduled", 2*time.Hour)
			scheduled.Status.Phase = gputaskv1.GPUTaskScheduled
			return []*gputaskv1.GPUTask{ownedTask(set, "render-running", time.Minute), scheduled}
		},
		want: []string{"render-scheduled"}, running: 1, pending: 1, nodes: 1,
	}, {
		name:     "lower deletion cost first",
		replicas: 1,
		tasks: func(set *gputaskv1.GPUTaskSet) []*gputaskv1.GPUTask {
			cheap := ownedTask(set, "render-cheap", 2*time.Hour, controllertest.Annotation(gputaskv1.AnnotationDeletionCost, "-1"))
			dear := ownedTask(set, "render-dear", time.Minute, controllertest.Annotation(gputaskv1.AnnotationDeletionCost, "100"))
			return []*gputaskv1.GPUTask{dear, cheap, ownedTask(set, "render-zero", time.Minute)}
		},
		want: []string{"render-cheap", "render-zero"}, running: 3, nodes: 1,
	}, {
		name:     "younger first",
		replicas: 1,
		tasks: func(set *gputaskv1.GPUTaskSet) []*gputaskv1.GPUTask {
			return []*gputaskv1.GPUTask{ownedTask(set, "render-old", 3*time.Hour), ownedTask(set, "render-young", time.Minute), ownedTask(set, "render-mid", time.Hour)}
		},
		want: []string{"render-young", "render-mid"}, running: 3, nodes: 1,
	}, {
		// The set's tasks, from its own lister, say which node holds how
		// many of its GPUs: the one with the fewest is emptied first, the
		// younger task on a fuller node survives, and the event says why.
		name:     "the emptiest node first, before age",
		replicas: 2,
		tasks: func(set *gputaskv1.GPUTaskSet) []*gputaskv1.GPUTask {
			on := func(node string) controllertest.TaskOption {
				return controllertest.TaskFunc(func(t *gputaskv1.GPUTask) { t.Status.NodeName = node })
			}
			return []*gputaskv1.GPUTask{
				ownedTask(set, "render-b1", 3*time.Hour, on("gpu-node-b")),
				ownedTask(set, "render-a1", time.Minute, on("gpu-node-a")),
				ownedTask(set, "render-a2", 2*time.Minute, on("gpu-node-a")),
				ownedTask(set, "render-c1", 2*time.Hour, on("gpu-node-c")),
			}
		},
		want: []string{"render-b1", "render-c1"}, running: 4, nodes: 3,
		event: "Normal SuccessfulDelete Deleted 2 tasks; fewest GPUs of the set in use first: gpu-node-c (2), gpu-node-b (2)",
	}, {
		name:     "scale to zero deletes all",
		replicas: 0,
		tasks: func(set *gputaskv1.GPUTaskSet) []*gputaskv1.GPUTask {
			return []*gputaskv1.GPUTask{ownedTask(set, "render-a", time.Hour), ownedTask(set, "render-b", time.Minute)}
		},
		want: []string{"render-b", "render-a"}, running: 2, nodes: 1,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			set := newSet("render", ptr.To(tc.replicas))
			tasks := tc.tasks(set)
			f.Add(set)
			f.addTasks(tasks...)
			for _, name := range tc.want {
				f.expectDelete(set.Namespace, name)
			}
			f.ExpectApplyStatus(withStatus(set, int32(len(tasks)), tc.running, tc.pending, 0, tc.nodes))
			c := f.newController(ctx)
			f.Run(ctx, key(set))

			// One event for the step, not one per task.
			events := f.events()
			if n := controllertest.CountEvents(events, "Normal SuccessfulDelete"); n != min(len(tc.want), 1) {
				t.Errorf("SuccessfulDelete events = %d, want %d", n, min(len(tc.want), 1))
			}
			if tc.event != "" && !slices.Contains(events, tc.event) {
				t.Errorf("events = %q, want %q among them", events, tc.event)
			}
			// The deletions are expected until the informer reports them.
			if c.expectations.Satisfied(setKey(set)) {
				t.Error("expectations satisfied before the deletions were observed")
			}
			for _, name := range tc.want {
				c.deleteTask(klogDiscard(), cache.DeletedFinalStateUnknown{Key: "default/" + name, Obj: taskNamed(tasks, name)})
			}
			if !c.expectations.Satisfied(setKey(set)) {
				t.Error("expectations not satisfied after every deletion was observed")
			}
		})
	}
}

func taskNamed(tasks []*gputaskv1.GPUTask, name string) *gputaskv1.GPUTask {
	for _, t := range tasks {
		if t.Name == name {
			return t
		}
	}
	return nil
}

func TestMinTaskAgeHoldsBackYoungRunningTasks(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](1))
	set.Spec.MinTaskAge = &gputaskv1.Duration{Duration: 10 * time.Minute}
	f.Add(set)
	f.addTasks(
		ownedTask(set, "render-old", time.Hour),
		ownedTask(set, "render-young-1", 2*time.Minute),
		ownedTask(set, "render-young-2", 4*time.Minute),
		ownedTask(set, "render-young-pending", time.Minute, withoutPod),
	)

	// 4 tasks, 1 wanted: the pending task and the old running task go; of
	// the two young running tasks one is held back, and the set asks to be
	// synced again when the older of them turns ten minutes old.
	f.expectDelete(set.Namespace, "render-young-pending")
	f.expectDelete(set.Namespace, "render-old")
	f.ExpectApplyStatus(withStatus(set, 4, 3, 1, 1, 1))
	f.newController(ctx)
	f.Run(ctx, key(set))

	if after := f.Queue.After(); !slices.Equal(after, []time.Duration{6 * time.Minute}) {
		t.Errorf("AddAfter calls = %v, want [6m]", after)
	}
}

func TestMinTaskAgeHeldBackIsStableWhenNothingChanged(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](1))
	set.Spec.MinTaskAge = &gputaskv1.Duration{Duration: 10 * time.Minute}
	f.Add(withStatus(set, 2, 2, 0, 1, 1))
	f.addTasks(ownedTask(set, "render-a", 2*time.Minute), ownedTask(set, "render-b", 3*time.Minute))

	// Both tasks are protected: no delete, no status write, one requeue.
	f.newController(ctx)
	f.Run(ctx, key(set))
	if after := f.Queue.After(); !slices.Equal(after, []time.Duration{7 * time.Minute}) {
		t.Errorf("AddAfter calls = %v, want [7m]", after)
	}
}

func TestStoppedDeletesAllAndIgnoresMinTaskAge(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](2), controllertest.Annotation(gputaskv1.AnnotationStopped, "true"))
	set.Spec.MinTaskAge = &gputaskv1.Duration{Duration: time.Hour}
	f.Add(withStatus(set, 2, 2, 0, 0, 1))
	f.addTasks(ownedTask(set, "render-a", time.Minute), ownedTask(set, "render-b", 2*time.Minute))

	// Only deletes: spec.replicas stays 2, and no status field changes
	// until the informer reports the deletions.
	f.expectDelete(set.Namespace, "render-a")
	f.expectDelete(set.Namespace, "render-b")
	f.newController(ctx)
	f.Run(ctx, key(set))
	if after := f.Queue.After(); len(after) != 0 {
		t.Errorf("a stopped set must not wait for minTaskAge, got AddAfter %v", after)
	}
}

func TestStoppedWithNoTasksIsInSync(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](2), controllertest.Annotation(gputaskv1.AnnotationStopped, "true"))
	f.Add(withStatus(set, 0, 0, 0, 0, 0))
	f.newController(ctx)
	f.Run(ctx, key(set))
}

func TestStartRecreatesToSpecReplicas(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	// The stop annotation was removed; spec.replicas kept the old count.
	set := newSet("render", ptr.To[int32](2), controllertest.Annotation(gputaskv1.AnnotationStopped, "false"))
	f.Add(withStatus(set, 0, 0, 0, 0, 0))
	f.expectCreates(set, 2)
	f.newController(ctx)
	f.Run(ctx, key(set))
}

func TestExpectationsPreventDuplicateCreates(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](2))
	f.Add(withStatus(set, 0, 0, 0, 0, 0))
	f.expectCreates(set, 2)
	c := f.newController(ctx)
	f.Run(ctx, key(set))

	// The cache has not seen the new tasks yet: a second sync must not
	// create them again.
	f.Run(ctx, key(set))

	// Once the informer reports both, the set acts again, on a fresh cache.
	created, err := f.Client.GputaskV1().GPUTasks(set.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(created.Items) != 2 {
		t.Fatalf("tasks in the API = %d, want 2", len(created.Items))
	}
	for i := range created.Items {
		c.addTask(klogDiscard(), &created.Items[i])
	}
	if !c.expectations.Satisfied(setKey(set)) {
		t.Error("expectations not satisfied after both creations were observed")
	}
}

func TestExpectationsExpire(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](1))
	f.Add(withStatus(set, 0, 0, 0, 0, 0))
	f.expectCreate(expectedTask(set))
	f.newController(ctx)
	f.Run(ctx, key(set))

	// The add event was lost. After the timeout the set creates again
	// rather than waiting forever.
	f.Clock.Step(expectations.DefaultTTL + time.Second)
	f.expectCreate(expectedTask(set))
	f.Run(ctx, key(set))
}

func TestDeletedSetIsForgotten(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	c := f.newController(ctx)
	c.expectations.ExpectCreations("default/gone", 2)
	f.Run(ctx, cache.ObjectName{Namespace: metav1.NamespaceDefault, Name: "gone"})
	if !c.expectations.Satisfied("default/gone") {
		t.Error("expectations of a deleted set must be dropped")
	}
}

func TestSetBeingDeletedIsNotManaged(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](3), controllertest.Deleting(testNow, "foregroundDeletion"))
	f.Add(withStatus(set, 1, 1, 0, 0, 1))
	f.addTasks(ownedTask(set, "render-a", time.Hour))
	f.newController(ctx)
	f.Run(ctx, key(set))
}

func TestEventHandlers(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](1))
	f.Add(set)
	c := f.newController(ctx)
	key := setKey(set)
	logger := klogDiscard()

	mine := ownedTask(set, "render-a", time.Minute)
	stranger := ownedTask(set, "render-x", time.Minute)
	stranger.OwnerReferences[0].UID = "uid-someone-else"

	c.expectations.ExpectCreations(key, 1)
	c.addTask(logger, stranger)
	if c.expectations.Satisfied(key) || c.workqueue.Len() != 0 {
		t.Fatal("a task controlled by another set's UID must be ignored")
	}
	c.addTask(logger, mine)
	if !c.expectations.Satisfied(key) || c.workqueue.Len() != 1 {
		t.Fatalf("adding an owned task: satisfied=%v queue=%d, want true, 1", c.expectations.Satisfied(key), c.workqueue.Len())
	}

	// A resync (same resourceVersion) enqueues nothing new.
	drain(c)
	c.updateTask(logger, mine, mine.DeepCopy())
	if c.workqueue.Len() != 0 {
		t.Error("a resync of an unchanged task must not enqueue")
	}
	changed := mine.DeepCopy()
	changed.ResourceVersion = "2"
	changed.Status.Phase = gputaskv1.GPUTaskFailed
	c.updateTask(logger, mine, changed)
	if got := f.Queue.After(); c.workqueue.Len() != 0 || len(got) != 1 || got[0] != statusInterval {
		t.Errorf("a status change must enqueue the owner after %v; queue=%d, AddAfter calls %v", statusInterval, c.workqueue.Len(), got)
	}
	f.Queue.After()
	annotated := changed.DeepCopy()
	annotated.ResourceVersion = "2a"
	annotated.Annotations = map[string]string{gputaskv1.AnnotationRestartedAt: "2026-11-22T12:00:00Z"}
	c.updateTask(logger, changed, annotated)
	if c.workqueue.Len() != 1 {
		t.Error("an annotation change must enqueue the owner at once")
	}
	drain(c)

	// A deletion seen first as a deletion timestamp, then as a tombstone,
	// is counted once.
	c.expectations.ExpectDeletions(key, "render-a")
	terminating := changed.DeepCopy()
	terminating.ResourceVersion = "3"
	terminating.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
	c.updateTask(logger, changed, terminating)
	if !c.expectations.Satisfied(key) {
		t.Error("a deletion timestamp must count as the deletion")
	}
	c.deleteTask(logger, cache.DeletedFinalStateUnknown{Key: "default/render-a", Obj: terminating})
	if c.workqueue.Len() != 1 {
		t.Errorf("queue = %d, want the owner once", c.workqueue.Len())
	}
	drain(c)

	// Set handlers: a tombstone of the set drops its expectations.
	c.expectations.ExpectCreations(key, 5)
	c.deleteSet(logger, cache.DeletedFinalStateUnknown{Key: key, Obj: set})
	if !c.expectations.Satisfied(key) || c.workqueue.Len() != 1 {
		t.Error("deleting the set must drop its expectations and enqueue it")
	}
	drain(c)
	c.addSet(logger, "not a set")
	c.deleteTask(logger, "not a task")
	if c.workqueue.Len() != 0 {
		t.Error("unexpected objects must be ignored")
	}
}

func drain(c *Controller) {
	for c.workqueue.Len() > 0 {
		k, _ := c.workqueue.Get()
		c.workqueue.Done(k)
		c.workqueue.Forget(k)
	}
}

// TestRun drives the whole loop: informers on the fake clientset, the
// handlers, the queue and the workers, then checks that Run returns once the
// context ends.
func TestRun(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	f := newFixture(t)
	set := newSet("render", ptr.To[int32](3))
	f.Objects = append(f.Objects, set)
	f.Start()
	factory := f.Informers
	c := NewController(ctx, f.KubeClient, f.Client, factory.Gputask().V1().GPUTaskSets(), factory.Gputask().V1().GPUTasks(),
		f.KubeInformers.Core().V1().Nodes(), Options{Recorder: f.Recorder})
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	f.KubeInformers.Start(ctx.Done())
	defer f.KubeInformers.Shutdown()

	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 2) }()

	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		tasks, err := f.Client.GputaskV1().GPUTasks(set.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		got, err := f.Client.GputaskV1().GPUTaskSets(set.Namespace).Get(ctx, set.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return len(tasks.Items) == 3 && got.Status.Replicas == 3, nil
	})
	if err != nil {
		t.Fatalf("waiting for 3 tasks and status.replicas=3: %v", err)
	}

	// Scale in through the API; the controller follows.
	got, err := f.Client.GputaskV1().GPUTaskSets(set.Namespace).Get(ctx, set.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Spec.Replicas = ptr.To[int32](1)
	if _, err := f.Client.GputaskV1().GPUTaskSets(set.Namespace).Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		tasks, err := f.Client.GputaskV1().GPUTasks(set.Namespace).List(ctx, metav1.ListOptions{})
		return err == nil && len(tasks.Items) == 1, err
	})
	if err != nil {
		t.Fatalf("waiting for scale-in to 1 task: %v", err)
	}

	cancel()
	controllertest.ExpectStopped(t, done, "Run()")
}

func klogDiscard() klog.Logger {
	return logr.Discard()
}

func TestBurstReplicasCapsOneSync(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](5))
	f.Add(withStatus(set, 0, 0, 0, 0, 0))
	f.expectCreates(set, 2)
	c := f.newController(ctx)
	c.burst = 2
	f.Run(ctx, key(set))
}
