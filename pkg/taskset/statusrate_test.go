package taskset

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
	"github.com/gputask/gputask-controller/pkg/generated/clientset/versioned/fake"
)

// TestStatusWrittenAtMostOncePerInterval: while tasks churn, the set's
// status is written at most once per statusInterval; the counts a skipped
// sync saw are written by the sync it schedules.
func TestStatusWrittenAtMostOncePerInterval(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](2))
	a, b := ownedTask(set, "render-a", time.Hour), ownedTask(set, "render-b", time.Hour)
	b.Status.Phase = gputaskv1.GPUTaskPending
	f.Add(set)
	f.addTasks(a, b)

	f.ExpectApplyStatus(withStatus(set, 2, 1, 1, 0, 1))
	f.newController(ctx)
	f.Run(ctx, key(set))
	written := withStatus(set, 2, 1, 1, 0, 1)

	// The set's cache shows the write; task b starts running half a second later.
	f.Update(written)
	running := b.DeepCopy()
	running.Status.Phase = gputaskv1.GPUTaskRunning
	f.Update(running)
	f.Clock.Step(statusInterval / 2)
	f.Run(ctx, key(set)) // no write
	if got := f.Queue.After(); len(got) != 1 || got[0] != statusInterval/2 {
		t.Errorf("AddAfter calls = %v, want one of %v", got, statusInterval/2)
	}

	f.Clock.Step(statusInterval / 2)
	f.ExpectApplyStatus(withStatus(set, 2, 2, 0, 0, 1))
	f.Run(ctx, key(set))
}

func TestCountsDifferOnly(t *testing.T) {
	failure := &metav1.Condition{Type: gputaskv1.ConditionReplicaFailure, Status: metav1.ConditionTrue, Reason: gputaskv1.ReasonInvalidSpec, Message: "m"}
	base := ownStatus{Replicas: 3, RunningReplicas: 2, PendingReplicas: 1, ObservedGeneration: 2, Selector: "s"}
	tests := []struct {
		name string
		edit func(*ownStatus)
		want bool
	}{
		{"equal", func(*ownStatus) {}, false},
		{"counts", func(s *ownStatus) { s.RunningReplicas, s.PendingReplicas, s.ReadyReplicas = 3, 0, 3 }, true},
		{"nodes", func(s *ownStatus) { s.Nodes = 2 }, true},
		{"generation", func(s *ownStatus) { s.ObservedGeneration = 3 }, false},
		{"generation and counts", func(s *ownStatus) { s.ObservedGeneration, s.Replicas = 3, 4 }, false},
		{"condition", func(s *ownStatus) { s.ReplicaFailure = failure }, false},
		{"selector", func(s *ownStatus) { s.Selector = "t" }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			tc.edit(&o)
			if got := base.countsDifferOnly(o); got != tc.want {
				t.Errorf("countsDifferOnly = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestStatusWrittenThroughStatusClient: with Options.StatusClient the set's
// status goes through that client, so it never takes from the rate limit of
// the task creates, which stay on the main one.
func TestStatusWrittenThroughStatusClient(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](1))
	f.Add(set)
	f.statusClient = fake.NewClientset(set)
	f.expectCreates(set, 1)
	f.newController(ctx)
	f.Run(ctx, key(set))

	want := []core.Action{controllertest.ApplyStatusAction(t, setsResource, set.Namespace, set.Name, ownedStatus(withStatus(set, 0, 0, 0, 0, 0)))}
	controllertest.CheckActions(t, want, controllertest.FilterInformerActions(f.statusClient.Actions()))
}
