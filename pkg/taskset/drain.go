package taskset

import (
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// This file holds the pure drain planning of graceful scale-in. A busy
// worker (gputask.io/busy: "true" on its task or pod) that scale-in chooses
// is not deleted at once: it is marked gputask.io/draining: "true" so it can
// stop taking work, and deleted when it turns idle or its drain times out.
// A draining task no longer counts towards the desired count, so it is not
// replaced, and a scale-up takes drains back before creating tasks, which
// saves a cold start.

// DefaultDrainTimeout is scaleIn.drainTimeout when unset.
const DefaultDrainTimeout = 10 * time.Minute

// ScalePlan is what one sync does about the task count.
type ScalePlan struct {
	// Desired is the count of serving (not draining) tasks the set wants.
	Desired int
	// Create is how many tasks to create now.
	Create int
	// Undrain are draining tasks that a scale-up takes back, before it
	// creates anything.
	Undrain []*gputaskv1.GPUTask
	// Drain are busy victims to mark draining.
	Drain []*gputaskv1.GPUTask
	// Delete are idle victims and finished or timed-out drains, to delete now.
	Delete []*gputaskv1.GPUTask
	// Draining is how many tasks are draining once the plan is carried out.
	Draining int32
	// HeldBack is how many removals minTaskAge held back.
	HeldBack int32
	// NodeGPUs is the GPUs each node has in use by the active tasks, which
	// the victim ranking empties one node at a time (ExplainNodes).
	NodeGPUs NodeGPUs
	// RetryAfter is when the set should be synced again without an event:
	// the first drain timeout or the first protected task coming of age.
	// Zero means no such time.
	RetryAfter time.Duration
}

// drainStarted is when the task was marked draining. A missing or invalid
// time counts from the task's creation, so a drain always ends.
func drainStarted(t *gputaskv1.GPUTask) time.Time {
	if ts, err := time.Parse(time.RFC3339, t.Annotations[gputaskv1.AnnotationDrainStartedAt]); err == nil {
		return ts
	}
	return t.CreationTimestamp.Time
}

// PlanScale moves the active tasks towards desired serving tasks. At most
// burst tasks are created, and at most burst victims are chosen, per sync.
//   - Too few serving tasks: take back drains first, the ones scale-in would
//     pick last (they hold the most work), then create the rest.
//   - Too many: choose victims with ChooseVictims; an idle victim, or any
//     victim when drainTimeout is 0, is deleted, a busy one is drained.
//   - A draining task that is no longer busy, or whose drain is older than
//     drainTimeout, is deleted.
func PlanScale(active []*gputaskv1.GPUTask, desired int, busy BusyFunc, drainTimeout, minAge time.Duration, now time.Time, burst int) ScalePlan {
	if busy == nil {
		busy = gputaskv1.WorkerBusy
	}
	plan := ScalePlan{Desired: max(desired, 0), NodeGPUs: GPUsInUse(active)}
	var serving, draining []*gputaskv1.GPUTask
	for _, t := range active {
		if gputaskv1.IsDraining(t) {
			draining = append(draining, t)
		} else {
			serving = append(serving, t)
		}
	}

	switch diff := len(serving) - plan.Desired; {
	case diff < 0:
		need := -diff
		ranked := rankForScaleIn(draining, busy, plan.NodeGPUs)
		for i := len(ranked) - 1; i >= 0 && len(plan.Undrain) < need; i-- {
			plan.Undrain = append(plan.Undrain, ranked[i])
		}
		plan.Create = min(need-len(plan.Undrain), burst)
		draining = withoutTasks(draining, plan.Undrain)
	case diff > 0:
		scaleIn := chooseVictims(serving, min(diff, burst), minAge, now, busy, plan.NodeGPUs)
		plan.HeldBack = scaleIn.HeldBack
		plan.RetryAfter = scaleIn.RetryAfter
		for _, v := range scaleIn.Victims {
			if drainTimeout > 0 && busy(v) {
				plan.Drain = append(plan.Drain, v)
				plan.RetryAfter = earliest(plan.RetryAfter, drainTimeout)
			} else {
				plan.Delete = append(plan.Delete, v)
			}
		}
	}

	for _, t := range draining {
		if !busy(t) {
			plan.Delete = append(plan.Delete, t)
			continue
		}
		left := drainStarted(t).Add(drainTimeout).Sub(now)
		if drainTimeout <= 0 || left <= 0 {
			plan.Delete = append(plan.Delete, t)
			continue
		}
		plan.RetryAfter = earliest(plan.RetryAfter, left)
		plan.Draining++
	}
	plan.Draining += int32(len(plan.Drain))
	return plan
}

// earliest is the smaller of two waits, where zero means none.
func earliest(a, b time.Duration) time.Duration {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}
