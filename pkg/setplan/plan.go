// Package setplan decides, without side effects, how one sync of a
// GPUTaskSet moves its tasks towards the desired count: which tasks to
// create, delete, drain or take back from draining, which ones minTaskAge
// holds back, which leave nodes being disrupted (disrupted.go), and when to
// look again. The set controller reads its caches, asks ForSet, carries the
// plan out and writes the status from it; the replay asks Make for the same
// plan over its modelled workers. It reads nothing but its arguments and
// imports no client, so table tests cover every decision.
package setplan

import (
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// Graceful scale-in: a busy worker (gputask.io/busy: "true" on its task or
// pod) that scale-in chooses is not deleted at once: it is marked
// gputask.io/draining: "true" so it can stop taking work, and deleted when
// it turns idle or its drain times out. A draining task no longer counts
// towards the desired count, so it is not replaced, and a scale-up takes
// drains back before creating tasks, which saves a cold start.

const (
	// DefaultDrainTimeout is scaleIn.drainTimeout when unset.
	DefaultDrainTimeout = 10 * time.Minute

	// DefaultBurstReplicas caps the tasks created or removed in one plan, as
	// the ReplicaSet controller's burstReplicas does, so that one huge scale
	// step cannot flood the API server; the next sync does the rest.
	DefaultBurstReplicas = 500
)

// Plan is what one sync does about the task count.
type Plan struct {
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
	// Disruption are the serving tasks on disrupted nodes, taken out of
	// service (disrupted.go); Create already counts their replacements.
	Disruption Disruption
	// Draining is how many tasks are draining once the plan is carried out.
	Draining int32
	// HeldBack is how many removals minTaskAge or an invalid spec held back.
	HeldBack int32
	// NodeGPUs is the GPUs each node has in use by the active tasks, which
	// the victim ranking empties one node at a time (ExplainNodes).
	NodeGPUs NodeGPUs
	// RetryAfter is when the set should be synced again without an event:
	// the first drain timeout or the first protected task coming of age.
	// Zero means no such time.
	RetryAfter time.Duration
}

// ForSet plans how to move from the set's active tasks to its desired
// count: spec.replicas, or 0 while the set is stopped, with the set's
// minTaskAge and drainTimeout, while the nodes in disrupted are being taken
// away; see MakeDisrupted. A stopped set protects no young task: the user
// asked for zero tasks, and protecting young ones would leave a stopped set
// running. Busy tasks still drain. A set whose own fields are invalid
// (InvalidSpec) removes nothing: its minimum age and drain timeout are
// unknown, and are never guessed.
func ForSet(set *gputaskv1.GPUTaskSet, active []*gputaskv1.GPUTask, busy BusyFunc, disrupted DisruptedNodes, now time.Time, burst int) Plan {
	minAge := MinTaskAge(set)
	if gputaskv1.IsStopped(set) {
		minAge = 0
	}
	plan := MakeDisrupted(active, desiredReplicas(set), busy, disrupted, DrainTimeout(set), minAge, now, burst)
	if len(InvalidSpec(set)) > 0 {
		return holdScaleIn(plan, active)
	}
	return plan
}

// Make moves the active tasks towards desired serving tasks. At most burst
// tasks are created, and at most burst victims are chosen, per sync.
//   - Too few serving tasks: take back drains first, the ones scale-in would
//     pick last (they hold the most work), then create the rest.
//   - Too many: choose victims with ChooseVictims; an idle victim, or any
//     victim when drainTimeout is 0, is deleted, a busy one is drained.
//   - A draining task that is no longer busy, or whose drain is older than
//     drainTimeout, is deleted.
func Make(active []*gputaskv1.GPUTask, desired int, busy BusyFunc, drainTimeout, minAge time.Duration, now time.Time, burst int) Plan {
	return MakeDisrupted(active, desired, busy, nil, drainTimeout, minAge, now, burst)
}

// MakeDisrupted is Make while the nodes in disrupted are being taken away
// (disrupted.go). A task placed on one of them is leaving: it is not
// serving, so its replacement is created as any missing task is; a
// serving one is drained if busy and deleted if not, as a scale-in victim
// is, at most burst of them per plan (Plan.Disruption); a draining one is
// never taken back. Nil disrupted is Make.
func MakeDisrupted(active []*gputaskv1.GPUTask, desired int, busy BusyFunc, disrupted DisruptedNodes, drainTimeout, minAge time.Duration, now time.Time, burst int) Plan {
	if busy == nil {
		busy = gputaskv1.WorkerBusy
	}
	plan := Plan{Desired: max(desired, 0), NodeGPUs: GPUsInUse(active)}
	var serving, leaving, draining []*gputaskv1.GPUTask
	for _, t := range active {
		switch {
		case gputaskv1.IsDraining(t):
			draining = append(draining, t)
		case disrupted.isLeaving(t):
			leaving = append(leaving, t)
		default:
			serving = append(serving, t)
		}
	}
	plan.Disruption = leave(leaving, busy, drainTimeout, burst)
	if len(plan.Disruption.Drain) > 0 {
		plan.RetryAfter = drainTimeout
	}

	switch diff := len(serving) - plan.Desired; {
	case diff < 0:
		need := -diff
		// A drain on a disrupted node is never taken back: its node is
		// going, and its replacement is what this creates.
		ranked := rankForScaleIn(disrupted.staying(draining), busy, plan.NodeGPUs)
		for i := len(ranked) - 1; i >= 0 && len(plan.Undrain) < need; i-- {
			plan.Undrain = append(plan.Undrain, ranked[i])
		}
		plan.Create = min(need-len(plan.Undrain), burst)
		draining = withoutTasks(draining, plan.Undrain)
	case diff > 0:
		scaleIn := chooseVictims(serving, min(diff, burst), minAge, now, busy, plan.NodeGPUs)
		plan.HeldBack = scaleIn.HeldBack
		plan.RetryAfter = earliest(plan.RetryAfter, scaleIn.RetryAfter)
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
	plan.Draining += int32(len(plan.Drain) + len(plan.Disruption.Drain))
	return plan
}

// ServingAfter is the active tasks that the plan neither deletes nor
// drains, for a disrupted node or otherwise: the ones a restart may roll
// through.
func (p Plan) ServingAfter(active []*gputaskv1.GPUTask) []*gputaskv1.GPUTask {
	kept := withoutTasks(withoutTasks(active, p.Delete), p.Drain)
	kept = withoutTasks(withoutTasks(kept, p.Disruption.Delete), p.Disruption.Drain)
	out := make([]*gputaskv1.GPUTask, 0, len(kept))
	undrained := make(map[string]bool, len(p.Undrain))
	for _, t := range p.Undrain {
		undrained[t.Name] = true
	}
	for _, t := range kept {
		if !gputaskv1.IsDraining(t) || undrained[t.Name] {
			out = append(out, t)
		}
	}
	return out
}

// InvalidSpec validates the fields of the set that the set controller
// reads. The autoscaling fields are left to the autoscaler, which reports
// them on its own SpecValid condition.
func InvalidSpec(set *gputaskv1.GPUTaskSet) field.ErrorList {
	spec := set.Spec
	spec.Autoscaling = nil
	return gputaskv1.ValidateTaskSetSpec(&spec)
}

// holdScaleIn takes every removal out of plan: with the minimum age or the
// drain timeout unknown, no task can be chosen, drained or deleted safely.
// Creations and drains taken back still happen, since they remove nothing,
// and so do the draining marks on disrupted nodes: they only stop new
// requests to a worker whose node is going anyway. The held removals count
// as held back, and no retry is due: only a change of the spec, which
// brings its own event, can release them.
func holdScaleIn(plan Plan, active []*gputaskv1.GPUTask) Plan {
	plan.HeldBack += int32(len(plan.Delete) + len(plan.Drain) + len(plan.Disruption.Delete))
	plan.Delete, plan.Drain, plan.Disruption.Delete = nil, nil, nil
	plan.RetryAfter = 0
	plan.Draining = int32(len(plan.Disruption.Drain))
	for _, t := range withoutTasks(active, plan.Undrain) {
		if gputaskv1.IsDraining(t) {
			plan.Draining++
		}
	}
	return plan
}

// DrainTimeout is spec.scaleIn.drainTimeout, DefaultDrainTimeout when unset.
func DrainTimeout(set *gputaskv1.GPUTaskSet) time.Duration {
	if set.Spec.ScaleIn == nil || set.Spec.ScaleIn.DrainTimeout == nil {
		return DefaultDrainTimeout
	}
	return max(set.Spec.ScaleIn.DrainTimeout.Duration, 0)
}

// MinTaskAge is spec.minTaskAge, 0 when unset.
func MinTaskAge(set *gputaskv1.GPUTaskSet) time.Duration {
	if set.Spec.MinTaskAge == nil {
		return 0
	}
	return set.Spec.MinTaskAge.Duration
}

// desiredReplicas is spec.replicas (1 when unset, as the API defaults it), or
// 0 while the set is stopped. Stopping keeps spec.replicas, so removing the
// annotation brings back the previous count.
func desiredReplicas(set *gputaskv1.GPUTaskSet) int {
	if gputaskv1.IsStopped(set) {
		return 0
	}
	if set.Spec.Replicas == nil {
		return 1
	}
	return max(int(*set.Spec.Replicas), 0)
}

// drainStarted is when the task was marked draining. A missing or invalid
// time counts from the task's creation, so a drain always ends.
func drainStarted(t *gputaskv1.GPUTask) time.Time {
	if ts, err := time.Parse(time.RFC3339, t.Annotations[gputaskv1.AnnotationDrainStartedAt]); err == nil {
		return ts
	}
	return t.CreationTimestamp.Time
}

// withoutTasks returns tasks minus the ones in drop.
func withoutTasks(tasks, drop []*gputaskv1.GPUTask) []*gputaskv1.GPUTask {
	if len(drop) == 0 {
		return tasks
	}
	dropped := make(map[string]bool, len(drop))
	for _, t := range drop {
		dropped[t.Name] = true
	}
	kept := make([]*gputaskv1.GPUTask, 0, len(tasks))
	for _, t := range tasks {
		if !dropped[t.Name] {
			kept = append(kept, t)
		}
	}
	return kept
}

// earliest is the smaller of two waits, where zero means none.
func earliest(a, b time.Duration) time.Duration {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}
