package scaling

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// readyTask was created ago before t0 and became Ready took later.
func readyTask(ago, took time.Duration, status metav1.ConditionStatus) *gputaskv1.GPUTask {
	t := &gputaskv1.GPUTask{}
	t.CreationTimestamp = metav1.NewTime(t0.Add(-ago))
	t.Status.Conditions = []metav1.Condition{{Type: gputaskv1.ConditionReady, Status: status, LastTransitionTime: metav1.NewTime(t0.Add(-ago + took))}}
	return t
}

func TestStartupOf(t *testing.T) {
	const timeout = 10 * time.Minute
	many := func(n int, took time.Duration) []*gputaskv1.GPUTask {
		var out []*gputaskv1.GPUTask
		for i := range n {
			out = append(out, readyTask(time.Duration(i+1)*time.Hour, took, metav1.ConditionTrue))
		}
		return out
	}
	older := func(n int, took time.Duration) []*gputaskv1.GPUTask {
		var out []*gputaskv1.GPUTask
		for i := range n {
			out = append(out, readyTask(time.Duration(i+20)*time.Hour, took, metav1.ConditionTrue))
		}
		return out
	}
	deleted := readyTask(time.Minute, 30*time.Second, metav1.ConditionTrue)
	deleted.DeletionTimestamp = &metav1.Time{Time: t0}
	for _, tc := range []struct {
		name  string
		tasks []*gputaskv1.GPUTask
		want  time.Duration
	}{
		{"no task: the timeout", nil, timeout},
		{"none Ready yet", []*gputaskv1.GPUTask{readyTask(time.Minute, 0, metav1.ConditionFalse), {}}, timeout},
		{"one", []*gputaskv1.GPUTask{readyTask(time.Hour, 2*time.Minute, metav1.ConditionTrue)}, 2 * time.Minute},
		{"the median of three", []*gputaskv1.GPUTask{
			readyTask(time.Hour, 2*time.Minute, metav1.ConditionTrue),
			readyTask(2*time.Hour, 9*time.Minute, metav1.ConditionTrue),
			readyTask(3*time.Hour, 90*time.Second, metav1.ConditionTrue),
		}, 2 * time.Minute},
		{"the middle two of four", []*gputaskv1.GPUTask{
			readyTask(time.Hour, 2*time.Minute, metav1.ConditionTrue),
			readyTask(2*time.Hour, 3*time.Minute, metav1.ConditionTrue),
			readyTask(3*time.Hour, time.Minute, metav1.ConditionTrue),
			readyTask(4*time.Hour, 5*time.Minute, metav1.ConditionTrue),
		}, 150 * time.Second},
		// Of eleven starts, the nine most recent count: five of 2 minutes
		// and four of 5, not the oldest two, which would make 5 the median.
		{"the most recent starts", append(many(5, 2*time.Minute), older(6, 5*time.Minute)...), 2 * time.Minute},
		// Created and Ready within one second of the API's timestamps:
		// under a second, not no measurement, which 0 would mean.
		{"a start within the second", []*gputaskv1.GPUTask{readyTask(time.Hour, 0, metav1.ConditionTrue), readyTask(2*time.Hour, 0, metav1.ConditionTrue)}, time.Second},
		{"at most the timeout", []*gputaskv1.GPUTask{readyTask(24*time.Hour, 3*time.Hour, metav1.ConditionTrue)}, timeout},
		{"a task being deleted does not count", []*gputaskv1.GPUTask{deleted}, timeout},
		{"Ready before created is ignored", []*gputaskv1.GPUTask{readyTask(time.Hour, -time.Minute, metav1.ConditionTrue)}, timeout},
	} {
		if got := StartupOf(tc.tasks, timeout); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestSlowestStartupOf(t *testing.T) {
	const timeout = 10 * time.Minute
	var recent []*gputaskv1.GPUTask
	for i := range 9 {
		recent = append(recent, readyTask(time.Duration(i+1)*time.Hour, 2*time.Minute, metav1.ConditionTrue))
	}
	for _, tc := range []struct {
		name  string
		tasks []*gputaskv1.GPUTask
		want  time.Duration
	}{
		{"no task: the timeout", nil, timeout},
		{"the longest of three", []*gputaskv1.GPUTask{
			readyTask(time.Hour, 2*time.Minute, metav1.ConditionTrue),
			readyTask(2*time.Hour, 9*time.Minute, metav1.ConditionTrue),
			readyTask(3*time.Hour, 90*time.Second, metav1.ConditionTrue),
		}, 9 * time.Minute},
		// The nine most recent starts count, as for the median: an older
		// slow one does not.
		{"of the most recent starts", append(recent, readyTask(20*time.Hour, 9*time.Minute, metav1.ConditionTrue)), 2 * time.Minute},
		{"at most the timeout", []*gputaskv1.GPUTask{readyTask(24*time.Hour, 3*time.Hour, metav1.ConditionTrue)}, timeout},
		{"a start within the second", []*gputaskv1.GPUTask{readyTask(time.Hour, 0, metav1.ConditionTrue)}, time.Second},
	} {
		if got := SlowestStartupOf(tc.tasks, timeout); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
