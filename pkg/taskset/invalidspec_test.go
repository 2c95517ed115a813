package taskset

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/setplan"
)

// withInvalidSpec is status with ReplicaFailure InvalidSpec carrying msg.
func withInvalidSpec(set *gputaskv1.GPUTaskSet, msg string) *gputaskv1.GPUTaskSet {
	s := set.DeepCopy()
	s.Status.Conditions = []metav1.Condition{{
		Type:               gputaskv1.ConditionReplicaFailure,
		Status:             metav1.ConditionTrue,
		Reason:             gputaskv1.ReasonInvalidSpec,
		Message:            msg,
		ObservedGeneration: set.Generation,
		LastTransitionTime: metav1.NewTime(testNow),
	}}
	return s
}

func TestInvalidMinTaskAgeHoldsScaleInUntilFixed(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](1))
	set.Spec.MinTaskAge = &gputaskv1.Duration{Unparsed: `"abc"`}
	f.Add(set)
	f.addTasks(
		ownedTask(set, "render-a", time.Hour),
		ownedTask(set, "render-b", 2*time.Hour),
		ownedTask(set, "render-c", 3*time.Hour),
	)

	// 3 tasks, 1 wanted, but the minimum age is unknown: nothing is deleted,
	// the two removals are held back, and ReplicaFailure says why.
	const msg = `spec.minTaskAge: Invalid value: "abc": must be a duration such as 30s, 5m or 1h30m; scale-in is held until it is fixed`
	held := withInvalidSpec(withStatus(set, 3, 3, 0, 2, 1), msg)
	f.ExpectApplyStatus(held)
	f.newController(ctx)
	f.Run(ctx, key(set))
	if after := f.Queue.After(); len(after) != 0 {
		t.Errorf("AddAfter calls = %v, want none: only a spec change releases the hold", after)
	}

	// Once the cache shows the write, the same sync writes nothing.
	f.Update(held)
	f.Run(ctx, key(set))

	// Fixing the spec removes the condition, and scale-in proceeds: the two
	// youngest tasks go.
	fixed := held.DeepCopy()
	fixed.Spec.MinTaskAge = nil
	fixed.Generation = 4
	if err := f.Client.Tracker().Update(setsResource, fixed, fixed.Namespace); err != nil {
		t.Fatal(err)
	}
	f.Update(fixed)
	f.expectDelete(set.Namespace, "render-a")
	f.expectDelete(set.Namespace, "render-b")
	want := withStatus(fixed, 3, 3, 0, 0, 1)
	want.Status.Conditions = nil
	f.ExpectApplyStatus(want)
	f.Run(ctx, key(set))
}

func TestInvalidDrainTimeoutStillCreates(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](2))
	set.Spec.ScaleIn = &gputaskv1.ScaleInSpec{DrainTimeout: &gputaskv1.Duration{Unparsed: `"30"`}}
	f.Add(set)
	f.addTasks(ownedTask(set, "render-a", time.Hour))

	// Creating up to replicas removes nothing, so it goes on; the condition
	// names the field.
	f.expectCreates(set, 1)
	f.ExpectApplyStatus(withInvalidSpec(withStatus(set, 1, 1, 0, 0, 1),
		`spec.scaleIn.drainTimeout: Invalid value: "30": must be a duration such as 30s, 5m or 1h30m; scale-in is held until it is fixed`))
	f.newController(ctx)
	f.Run(ctx, key(set))
}

func TestInvalidSpecMessageIsCapped(t *testing.T) {
	set := newSet("render", ptr.To[int32](1))
	set.Spec.MinTaskAge = &gputaskv1.Duration{Unparsed: `"` + strings.Repeat("x", 64<<10) + `"`}
	msg := invalidSpecMessage(setplan.InvalidSpec(set))
	if len(msg) > maxFailureMessage || !strings.HasPrefix(msg, "spec.minTaskAge: ") || !strings.HasSuffix(msg, scaleInHeldSuffix) {
		t.Errorf("message of %d bytes = %.80q...%q", len(msg), msg, msg[max(len(msg)-60, 0):])
	}
}
