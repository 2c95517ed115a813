package taskset

import (
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
)

func TestRestartAnnotatesOneTaskAtATime(t *testing.T) {
	restartAt := testNow.Add(-10 * time.Minute).Format(time.RFC3339)
	rescheduled := metav1.NewTime(testNow.Add(-5 * time.Minute))
	done := func(task *gputaskv1.GPUTask) *gputaskv1.GPUTask {
		task.Annotations = map[string]string{gputaskv1.AnnotationRestartedAt: restartAt}
		task.Status.LastRescheduleTime = &rescheduled
		return task
	}
	tests := []struct {
		name      string
		tasks     func(set *gputaskv1.GPUTaskSet) []*gputaskv1.GPUTask
		wantPatch string
	}{{
		name: "starts with the oldest task",
		tasks: func(set *gputaskv1.GPUTaskSet) []*gputaskv1.GPUTask {
			return []*gputaskv1.GPUTask{ownedTask(set, "render-a", time.Hour), ownedTask(set, "render-b", 2*time.Hour), ownedTask(set, "render-c", 30*time.Minute)}
		},
		wantPatch: "render-b",
	}, {
		name: "waits while a task is mid-restart",
		tasks: func(set *gputaskv1.GPUTaskSet) []*gputaskv1.GPUTask {
			mid := ownedTask(set, "render-b", 2*time.Hour, controllertest.Annotation(gputaskv1.AnnotationRestartedAt, restartAt))
			return []*gputaskv1.GPUTask{ownedTask(set, "render-a", time.Hour), mid, ownedTask(set, "render-c", 30*time.Minute)}
		},
	}, {
		name: "moves on once the task runs again",
		tasks: func(set *gputaskv1.GPUTaskSet) []*gputaskv1.GPUTask {
			return []*gputaskv1.GPUTask{ownedTask(set, "render-a", time.Hour), done(ownedTask(set, "render-b", 2*time.Hour)), ownedTask(set, "render-c", 30*time.Minute)}
		},
		wantPatch: "render-a",
	}, {
		name: "finished",
		tasks: func(set *gputaskv1.GPUTaskSet) []*gputaskv1.GPUTask {
			return []*gputaskv1.GPUTask{done(ownedTask(set, "render-a", time.Hour)), done(ownedTask(set, "render-b", 2*time.Hour)), ownedTask(set, "render-new", 5*time.Minute)}
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			set := newSet("render", ptr.To[int32](3), controllertest.Annotation(gputaskv1.AnnotationRestartedAt, restartAt))
			f.Add(withStatus(set, 3, 3, 0, 0, 1))
			tasks := tc.tasks(set)
			f.addTasks(tasks...)
			if tc.wantPatch != "" {
				f.expectRestartPatch(set.Namespace, tc.wantPatch, restartAt)
			}
			c := f.newController(ctx)
			f.Run(ctx, key(set))

			if n := controllertest.CountEvents(f.events(), "Normal RestartingTask"); (n == 1) != (tc.wantPatch != "") || n > 1 {
				t.Errorf("RestartingTask events = %d", n)
			}
			if tc.wantPatch == "" {
				return
			}
			// The cache has not shown the annotation yet: a second sync
			// must not start a second task.
			f.Run(ctx, key(set))

			// The patch changed no spec.
			patched, err := f.Client.GputaskV1().GPUTasks(set.Namespace).Get(ctx, tc.wantPatch, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !apiequality.Semantic.DeepEqual(patched.Spec, set.Spec.Template.Spec) {
				t.Errorf("restart changed the task spec: %+v", patched.Spec)
			}
			if patched.Annotations[gputaskv1.AnnotationRestartedAt] != restartAt {
				t.Errorf("annotation = %q, want %q", patched.Annotations[gputaskv1.AnnotationRestartedAt], restartAt)
			}
			// Seeing the annotation settles the expectation.
			old := taskNamed(tasks, tc.wantPatch)
			patched.ResourceVersion = "2" // the fake tracker does not bump it
			c.updateTask(klogDiscard(), old, patched)
			if !c.expectations.Satisfied(setKey(set)) {
				t.Error("expectation not settled by the annotated task")
			}
		})
	}
}

func TestRestartWithInvalidTimeWarnsAndWaits(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("render", ptr.To[int32](1), controllertest.Annotation(gputaskv1.AnnotationRestartedAt, "now please"))
	f.Add(withStatus(set, 1, 1, 0, 0, 1))
	f.addTasks(ownedTask(set, "render-a", time.Hour))
	f.newController(ctx)
	f.Run(ctx, key(set))
	if n := controllertest.CountEvents(f.events(), "Warning "+gputaskv1.ReasonInvalidRestartedAt); n != 1 {
		t.Errorf("%s events = %d, want 1", gputaskv1.ReasonInvalidRestartedAt, n)
	}
}

func TestFailedRestartPatchIsRetried(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	restartAt := testNow.Add(-time.Minute).Format(time.RFC3339)
	set := newSet("render", ptr.To[int32](1), controllertest.Annotation(gputaskv1.AnnotationRestartedAt, restartAt))
	f.Add(withStatus(set, 1, 1, 0, 0, 1))
	f.addTasks(ownedTask(set, "render-a", time.Hour))
	f.Reactors = append(f.Reactors, controllertest.Reactor{Verb: "patch", Resource: "gputasks", Fn: func(core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("try later")
	}})
	f.expectRestartPatch(set.Namespace, "render-a", restartAt)
	c := f.newController(ctx)
	f.RunExpectError(ctx, key(set))
	if n := controllertest.CountEvents(f.events(), "Warning "+gputaskv1.ReasonFailedRestart); n != 1 {
		t.Errorf("%s events = %d, want 1", gputaskv1.ReasonFailedRestart, n)
	}
	if !c.expectations.Satisfied(setKey(set)) {
		t.Error("a failed patch must not block the next attempt")
	}
}
