package controllertest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubeinformers "k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	testingclock "k8s.io/utils/clock/testing"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/generated/clientset/versioned/fake"
	informers "github.com/gputask/gputask-controller/pkg/generated/informers/externalversions"
)

var (
	// TasksResource and SetsResource are the resources of the project's
	// kinds, for expected actions.
	TasksResource = gputaskv1.SchemeGroupVersion.WithResource("gputasks")
	SetsResource  = gputaskv1.SchemeGroupVersion.WithResource("gputasksets")
)

// Fixture is the one test fixture of the three controllers, after
// sample-controller's: objects in (the fake clientsets and the informers'
// caches), one key synced, the expected actions out.
//
// A test adds objects, calls Start, builds its controller over Client,
// KubeClient, Informers and KubeInformers, sets SyncHandler and
// OwnedStatus, calls Preload, and then runs syncs with Run,
// RunExpectError or Sync. The three controllers' tests say the same
// things with the same words: Run, RunExpectError, ExpectApplyStatus,
// CheckActions, and cache.ObjectName keys.
type Fixture struct {
	T testing.TB

	// SyncHandler is the controller's sync, which Run and Sync call.
	SyncHandler func(context.Context, cache.ObjectName) error
	// OwnedStatus is, for an object whose status is what a test expects,
	// the apply configuration of exactly the status fields the
	// controller's field manager owns: the fields it writes, with the
	// values expected, and no others. The test spells it out field by
	// field, apart from the controller's own code, so that a field the
	// controller drops or adds fails ExpectApplyStatus.
	OwnedStatus func(runtime.Object) any

	Client        *fake.Clientset
	KubeClient    *k8sfake.Clientset
	Informers     informers.SharedInformerFactory
	KubeInformers kubeinformers.SharedInformerFactory
	Recorder      *record.FakeRecorder
	Clock         *testingclock.FakeClock
	// Queue records the delays a sync asked its key back after, once
	// RecordQueue wrapped the controller's queue.
	Queue *RecordingQueue

	// Objects are what the fake clientsets hold: the project's kinds in
	// Client, the rest in KubeClient.
	Objects []runtime.Object
	// Cached are what the informers' caches hold.
	Cached []runtime.Object
	// Reactors run before the fixture's own on Client.
	Reactors []Reactor

	// Actions and KubeActions are the actions the next sync is expected
	// to make on Client and KubeClient, in order; a run of deletes, made
	// in parallel, compares in name order.
	Actions     []core.Action
	KubeActions []core.Action
}

// Reactor is a fake clientset reaction for one verb and resource.
type Reactor struct {
	Verb, Resource string
	Fn             core.ReactionFunc
}

// NewFixture returns a fixture whose fake clock starts at now.
func NewFixture(t testing.TB, now time.Time) *Fixture {
	return &Fixture{T: t, Clock: testingclock.NewFakeClock(now), Recorder: record.NewFakeRecorder(100)}
}

// Add puts objects in the API and in the informers' caches.
func (f *Fixture) Add(objs ...runtime.Object) {
	f.Objects = append(f.Objects, objs...)
	f.Cached = append(f.Cached, objs...)
}

// Start builds the fake clientsets over Objects and the informer factories
// over them. The informers are not started: the test fills their caches
// with Preload and drives the sync itself.
func (f *Fixture) Start() {
	var objs, kubeObjs []runtime.Object
	for _, o := range f.Objects {
		if isOurs(o) {
			objs = append(objs, o)
		} else {
			kubeObjs = append(kubeObjs, o)
		}
	}
	f.Client = fake.NewClientset(objs...)
	f.KubeClient = k8sfake.NewClientset(kubeObjs...)
	f.addServerReactors()
	for _, r := range f.Reactors {
		f.Client.PrependReactor(r.Verb, r.Resource, r.Fn)
	}
	f.Informers = informers.NewSharedInformerFactory(f.Client, 0)
	f.KubeInformers = kubeinformers.NewSharedInformerFactory(f.KubeClient, 0)
}

func isOurs(o runtime.Object) bool {
	switch o.(type) {
	case *gputaskv1.GPUTask, *gputaskv1.GPUTaskSet:
		return true
	}
	return false
}

// addServerReactors makes Client behave as the API server does where the
// object tracker does not: a create with generateName gets a name.
func (f *Fixture) addServerReactors() {
	var generated atomic.Int64
	f.Client.PrependReactor("create", "gputasks", func(action core.Action) (bool, runtime.Object, error) {
		create := action.(core.CreateAction)
		task := create.GetObject().(*gputaskv1.GPUTask).DeepCopy()
		if task.Name == "" && task.GenerateName != "" {
			task.Name = fmt.Sprintf("%s%05d", task.GenerateName, generated.Add(1))
		}
		return true, task, f.Client.Tracker().Create(TasksResource, task, create.GetNamespace())
	})
}

// Preload puts Cached into the caches of the informers of their kinds, as
// the informers would after their initial lists.
func (f *Fixture) Preload() {
	for _, o := range f.Cached {
		if err := f.indexer(o).Add(o); err != nil {
			f.T.Fatalf("preloading a cache: %v", err)
		}
	}
}

