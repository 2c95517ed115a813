package taskset

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// restartTask builds a task for the restart tables.
type restartTask struct {
	name        string
	age         time.Duration // before testNow
	phase       gputaskv1.GPUTaskPhase
	noPod       bool
	annotation  string
	rescheduled time.Duration // before testNow; 0 means never
}

func (r restartTask) build() *gputaskv1.GPUTask {
	t := &gputaskv1.GPUTask{ObjectMeta: metav1.ObjectMeta{
		Name:              r.name,
		Namespace:         "default",
		CreationTimestamp: metav1.NewTime(testNow.Add(-r.age)),
	}}
	t.Status.Phase = r.phase
	if !r.noPod {
		t.Status.PodName = r.name + "-pod"
	}
	if r.annotation != "" {
		t.Annotations = map[string]string{gputaskv1.AnnotationRestartedAt: r.annotation}
	}
	if r.rescheduled > 0 {
		last := metav1.NewTime(testNow.Add(-r.rescheduled))
		t.Status.LastRescheduleTime = &last
	}
	return t
}

func TestPlanRestart(t *testing.T) {
	// The restart was requested ten minutes before testNow.
	at := testNow.Add(-10 * time.Minute)
	tAt := at.Format(time.RFC3339)
	older := at.Add(-time.Hour).Format(time.RFC3339)
	newer := at.Add(time.Minute).Format(time.RFC3339)
	run := gputaskv1.GPUTaskRunning

	tests := []struct {
		name           string
		tasks          []restartTask
		wantNext       string
		wantInProgress string
		wantDone       int
		wantTotal      int
	}{{
		name:     "oldest task first",
		tasks:    []restartTask{{name: "b", age: time.Hour, phase: run}, {name: "a", age: 2 * time.Hour, phase: run}, {name: "c", age: 3 * time.Hour, phase: run}},
		wantNext: "c", wantTotal: 3,
	}, {
		name: "a task carrying T that is not running again blocks the rest",
		tasks: []restartTask{
			{name: "a", age: 2 * time.Hour, phase: gputaskv1.GPUTaskPending, annotation: tAt, rescheduled: 5 * time.Minute},
			{name: "b", age: time.Hour, phase: run},
		},
		wantInProgress: "a", wantTotal: 2,
	}, {
		name: "a task carrying T that was not rescheduled yet blocks the rest",
		tasks: []restartTask{
			{name: "a", age: 2 * time.Hour, phase: run, annotation: tAt},
			{name: "b", age: time.Hour, phase: run},
		},
		wantInProgress: "a", wantTotal: 2,
	}, {
		name: "a reschedule before T does not count",
		tasks: []restartTask{
			{name: "a", age: 2 * time.Hour, phase: run, annotation: tAt, rescheduled: 20 * time.Minute},
			{name: "b", age: time.Hour, phase: run},
		},
		wantInProgress: "a", wantTotal: 2,
	}, {
		name: "once restarted, the next task goes",
		tasks: []restartTask{
			{name: "a", age: 2 * time.Hour, phase: run, annotation: tAt, rescheduled: 5 * time.Minute},
			{name: "b", age: time.Hour, phase: run},
		},
		wantNext: "b", wantDone: 1, wantTotal: 2,
	}, {
		name: "a reschedule exactly at T counts",
		tasks: []restartTask{
			{name: "a", age: 2 * time.Hour, phase: run, annotation: tAt, rescheduled: 10 * time.Minute},
		},
		wantDone: 1, wantTotal: 1,
	}, {
		name: "an older restart annotation is replaced",
		tasks: []restartTask{
			{name: "a", age: 2 * time.Hour, phase: run, annotation: older, rescheduled: 30 * time.Minute},
		},
		wantNext: "a", wantTotal: 1,
	}, {
		name: "a newer restart on the task itself covers T",
		tasks: []restartTask{
			{name: "a", age: 2 * time.Hour, phase: run, annotation: newer, rescheduled: time.Minute},
			{name: "b", age: time.Hour, phase: run},
		},
		wantNext: "b", wantDone: 1, wantTotal: 2,
	}, {
		name: "an invalid task annotation counts as none",
		tasks: []restartTask{
			{name: "a", age: 2 * time.Hour, phase: run, annotation: "yesterday"},
		},
		wantNext: "a", wantTotal: 1,
	}, {
		name: "tasks created after T, or without a pod, need nothing",
		tasks: []restartTask{
			{name: "new", age: time.Minute, phase: run},
			{name: "nopod", age: time.Hour, phase: gputaskv1.GPUTaskPending, noPod: true},
		},
		wantTotal: 0,
	}, {
		name:     "tasks that are not running are restarted too",
		tasks:    []restartTask{{name: "pend", age: time.Hour, phase: gputaskv1.GPUTaskPending}},
		wantNext: "pend", wantTotal: 1,
	}, {
		name: "all done",
		tasks: []restartTask{
			{name: "a", age: 2 * time.Hour, phase: run, annotation: tAt, rescheduled: 5 * time.Minute},
			{name: "b", age: 2 * time.Hour, phase: run, annotation: tAt, rescheduled: 3 * time.Minute},
		},
		wantDone: 2, wantTotal: 2,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tasks := make([]*gputaskv1.GPUTask, 0, len(tc.tasks))
			for _, r := range tc.tasks {
				tasks = append(tasks, r.build())
			}
			got := planRestart(tasks, at)
			if n := taskName(got.Next); n != tc.wantNext {
				t.Errorf("next = %q, want %q", n, tc.wantNext)
			}
			if n := taskName(got.InProgress); n != tc.wantInProgress {
				t.Errorf("inProgress = %q, want %q", n, tc.wantInProgress)
			}
			if got.Done != tc.wantDone || got.Total != tc.wantTotal {
				t.Errorf("done/total = %d/%d, want %d/%d", got.Done, got.Total, tc.wantDone, tc.wantTotal)
			}
		})
	}
}

func taskName(t *gputaskv1.GPUTask) string {
	if t == nil {
		return ""
	}
	return t.Name
}
