package scaling

import (
	"math"
	"sort"
	"time"
)

// DefaultStartupTimeout is autoscaling.startupTimeout when unset.
const DefaultStartupTimeout = 10 * time.Minute

// TaskStart is what startup awareness needs to know about one task of a set:
// a task that is running or on its way, not one that has finished or is
// being drained.
type TaskStart struct {
	Name string
	// Created is the task's creation time.
	Created time.Time
	// Ready is true when the task's Ready condition is True.
	Ready bool
	// Queued is true when the task's pod waits for a queueing system's
	// admission (it is gated): it waits for quota, not for a start.
	Queued bool
}

// Startup is how much of a set's capacity is still on its way.
type Startup struct {
	// Starting counts the tasks that are not Ready yet and younger than the
	// startup timeout, plus the tasks asked for that do not exist yet.
	Starting int32
	// Ready counts the Ready tasks.
	Ready int32
	// Queued counts the tasks that wait for a queue's admission. They do
	// not hold scale-up back: quota, not start-up, keeps them waiting.
	Queued int32
	// Expired names the tasks that were not Ready within the startup
	// timeout, sorted. They no longer hold scale-up back.
	Expired []string
	// NextExpiry is how long until the first starting task times out; zero
	// when none is starting.
	NextExpiry time.Duration
	// Ages is how long each starting task that exists has been on its
	// way, since it was created; Asked, how long the others (Starting less
	// len(Ages), asked for but not created yet) have been, since the last
	// step asked for them.
	Ages  []time.Duration
	Asked time.Duration
}

// ServeFor is how long the starting tasks serve, summed, before a task
// asked for now, which takes startup, is Ready: each from when it is Ready.
// A task on its way is taken to be Ready no sooner than the slowest of the
// recent start-ups makes it (slowest after it was asked for), so it serves
// for as long as it has been on its way less how much slower than startup
// the slowest start was, at most startup. Counted from startup alone, a
// task that starts late, as one in several does, is taken to work off a
// queue while it is not serving, and the pool asks for nothing while the
// queue outgrows the SLO.
func (s Startup) ServeFor(startup, slowest time.Duration) time.Duration {
	startup = max(startup, 0)
	late := max(slowest-startup, 0)
	serves := func(age time.Duration) float64 { return float64(min(max(age-late, 0), startup)) }
	var sum float64
	for _, age := range s.Ages {
		sum += serves(age)
	}
	if missing := int64(s.Starting) - int64(len(s.Ages)); missing > 0 {
		sum += float64(missing) * serves(s.Asked)
	}
	if sum >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(sum)
}

// CountStarting finds the capacity on its way. A task that the set added and
// that is not Ready yet is capacity on its way, not missing capacity, until
// timeout has passed since it was created. Tasks that spec.replicas asks for
// but that do not exist yet (current above the number of tasks) count as
// starting too, until timeout has passed since lastScale (the time they were
// asked for): the set controller may still be creating them, or creation
// may be failing, and a failing create must not block scale-up forever.
func CountStarting(tasks []TaskStart, current int32, lastScale time.Time, timeout time.Duration, now time.Time) Startup {
	if timeout <= 0 {
		timeout = DefaultStartupTimeout
	}
	var s Startup
	for _, t := range tasks {
		if t.Ready {
			s.Ready++
			continue
		}
		if t.Queued {
			s.Queued++
			continue
		}
		deadline := t.Created.Add(timeout)
		if !now.Before(deadline) {
			s.Expired = append(s.Expired, t.Name)
			continue
		}
		s.Starting++
		s.Ages = append(s.Ages, max(now.Sub(t.Created), 0))
		if wait := deadline.Sub(now); s.NextExpiry == 0 || wait < s.NextExpiry {
			s.NextExpiry = wait
		}
	}
	if missing := int64(current) - int64(len(tasks)); missing > 0 && !lastScale.IsZero() {
		if deadline := lastScale.Add(timeout); now.Before(deadline) {
			s.Starting = addSat(s.Starting, missing)
			s.Asked = max(now.Sub(lastScale), 0)
			if wait := deadline.Sub(now); s.NextExpiry == 0 || wait < s.NextExpiry {
				s.NextExpiry = wait
			}
		}
	}
	sort.Strings(s.Expired)
	return s
}
