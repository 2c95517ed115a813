package taskset

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
)

func TestSlowStartStopsAtFirstFailingBatch(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](10))
	f.Add(withStatus(set, 0, 0, 0, 0, 0))
	var calls atomic.Int64
	f.Reactors = append(f.Reactors, controllertest.Reactor{Verb: "create", Resource: "gputasks", Fn: func(core.Action) (bool, runtime.Object, error) {
		if calls.Add(1) > 3 {
			return true, nil, apierrors.NewForbidden(tasksResource.GroupResource(), "", errors.New("exceeded quota"))
		}
		return false, nil, nil
	}})

	// Batches of 1 and 2 succeed; the batch of 4 fails; the last 3 are never tried.
	f.expectCreates(set, 7)
	failed := withStatus(set, 0, 0, 0, 0, 0)
	failed.Status.Conditions = []metav1.Condition{{
		Type:               gputaskv1.ConditionReplicaFailure,
		Status:             metav1.ConditionTrue,
		Reason:             gputaskv1.ReasonFailedCreate,
		Message:            "creating tasks for gputaskset default/render: gputasks.gputask.io is forbidden: exceeded quota",
		ObservedGeneration: set.Generation,
		LastTransitionTime: metav1.NewTime(testNow),
	}}
	f.ExpectApplyStatus(failed)
	c := f.newController(ctx)
	f.RunExpectError(ctx, key(set))

	events := f.events()
	if n := controllertest.CountEvents(events, "Normal SuccessfulCreate Created 3 tasks"); n != 1 {
		t.Errorf("SuccessfulCreate events = %d, want 1 for the 3 tasks", n)
	}
	if n := controllertest.CountEvents(events, "Warning FailedCreate"); n != 4 {
		t.Errorf("FailedCreate events = %d, want 4", n)
	}
	// Only the 3 created tasks are still expected.
	for range 2 {
		c.expectations.CreationObserved(setKey(set))
	}
	if c.expectations.Satisfied(setKey(set)) {
		t.Error("want one creation still expected")
	}
	c.expectations.CreationObserved(setKey(set))
	if !c.expectations.Satisfied(setKey(set)) {
		t.Error("want no creation expected after the 3 successes were observed")
	}
}

// lastStatusUpdate returns what the last server-side apply of the status
// sent.
func lastStatusUpdate(t *testing.T, actions []core.Action) *gputaskv1.GPUTaskSet {
	t.Helper()
	for i := len(actions) - 1; i >= 0; i-- {
		if controllertest.IsApply(actions[i]) && actions[i].GetSubresource() == "status" {
			var set gputaskv1.GPUTaskSet
			controllertest.Applied(t, actions[i], &set)
			return &set
		}
	}
	t.Fatal("no status update")
	return nil
}

func TestReplicaFailureClearedAfterSuccess(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](1))
	failing := withStatus(set, 1, 1, 0, 0, 1)
	failing.Status.Conditions = []metav1.Condition{
		{Type: gputaskv1.ConditionReplicaFailure, Status: metav1.ConditionTrue, Reason: gputaskv1.ReasonFailedCreate, Message: "quota"},
		{Type: gputaskv1.ConditionScalingActive, Status: metav1.ConditionTrue, Reason: "ValidMetricFound"},
	}
	f.Add(failing)
	f.addTasks(ownedTask(set, "render-a", time.Hour))

	want := withStatus(set, 1, 1, 0, 0, 1)
	want.Status.Conditions = []metav1.Condition{{Type: gputaskv1.ConditionScalingActive, Status: metav1.ConditionTrue, Reason: "ValidMetricFound"}}
	f.ExpectApplyStatus(want)
	f.newController(ctx)
	f.Run(ctx, key(set))
}

func TestStatusWrittenOnlyWhenChangedAndOnlyOwnFields(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](2))
	stale := withStatus(set, 2, 1, 1, 0, 1) // one task has started running since
	stale.Status.ObservedGeneration = 2
	stale.Status.LoadIndex = "0.91"
	stale.Status.DesiredReplicas = ptr.To[int32](2)
	stale.Status.Recommendations = []gputaskv1.Recommendation{{Time: metav1.NewTime(testNow), Replicas: 2}}
	stale.Status.Conditions = []metav1.Condition{{Type: gputaskv1.ConditionAbleToScale, Status: metav1.ConditionTrue, Reason: "ReadyForNewScale"}}
	f.Add(stale)
	f.addTasks(ownedTask(set, "render-a", time.Hour), ownedTask(set, "render-b", time.Hour))

	want := stale.DeepCopy()
	want.Status.RunningReplicas, want.Status.PendingReplicas, want.Status.ObservedGeneration = 2, 0, 3
	f.ExpectApplyStatus(want)
	f.newController(ctx)
	f.Run(ctx, key(set))

	// The same sync on a cache that shows the write makes no call.
	f.Cached, f.Objects, f.Actions = []runtime.Object{want}, nil, nil
	f.addTasks(ownedTask(set, "render-a", time.Hour), ownedTask(set, "render-b", time.Hour))
	f.newController(ctx)
	f.Run(ctx, key(set))
}

