package main

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
	"github.com/gputask/gputask-controller/pkg/taskstatus"
)

func TestSettleTime(t *testing.T) {
	task := newTask("render")
	at := func(ago time.Duration) metav1.Time { return metav1.NewTime(testNow.Add(-ago)) }
	pod := func(created time.Duration, phase corev1.PodPhase, conds ...corev1.PodCondition) *corev1.Pod {
		p := expectedPod(task)
		p.CreationTimestamp = at(created)
		p.Status.Phase = phase
		p.Status.Conditions = conds
		return p
	}
	scheduled := func(ago time.Duration) corev1.PodCondition {
		return corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: at(ago)}
	}
	deleting := pod(time.Second, corev1.PodPending)
	deleting.DeletionTimestamp = ptrTime(at(0))

	tests := []struct {
		name string
		pod  *corev1.Pod
		want time.Duration
	}{
		{"just created, waiting for the scheduler", pod(0, corev1.PodPending), taskstatus.Settle},
		{"created 4s ago", pod(4*time.Second, corev1.PodPending), taskstatus.Settle - 4*time.Second},
		{"waited for the scheduler too long", pod(taskstatus.Settle, corev1.PodPending), 0},
		{"bound 1s ago, starting", pod(time.Minute, corev1.PodPending, scheduled(time.Second)), taskstatus.Settle - time.Second},
		{"bound long ago, still starting", pod(time.Minute, corev1.PodPending, scheduled(time.Minute)), 0},
		{"unschedulable", pod(0, corev1.PodPending, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable"}), 0},
		{"running", pod(0, corev1.PodRunning, scheduled(0)), 0},
		{"failed", pod(0, corev1.PodFailed), 0},
		{"being deleted", deleting, 0},
		{"no creation time", pod(0, corev1.PodPending), 0},
	}
	tests[len(tests)-1].pod.CreationTimestamp = metav1.Time{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := taskstatus.SettleTime(tc.pod, testNow); got != tc.want {
				t.Errorf("taskstatus.SettleTime() = %v, want %v", got, tc.want)
			}
		})
	}
}

func ptrTime(t metav1.Time) *metav1.Time { return &t }

// TestStatusWaitsForThePodToSettle: a pod created, bound and started in
// quick succession costs its task one status write, for the state it
// reached; a pod that stays in one state is shown once it has settled.
func TestStatusWaitsForThePodToSettle(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task := newTask("render")
	f.Add(task)
	f.Add(controllertest.Node("gpu-1"))
	f.newController(ctx)

	pending := podWith(task, corev1.PodPending, "")
	pending.CreationTimestamp = metav1.NewTime(testNow)
	f.Update(pending)
	f.Run(ctx, key(task)) // the add event: no write yet

	bound := podWith(task, corev1.PodPending, "gpu-1")
	bound.CreationTimestamp = pending.CreationTimestamp
	bound.Status.Conditions[0].LastTransitionTime = metav1.NewTime(testNow)
	f.Update(bound)
	f.Run(ctx, key(task)) // bound: no write yet

	running := podWith(task, corev1.PodRunning, "gpu-1")
	running.CreationTimestamp = pending.CreationTimestamp
	f.Update(running)
	f.ExpectApplyStatus(withStatus(task, gputaskv1.GPUTaskRunning, "gpu-1"))
	f.Run(ctx, key(task))
}

func TestStatusShowsAPodThatDoesNotSettle(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task := newTask("render")
	f.Add(task)
	f.newController(ctx)

	pending := podWith(task, corev1.PodPending, "")
	pending.CreationTimestamp = metav1.NewTime(testNow)
	f.Update(pending)
	f.Run(ctx, key(task))

	f.Clock.Step(taskstatus.Settle)
	want := withStatus(task, gputaskv1.GPUTaskPending, "")
	for i := range want.Status.Conditions {
		want.Status.Conditions[i].LastTransitionTime = metav1.NewTime(testNow.Add(taskstatus.Settle))
	}
	f.ExpectApplyStatus(want)
	f.Run(ctx, key(task))
}

