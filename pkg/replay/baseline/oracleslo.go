package baseline

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// PolicyOracleSLO is the hindsight schedule of the fewest workers that
// meet the SLO, interval by interval.
const PolicyOracleSLO = "oracle-slo"

// Interval lengths of oracle-slo's search: the schedule changes every
// OracleSLOInterval, and each count is tried on a replay that starts
// oracleSLOWarmup earlier with the requests still waiting then (as the
// trial that chose the count before found them), so that the requests in
// flight and waiting when the interval begins are there.
const (
	OracleSLOInterval = time.Minute
	oracleSLOWarmup   = time.Minute
	// oracleSLOLimit is how long a trial replay runs past its last
	// arrival: a request not served by then misses any target.
	oracleSLOLimit = time.Hour
)

// OracleSLO finds, knowing every arrival, the fewest workers per interval
// whose requests meet the SLO: for each interval in turn, the smallest
// count at which the requests arriving in it, and those of the interval
// before, meet every stated target at the percentile, tried by replaying
// that stretch of the trace through the pool itself (so it holds for any
// serving model the pool has), with the counts already chosen before it
// and the tried count from then on. A worker is made Ready exactly when
// its interval begins, created its own start-up earlier and paid for
// since, and kept through a dip shorter than a start-up (keeping it costs
// less than a new one). The schedule is then played over the whole trace,
// raised where that replay misses the SLO (Run), and that replay is the
// row: a hindsight schedule, not a proof. A
// policy may meet the SLO over the whole trace on fewer GPU-hours by
// missing it in some intervals, or by scaling within an interval; the
// report flags such a row (sim.Result.BelowOracleSLO).
type OracleSLO struct {
	// Pool makes the pool a stretch of the trace plays on from from after
	// the replay's start, as the pool of every row is made; a trial's
	// models no nodes, as a trial is about the requests.
	Pool        func(tr workload.Trace, from time.Duration, trial bool) *sim.Pool
	Concurrency int
	// Startup is the median start-up, the shortest dip worth keeping
	// workers through.
	Startup time.Duration
	// Play are the row's play options; they give the trials the load
	// index and the SLO.
	Play sim.PlayOptions
}

// Schedule is the worker count per OracleSLOInterval from the trace's
// start, as the search chose it before keeping workers through dips.
func (o OracleSLO) Schedule(tr workload.Trace) []int32 {
	n := int(tr.Duration()/OracleSLOInterval) + 1
	counts := make([]int32, 0, n)
	needs := neededOverTime(tr, o.Concurrency)
	// queued[j] are the requests still in flight or waiting at interval
	// j's start in the trial that chose interval j−1's count.
	queued := make([][]carried, n+1)
	for k := range n {
		from := time.Duration(k) * OracleSLOInterval
		zeroWait := maxNeed(needs, from, from+OracleSLOInterval)
		guess := zeroWait
		if k > 0 {
			guess = counts[k-1]
		}
		limit := 4*max(zeroWait, guess) + 4
		first := max(k-int(oracleSLOWarmup/OracleSLOInterval), 0)
		left := map[int32][]carried{}
		meets := func(count int32) bool {
			ok, after := o.meets(tr, queued[first], counts, k, count)
			left[count] = after
			return ok
		}
		count := smallestMeeting(guess, limit, meets)
		if _, tried := left[count]; !tried {
			meets(count)
		}
		counts = append(counts, count)
		queued[k+1] = left[count]
	}
	return counts
}