// Update replaces obj in its informer's cache, as a watch event would.
func (f *Fixture) Update(obj runtime.Object) { Update(f.T, f.indexer(obj), obj) }

// Remove deletes obj from its informer's cache, as a watch event would.
func (f *Fixture) Remove(obj runtime.Object) { Remove(f.T, f.indexer(obj), obj) }

func (f *Fixture) indexer(o runtime.Object) cache.Indexer {
	switch o.(type) {
	case *gputaskv1.GPUTask:
		return f.Informers.Gputask().V1().GPUTasks().Informer().GetIndexer()
	case *gputaskv1.GPUTaskSet:
		return f.Informers.Gputask().V1().GPUTaskSets().Informer().GetIndexer()
	case *corev1.Pod:
		return f.KubeInformers.Core().V1().Pods().Informer().GetIndexer()
	case *corev1.Node:
		return f.KubeInformers.Core().V1().Nodes().Informer().GetIndexer()
	case *corev1.ConfigMap:
		return f.KubeInformers.Core().V1().ConfigMaps().Informer().GetIndexer()
	case *resourcev1.ResourceClaimTemplate:
		return f.KubeInformers.Resource().V1().ResourceClaimTemplates().Informer().GetIndexer()
	case *resourcev1.ResourceClaim:
		return f.KubeInformers.Resource().V1().ResourceClaims().Informer().GetIndexer()
	}
	f.T.Fatalf("no informer for %T", o)
	return nil
}

// RecordQueue wraps a controller's queue so that Queue records the delays
// its syncs ask for, and shuts it down when the test ends.
func (f *Fixture) RecordQueue(q workqueue.TypedRateLimitingInterface[cache.ObjectName]) *RecordingQueue {
	f.Queue = &RecordingQueue{TypedRateLimitingInterface: q}
	f.T.Cleanup(q.ShutDown)
	return f.Queue
}

// Sync forgets the actions so far and runs SyncHandler on key once.
func (f *Fixture) Sync(ctx context.Context, key cache.ObjectName) error {
	f.Client.ClearActions()
	f.KubeClient.ClearActions()
	return f.SyncHandler(ctx, key)
}

// Run syncs key once, checks that it succeeded, and checks the actions it
// made.
func (f *Fixture) Run(ctx context.Context, key cache.ObjectName) {
	f.T.Helper()
	f.run(ctx, key, false)
}

// RunExpectError syncs key once, checks that it failed, and checks the
// actions it made.
func (f *Fixture) RunExpectError(ctx context.Context, key cache.ObjectName) {
	f.T.Helper()
	f.run(ctx, key, true)
}

func (f *Fixture) run(ctx context.Context, key cache.ObjectName, wantErr bool) {
	f.T.Helper()
	if err := f.Sync(ctx, key); (err != nil) != wantErr {
		f.T.Errorf("sync %s: error = %v, want error: %v", key, err, wantErr)
	}
	f.CheckActions()
}

// ExpectApplyStatus expects a server-side apply of obj's status whose
// body is exactly OwnedStatus(obj).
func (f *Fixture) ExpectApplyStatus(obj runtime.Object) {
	f.T.Helper()
	if f.OwnedStatus == nil {
		f.T.Fatal("ExpectApplyStatus needs the fixture's OwnedStatus")
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		f.T.Fatal(err)
	}
	f.Actions = append(f.Actions, ApplyStatusAction(f.T, resourceOf(f.T, obj), m.GetNamespace(), m.GetName(), f.OwnedStatus(obj)))
}

func resourceOf(t testing.TB, obj runtime.Object) schema.GroupVersionResource {
	switch obj.(type) {
	case *gputaskv1.GPUTask:
		return TasksResource
	case *gputaskv1.GPUTaskSet:
		return SetsResource
	}
	t.Fatalf("no resource for %T", obj)
	return schema.GroupVersionResource{}
}

// CheckActions compares the actions made on both clientsets since the
// last sync began with Actions and KubeActions, and forgets those.
func (f *Fixture) CheckActions() {
	f.T.Helper()
	CheckActions(f.T, SortDeletes(f.Actions), SortDeletes(FilterInformerActions(f.Client.Actions())))
	CheckActions(f.T, SortDeletes(f.KubeActions), SortDeletes(FilterInformerActions(f.KubeClient.Actions())))
	f.Actions, f.KubeActions = nil, nil
}

// ExpectEvents checks the events recorded since the last call, in order,
// by prefix.
func (f *Fixture) ExpectEvents(want ...string) {
	f.T.Helper()
	ExpectEvents(f.T, Events(f.Recorder), want...)
}

// SortDeletes orders each run of consecutive deletes by name, since a
// controller makes them in parallel.
func SortDeletes(actions []core.Action) []core.Action {
	out := slices.Clone(actions)
	isDelete := func(a core.Action) bool { return a.GetVerb() == "delete" }
	for i := 0; i < len(out); {
		if !isDelete(out[i]) {
			i++
			continue
		}
		j := i
		for j < len(out) && isDelete(out[j]) {
			j++
		}
		slices.SortStableFunc(out[i:j], func(a, b core.Action) int {
			return strings.Compare(a.(core.DeleteAction).GetName(), b.(core.DeleteAction).GetName())
		})
		i = j
	}
	return out
}