// TestStatusWriteWaitsForTheCacheToShowTheLast: while the task cache still
// shows the version the last status write replaced, no status is written (it
// would send the same status again); once the cache shows the write, it is.
func TestStatusWriteWaitsForTheCacheToShowTheLast(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task := newTask("render")
	f.Add(task)
	f.Add(controllertest.Node("gpu-1"))
	f.newController(ctx)
	// As the API server does, a status write gives the task a new version.
	f.Client.PrependReactor("patch", "gputasks", func(action core.Action) (bool, runtime.Object, error) {
		cur, err := f.Client.Tracker().Get(controllertest.TasksResource, task.Namespace, task.Name)
		if err != nil {
			return true, nil, err
		}
		out := cur.(*gputaskv1.GPUTask).DeepCopy()
		out.ResourceVersion += "1"
		return true, out, nil
	})

	pending := podWith(task, corev1.PodPending, "")
	pending.CreationTimestamp = metav1.NewTime(testNow.Add(-taskstatus.Settle))
	f.Update(pending)
	written := withStatus(task, gputaskv1.GPUTaskPending, "")
	f.ExpectApplyStatus(written)
	f.Run(ctx, key(task))

	// The pod runs before the task's update event came: nothing is written.
	running := podWith(task, corev1.PodRunning, "gpu-1")
	running.CreationTimestamp = pending.CreationTimestamp
	f.Update(running)
	f.Run(ctx, key(task))

	// The cache shows the write under its new version: the next one goes.
	shown := written.DeepCopy()
	shown.ResourceVersion = "2"
	f.Update(shown)
	f.ExpectApplyStatus(withStatus(shown, gputaskv1.GPUTaskRunning, "gpu-1"))
	f.Run(ctx, key(task))
}

// TestStatusWritesWaitForTheirTurnOutsideTheWorkers: status writes keep to
// the status client's rate, and a write that must wait ends the sync with
// its turn reserved and the key queued for it, instead of holding a worker
// in the client's rate limiter while other tasks wait for their pods.
func TestStatusWritesWaitForTheirTurnOutsideTheWorkers(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	f.opts.StatusQPS, f.opts.StatusBurst = 1, 1
	first := withStatus(newTask("first"), gputaskv1.GPUTaskPending, "")
	second := withStatus(newTask("second"), gputaskv1.GPUTaskPending, "")
	for _, task := range []*gputaskv1.GPUTask{first, second} {
		f.Add(task)
		f.Add(podWith(task, corev1.PodRunning, "gpu-1"))
	}
	f.Add(controllertest.Node("gpu-1"))
	c := f.newController(ctx)

	f.ExpectApplyStatus(withStatus(first, gputaskv1.GPUTaskRunning, "gpu-1"))
	f.Run(ctx, key(first)) // the burst's one token

	// The second write's turn is a second away: no write, no error logged,
	// the key queued for then.
	if err := c.syncHandler(ctx, key(second)); err != nil {
		t.Fatalf("sync = %v, want no error", err)
	}
	turn := stateOf(c, key(second)).statusWriteAt
	if want := testNow.Add(time.Second); !turn.Equal(want) {
		t.Fatalf("turn reserved for %v, want %v", turn, want)
	}
	// Another event before the turn takes no second turn.
	f.Clock.Step(500 * time.Millisecond)
	if err := c.syncHandler(ctx, key(second)); err != nil || !stateOf(c, key(second)).statusWriteAt.Equal(turn) {
		t.Fatalf("early sync = %v, turn %v; want no error and the same turn", err, stateOf(c, key(second)).statusWriteAt)
	}
	if n := len(controllertest.FilterInformerActions(f.Client.Actions())); n != 1 {
		t.Fatalf("%d GPUTask writes, want only the first task's", n)
	}

	f.Clock.Step(500 * time.Millisecond)
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		return c.workqueue.Len() > 0, nil
	}); err != nil {
		t.Fatal("the key did not come back at its turn")
	}
	want := withStatus(second, gputaskv1.GPUTaskRunning, "gpu-1")
	for i, cond := range want.Status.Conditions {
		if was := findCond(second.Status.Conditions, cond.Type); was == nil || was.Status != cond.Status {
			want.Status.Conditions[i].LastTransitionTime = metav1.NewTime(testNow.Add(time.Second))
		}
	}
	f.ExpectApplyStatus(want)
	f.Run(ctx, key(second))
	if left := stateOf(c, key(second)).statusWriteAt; !left.IsZero() {
		t.Error("the used turn is still reserved")
	}
}
