package scaling

import (
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// startupSamples is how many of the most recent starts the start-up time
// is the median of: enough to outvote one slow node, few enough to follow
// a new image or node type within a few scale-ups.
const startupSamples = 9

// StartupOf is the start-up time the SLO policy looks ahead by: the median
// time from creation to Ready of the set's most recently created Ready
// tasks, each at most timeout, or timeout until a task has been Ready. A
// task that lost and regained Ready reads as a slow start; the median
// keeps one such task from moving it.
func StartupOf(tasks []*gputaskv1.GPUTask, timeout time.Duration) time.Duration {
	took := recentStarts(tasks, timeout)
	n := len(took)
	if n == 0 {
		return timeout
	}
	median := took[n/2]
	if n%2 == 0 {
		median = (took[n/2-1] + took[n/2]) / 2
	}
	// The API's timestamps are whole seconds, so a task Ready within the
	// second it was created shows a start of 0; it took under
	// minMeasuredStartup, and 0 would read as no measurement (Inputs).
	return max(median, minMeasuredStartup)
}

// SlowestStartupOf is the longest of the same recent starts as StartupOf,
// or timeout until a task has been Ready: how late a task on its way may
// yet be Ready, from the spread the set's start-ups show.
func SlowestStartupOf(tasks []*gputaskv1.GPUTask, timeout time.Duration) time.Duration {
	took := recentStarts(tasks, timeout)
	if len(took) == 0 {
		return timeout
	}
	return max(took[len(took)-1], minMeasuredStartup)
}

// recentStarts is the time from creation to Ready of the set's most
// recently created Ready tasks (startupSamples of them at most), each at
// most timeout, shortest first.
func recentStarts(tasks []*gputaskv1.GPUTask, timeout time.Duration) []time.Duration {
	type start struct {
		created time.Time
		took    time.Duration
	}
	var starts []start
	for _, t := range tasks {
		ready := meta.FindStatusCondition(t.Status.Conditions, gputaskv1.ConditionReady)
		if ready == nil || ready.Status != "True" || t.DeletionTimestamp != nil {
			continue
		}
		took := ready.LastTransitionTime.Sub(t.CreationTimestamp.Time)
		if took < 0 {
			continue
		}
		starts = append(starts, start{created: t.CreationTimestamp.Time, took: min(took, timeout)})
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].created.After(starts[j].created) })
	starts = starts[:min(len(starts), startupSamples)]
	took := make([]time.Duration, len(starts))
	for i, s := range starts {
		took[i] = s.took
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	return took
}

// minMeasuredStartup is the resolution of the timestamps a start is
// measured from.
const minMeasuredStartup = time.Second
