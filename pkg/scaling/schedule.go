package scaling

import (
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// Window is a scheduled window in force: its name, floor and ceiling.
type Window struct {
	Name string
	Min  int32
	Max  *int32
}

// ScheduleAt returns, of the schedules open at now, the one with the
// highest floor (the first of those on a tie), or nil when none is open. A
// window is open from each time its start matches, in its time zone, for
// its duration. A schedule that does not parse is skipped: the spec's
// validation reports it.
func ScheduleAt(schedules []gputaskv1.ScheduleSpec, now time.Time) *Window {
	var best *Window
	for i := range schedules {
		sc := &schedules[i]
		sched, err := gputaskv1.ParseSchedule(sc)
		if err != nil || sc.Duration.Duration <= 0 {
			continue
		}
		// The window is open when it last opened less than its duration
		// ago: the first start after now − duration is not after now.
		if sched.Next(now.Add(-sc.Duration.Duration)).After(now) {
			continue
		}
		if best == nil || sc.MinReplicas > best.Min {
			best = &Window{Name: sc.Name, Min: sc.MinReplicas, Max: sc.MaxReplicas}
		}
	}
	return best
}

// scheduled wraps a policy with the scheduled window in force (rule 15):
// its floor raises Min (at most Max) and its ceiling lowers Max, before
// the policy and the other modifiers see the bounds.
type scheduled struct{ inner rule }

func (s scheduled) ask(in *Inputs, d *Decision) step {
	w := in.Schedule
	if floor := min(max(w.Min, 0), in.Max); floor > in.Min {
		in.Min, in.floorFrom = floor, "schedule "+w.Name
	}
	if w.Max != nil && *w.Max < in.Max {
		in.Max, in.ceilingFrom = max(*w.Max, in.Min), "schedule "+w.Name
	}
	return s.inner.ask(in, d)
}

func (s scheduled) settle(in Inputs, d *Decision, st step) step { return s.inner.settle(in, d, st) }