// TestStatusApplyKeepsOtherWritersFields: the set controller applies only
// its own fields, as its own field manager, so what the autoscaler wrote
// meanwhile stays, with no conflict and no fresh read.
func TestStatusApplyKeepsOtherWritersFields(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](1))
	cached := withStatus(set, 0, 0, 0, 0, 0)
	f.Cached = append(f.Cached, cached)
	f.addTasks(ownedTask(set, "render-a", time.Hour))
	// Meanwhile the autoscaler wrote its fields; the API has a newer set.
	fresh := cached.DeepCopy()
	fresh.Status.LoadIndex = "0.42"
	f.Objects = append(f.Objects, fresh)

	f.ExpectApplyStatus(withStatus(set, 1, 1, 0, 0, 1))
	f.newController(ctx)
	f.Run(ctx, key(set))

	got, err := f.Client.GputaskV1().GPUTaskSets(set.Namespace).Get(ctx, set.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.LoadIndex != "0.42" || got.Status.Replicas != 1 {
		t.Errorf("after the apply: loadIndex %q, replicas %d; want the autoscaler's 0.42 kept and 1", got.Status.LoadIndex, got.Status.Replicas)
	}
	var managers []string
	for _, m := range got.ManagedFields {
		managers = append(managers, m.Manager)
	}
	if !slices.Contains(managers, ControllerName) {
		t.Errorf("field managers %v, want %s among them", managers, ControllerName)
	}
}

func TestFailedDeleteSetsReplicaFailure(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](0))
	f.Add(withStatus(set, 2, 2, 0, 0, 1))
	f.addTasks(ownedTask(set, "render-a", time.Hour), ownedTask(set, "render-gone", time.Minute))
	f.Reactors = append(f.Reactors, controllertest.Reactor{Verb: "delete", Resource: "gputasks", Fn: func(a core.Action) (bool, runtime.Object, error) {
		switch a.(core.DeleteAction).GetName() {
		case "render-gone":
			// Already deleted by someone else: not a failure.
			return true, nil, apierrors.NewNotFound(tasksResource.GroupResource(), "render-gone")
		default:
			return true, nil, apierrors.NewInternalError(errors.New("etcd timeout"))
		}
	}})

	f.expectDelete(set.Namespace, "render-gone")
	f.expectDelete(set.Namespace, "render-a")
	want := withStatus(set, 2, 2, 0, 0, 1)
	want.Status.Conditions = []metav1.Condition{{
		Type:               gputaskv1.ConditionReplicaFailure,
		Status:             metav1.ConditionTrue,
		Reason:             gputaskv1.ReasonFailedDelete,
		Message:            "deleting tasks of gputaskset default/render: deleting gputask default/render-a: Internal error occurred: etcd timeout",
		ObservedGeneration: set.Generation,
		LastTransitionTime: metav1.NewTime(testNow),
	}}
	f.ExpectApplyStatus(want)
	c := f.newController(ctx)
	f.RunExpectError(ctx, key(set))

	events := f.events()
	if controllertest.CountEvents(events, "Warning FailedDelete") != 1 || controllertest.CountEvents(events, "Normal SuccessfulDelete") != 0 {
		t.Errorf("events = %v, want one FailedDelete", events)
	}
	// Neither delete will be observed, so neither may be waited for.
	if !c.expectations.Satisfied(setKey(set)) {
		t.Error("failed and not-found deletes must not stay expected")
	}
}

func TestNamespaceTerminatingIsNotAFailure(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](1))
	f.Add(withStatus(set, 0, 0, 0, 0, 0))
	f.Reactors = append(f.Reactors, controllertest.Reactor{Verb: "create", Resource: "gputasks", Fn: func(core.Action) (bool, runtime.Object, error) {
		err := apierrors.NewForbidden(tasksResource.GroupResource(), "", errors.New("namespace default is being terminated"))
		err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}
		return true, nil, err
	}})
	f.expectCreate(expectedTask(set))
	c := f.newController(ctx)
	f.Run(ctx, key(set))
	if events := f.events(); len(events) != 0 {
		t.Errorf("events = %v, want none", events)
	}
	if !c.expectations.Satisfied(setKey(set)) {
		t.Error("a create refused by a terminating namespace must not stay expected")
	}
}