// smallestMeeting is the smallest count in [0, limit] that meets, from a
// guess: galloping from it down while it meets or up while it does not,
// then bisecting, as a count that meets is followed by counts that meet
// (more workers never make a request wait longer). limit is taken when no
// count meets.
func smallestMeeting(guess, limit int32, meets func(int32) bool) int32 {
	guess = min(max(guess, 0), limit)
	lo, hi := int32(-1), limit // lo fails (or is below 0), hi meets or is the limit
	if meets(guess) {
		hi = guess
		for step := int32(1); ; step *= 2 {
			c := guess - step
			if c < 0 {
				lo = -1
				break
			}
			if !meets(c) {
				lo = c
				break
			}
			hi = c
		}
	} else {
		lo = guess
		for step := int32(1); ; step *= 2 {
			c := guess + step
			if c >= limit {
				break
			}
			if meets(c) {
				hi = c
				break
			}
			lo = c
		}
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if meets(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// maxNeed is the most workers the zero-wait oracle needs within [from, to).
func maxNeed(needs []need, from, to time.Duration) int32 {
	i := sort.Search(len(needs), func(i int) bool { return needs[i].at > from })
	var out int32
	if i > 0 {
		out = needs[i-1].workers
	}
	for ; i < len(needs) && needs[i].at < to; i++ {
		out = max(out, needs[i].workers)
	}
	return out
}

// carried is a request still in flight or waiting when a trial starts:
// what is left of it, as a share of its service (1 while it waits).
type carried struct {
	req  int
	left float64
}

// meets replays the stretch of tr from a warm-up before interval k to the
// last request of interval k, the requests still in flight or waiting at
// its start (carried, the rest of their service) first, at the chosen
// counts until k and count from then on. It reports whether the requests
// of interval k meet the SLO, and those of k−1 still do when count is
// below its own, and what is still in flight or waiting when interval k
// ends.
func (o OracleSLO) meets(tr workload.Trace, carry []carried, chosen []int32, k int, count int32) (bool, []carried) {
	first := max(k-int(oracleSLOWarmup/OracleSLOInterval), 0)
	from := time.Duration(first) * OracleSLOInterval
	to := time.Duration(k+1) * OracleSLOInterval
	lo := sort.Search(len(tr.Requests), func(i int) bool { return tr.Requests[i].Arrival >= from })
	hi := sort.Search(len(tr.Requests), func(i int) bool { return tr.Requests[i].Arrival >= to })
	// The trial's requests: the carried ones from its start, in flight
	// first (they hold their slots), then the stretch's arrivals.
	items := slices.Clone(carry)
	slices.SortStableFunc(items, func(a, b carried) int {
		switch {
		case a.left < 1 && b.left >= 1:
			return -1
		case a.left >= 1 && b.left < 1:
			return 1
		}
		return 0
	})
	for i := lo; i < hi; i++ {
		items = append(items, carried{req: i, left: 1})
	}
	if len(items) == 0 {
		return true, nil // nothing to serve
	}
	sub := workload.Trace{Requests: make([]workload.Served, len(items))}
	if tr.Tokens != nil {
		sub.Tokens = make([]workload.Tokens, len(items))
	}
	for i, it := range items {
		r := tr.Requests[it.req]
		sub.Requests[i] = workload.Served{Arrival: max(r.Arrival-from, 0), Service: time.Duration(float64(r.Service) * it.left)}
		if tr.Tokens != nil {
			tok := tr.Tokens[it.req]
			if it.left < 1 { // past its prefill: the rest of its output
				tok.Prefill, tok.OutputTokens = 0, max(1, tok.OutputTokens*it.left)
			}
			sub.Tokens[i] = tok
		}
	}
	counts := append(slices.Clone(chosen[first:k]), count)
	p := o.Pool(sub, from, true)
	sim.Play(p, &schedule{counts: counts, every: OracleSLOInterval}, sim.PlayOptions{SampleEvery: 24 * time.Hour, Limit: oracleSLOLimit, Load: o.Play.Load, SLO: o.Play.SLO})
	outcomes := p.Outcomes()
	ok := true
	for _, j := range []int{k - 1, k} {
		// The interval before met the SLO on a trial at its own count from
		// then on: it is held to it again only when this count is lower,
		// and its requests still waiting get fewer workers than then.
		if j < first || j == k-1 && count >= chosen[k-1] {
			continue
		}
		start, end := time.Duration(j)*OracleSLOInterval, time.Duration(j+1)*OracleSLOInterval
		var group []sim.Outcome
		for i := len(carry); i < len(items); i++ {
			if at := tr.Requests[items[i].req].Arrival; at >= start && at < end {
				group = append(group, outcomes[i])
			}
		}
		ok = ok && sim.Measure(group, o.Play.SLO).MeetsSLO
	}
	var after []carried
	end := to - from
	for i, it := range items {
		o := outcomes[i]
		begun := sub.Requests[i].Arrival + o.Wait
		switch {
		case o.Failed && o.Started:
			// lost with its worker: nothing left to carry
		case !o.Started || begun >= end:
			after = append(after, it) // still waiting
		case o.E2E > 0:
			done := sub.Requests[i].Arrival + o.E2E
			if done > end {
				after = append(after, carried{req: it.req, left: it.left * float64(done-end) / float64(done-begun)})
			}
		}
	}
	return ok, after
}

// keepThroughDips raises a count that falls and comes back within
// startup: keeping those workers costs less than new ones, each of which
// pays its start-up.
func keepThroughDips(counts []int32, startup time.Duration) []int32 {
	out := slices.Clone(counts)
	ahead := int((startup + OracleSLOInterval - 1) / OracleSLOInterval)
	for k := 1; k < len(out); k++ {
		if out[k] >= out[k-1] {
			continue
		}
		var again int32
		for j := k + 1; j <= min(k+ahead, len(counts)-1); j++ {
			again = max(again, counts[j])
		}
		out[k] = max(out[k], min(out[k-1], again))
	}
	return out
}

// oracleSLORepairs bounds the rounds of Run's repair.
const oracleSLORepairs = 16

// RunSchedule plays found, the schedule Schedule found on tr, over tr:
// the oracle-slo row (the run finds it once and shares it with
// oracle-lag). The search tries
// each count on a stretch of the trace with what was in flight carried as
// the rest of its work, which on long requests under the engine model (a
// reasoning model's outputs run for minutes, and what they hold in the KV
// cache is not carried) can leave too little for the whole trace. So the
// schedule is played whole, and while it misses the SLO every interval
// whose requests miss it at the percentile, and the one after it (whose
// workers serve what is still in flight), gets an eighth more workers (at
// least one), at most oracleSLORepairs times; the row says how many
// rounds it took. A schedule that still misses is the row as it is.
func (o OracleSLO) RunSchedule(tr workload.Trace, found []int32) sim.Result {
	counts := keepThroughDips(found, o.Startup)
	for round := 0; ; round++ {
		p := o.Pool(tr, 0, false)
		r := sim.Play(p, &schedule{name: PolicyOracleSLO, counts: counts, every: OracleSLOInterval, ahead: true}, o.Play)
		missed := missedIntervals(tr, p.Outcomes(), len(counts), o.Play.SLO)
		if r.MeetsSLO || round == oracleSLORepairs || len(missed) == 0 {
			if round > 0 {
				r.Note = fmt.Sprintf("schedule raised in %d rounds where it missed the SLO when played whole", round)
			}
			return r
		}
		counts = keepThroughDips(raiseMissed(counts, missed), o.Startup)
	}
}

// missedIntervals are the OracleSLOInterval intervals (of n) whose
// arriving requests miss the SLO at its percentile.
func missedIntervals(tr workload.Trace, outcomes []sim.Outcome, n int, slo sim.SLOTargets) []int {
	groups := make([][]sim.Outcome, n)
	for i, r := range tr.Requests {
		k := min(int(r.Arrival/OracleSLOInterval), n-1)
		groups[k] = append(groups[k], outcomes[i])
	}
	var missed []int
	for k, g := range groups {
		if len(g) > 0 && !sim.Measure(g, slo).MeetsSLO {
			missed = append(missed, k)
		}
	}
	return missed
}

// raiseMissed gives each missed interval, and the one after it, an eighth
// more workers, at least one.
func raiseMissed(counts []int32, missed []int) []int32 {
	out := slices.Clone(counts)
	raised := make([]bool, len(counts))
	for _, k := range missed {
		for _, j := range []int{k, k + 1} {
			if j < len(out) && !raised[j] {
				out[j] += max(1, counts[j]/8)
				raised[j] = true
			}
		}
	}
	return out
}

// schedule is a policy that sets the worker count per interval from a
// list: the first count Ready at the start, then at each interval's start
// the drains taken back or workers added (Ready then, created ahead when
// ahead is set, else at once) up to the count, or the least loaded
// workers drained down to it; a drained worker goes once idle. The last
// count holds to the end. With asked, the count of each interval is the
// higher of the two lists', and the workers added for it start then,
// each Ready after a start-up drawn as it is created.
type schedule struct {
	name     string
	counts   []int32
	every    time.Duration
	ahead    bool
	asked    []int32
	replicas int32
}

func (s *schedule) Name() string {
	if s.name == "" {
		return PolicyOracleSLO
	}
	return s.name
}

func (s *schedule) Start(p *sim.Pool) {
	s.replicas = s.counts[0]
	p.AddReady(int(s.replicas))
}

func (s *schedule) Period() time.Duration { return s.every }
func (s *schedule) Replicas() int32       { return s.replicas }
func (s *schedule) Wake() time.Time       { return time.Time{} }

func (s *schedule) Step(p *sim.Pool) {
	k := int(p.Now().Sub(p.Start()) / s.every)
	s.replicas = s.counts[min(k, len(s.counts)-1)]
	if s.asked != nil {
		s.replicas = max(s.replicas, s.asked[min(k, len(s.asked)-1)])
	}
	var active, draining []*sim.Worker
	for _, w := range p.Workers() {
		if w.Draining {
			draining = append(draining, w)
		} else {
			active = append(active, w)
		}
	}
	want := int(s.replicas)
	switch {
	case len(active) < want:
		// The busiest drains first: they would cost the longest to finish.
		slices.SortStableFunc(draining, func(a, b *sim.Worker) int { return b.InFlight() - a.InFlight() })
		for _, w := range draining[:min(len(draining), want-len(active))] {
			p.Undrain(w)
			want--
		}
		if n := want - len(active); n > 0 {
			switch {
			case s.asked != nil:
				p.Add(n)
			case s.ahead:
				p.AddAhead(n)
			default:
				p.AddReady(n)
			}
		}
	case len(active) > want:
		slices.SortStableFunc(active, func(a, b *sim.Worker) int { return a.InFlight() - b.InFlight() })
		for _, w := range active[:len(active)-want] {
			if w.Busy() {
				p.Drain(w)
			} else {
				p.Delete(w)
			}
		}
	}
}

// Sync deletes the drained workers that fell idle.
func (s *schedule) Sync(p *sim.Pool) {
	for _, w := range slices.Clone(p.Workers()) {
		if w.Draining && !w.Busy() {
			p.Delete(w)
		}
	}
}
