package autoscaler

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/scaling"
)

// startup counts the set's tasks that are on their way. Tasks that finished,
// are being deleted or are draining are not capacity the set is waiting for;
// tasks whose pods wait for a queue's admission (queued, known only to
// capacity-aware sets, which read pods) wait for quota, not for a start.
func (c *Controller) startup(set *gputaskv1.GPUTaskSet, tasks []*gputaskv1.GPUTask, lastStep, now time.Time, queued func(*gputaskv1.GPUTask) bool) scaling.Startup {
	starts := scaling.TaskStarts(tasks)
	if queued != nil {
		waiting := map[string]bool{}
		for _, t := range tasks {
			waiting[t.Name] = queued(t)
		}
		for i := range starts {
			starts[i].Queued = waiting[starts[i].Name]
		}
	}
	current := currentReplicas(set)
	if gputaskv1.IsStopped(set) {
		current = 0
	}
	// Tasks asked for but not created yet are on their way since the last
	// step, or since the set was created: its first tasks start too.
	asked := lastStep
	if created := set.CreationTimestamp.Time; created.After(asked) {
		asked = created
	}
	return scaling.CountStarting(starts, current, asked, scaling.StartupTimeoutOf(set.Spec.Autoscaling), now)
}

// warnExpired records one Warning for each task that newly missed its
// startup timeout, and forgets tasks that are Ready or gone, so that a
// steady set records nothing.
func (c *Controller) warnExpired(set *gputaskv1.GPUTaskSet, state *setState, expired []string) {
	seen := make(map[string]bool, len(expired))
	for _, name := range expired {
		seen[name] = true
		if state.warned[name] {
			continue
		}
		c.recorder.Eventf(set, corev1.EventTypeWarning, gputaskv1.ReasonTaskStartupTimeout,
			"Task %s is not Ready %v after it was created; it no longer holds scale-up back", name, scaling.StartupTimeoutOf(set.Spec.Autoscaling))
	}
	state.warned = seen
}

// lastStep is when the set's count last changed by this autoscaler: the
// exact time this process remembers, or else status.lastScaleTime, which a
// previous leader wrote. The API keeps that time to the second only, so it
// is read as the end of its second: a new leader then waits up to a second
// more, never less, than the interval.
func lastStep(set *gputaskv1.GPUTaskSet, remembered time.Time) time.Time {
	if set.Status.LastScaleTime == nil {
		return remembered
	}
	persisted := set.Status.LastScaleTime.Time
	if !remembered.IsZero() && !remembered.Before(persisted) {
		return remembered
	}
	return persisted.Add(time.Second)
}
