package baseline

import (
	"fmt"
	"math"
	"time"

	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// PolicyOracleLag is oracle-slo's schedule learned a start-up late: what a
// pool that reads exactly what each interval needs, but nothing of the
// intervals to come, spends at the best lookback and headroom found in
// hindsight.
const PolicyOracleLag = "oracle-lag"

// PolicyOracleLagDrawn is oracle-lag with its start-ups drawn as a
// reacting pool's are: each worker is asked for as the interval whose
// count it learns begins, and is Ready a start-up drawn then later, not
// at the start of the interval it serves.
const PolicyOracleLagDrawn = "oracle-lag-drawn"

// OracleLagLookbacks are the lookbacks oracle-lag tries, in intervals,
// and OracleLagHeadrooms the headrooms, a factor on the count over the
// lookback, each tried from the lowest.
var (
	OracleLagLookbacks = []int{0, 2, 5, 15, 60, 240}
	OracleLagHeadrooms = headroomGrid(0.05, 3)
)

func headroomGrid(step, top float64) []float64 {
	var out []float64
	for i := 0; float64(i)*step <= top+1e-9; i++ {
		out = append(out, float64(i)*step)
	}
	return out
}

// OracleLag plays oracle-slo's interval counts as a reactive pool could
// have learned them: the count of interval m is the most that the
// intervals from m−lag−lookback to m−lag needed, times 1 + headroom, where
// lag is the start-up in whole intervals: the workers that interval m
// needs are created a start-up before it, as interval m−lag begins, whose
// count is taken as known then and those after it not. It knows each
// past interval's least count exactly, as no metric tells, and it is
// tuned to the trace in hindsight, as hpa-best is: of every lookback and
// headroom tried, the row is the one that meets the SLO on the fewest
// GPU-hours (else the highest attainment). It is a reference for a policy
// that does not know the future, not a bound: a rule of another form may
// spend less.
type OracleLag struct {
	OracleSLO
	// Drawn asks for the workers as the interval a lag before theirs
	// begins, each Ready after a start-up drawn then (oracle-lag-drawn),
	// where oracle-lag has each Ready as its interval begins, created
	// its own start-up before as oracle-slo's are: that knows each
	// start-up before it is drawn, as no pool does.
	Drawn bool
}

// Name is the row's policy.
func (o OracleLag) Name() string {
	if o.Drawn {
		return PolicyOracleLagDrawn
	}
	return PolicyOracleLag
}

// Lagged is the count of each interval of counts learned lag intervals
// late: the most of the intervals [m−lag−lookback, m−lag] (the first
// count before any is known), times 1 + headroom, rounded up.
func Lagged(counts []int32, lag, lookback int, headroom float64) []int32 {
	out := make([]int32, len(counts))
	for m := range counts {
		last := max(m-lag, 0)
		var most int32
		for j := max(last-lookback, 0); j <= last; j++ {
			most = max(most, counts[j])
		}
		out[m] = int32(math.Ceil(float64(most)*(1+headroom) - 1e-9))
	}
	return out
}

// LagChoice is a lookback, in intervals, and a headroom of oracle-lag.
type LagChoice struct {
	Lookback int
	Headroom float64
}

// Lag is the start-up in intervals: how late oracle-lag learns an
// interval's count.
func (o OracleLag) Lag() int {
	return int((o.Startup + OracleSLOInterval - 1) / OracleSLOInterval)
}

// PlayLagged plays counts learned late at choice c on tr.
func (o OracleLag) PlayLagged(tr workload.Trace, counts []int32, c LagChoice) sim.Result {
	s := &schedule{name: o.Name(), counts: Lagged(counts, o.Lag(), c.Lookback, c.Headroom), every: OracleSLOInterval, ahead: true}
	if o.Drawn {
		s.ahead, s.asked = false, Lagged(counts, 0, c.Lookback, c.Headroom)
	}
	return sim.Play(o.Pool(tr, 0, false), s, o.Play)
}

// Search tries the lookbacks and headrooms on tr, oracle-slo's schedule
// given (OracleSLO.Schedule): for each lookback the least headroom that
// meets the SLO, bisected, as more workers in every interval never make a
// request wait longer. It returns the best row, its choice, whether it
// meets the SLO and how many were played.
func (o OracleLag) Search(tr workload.Trace, counts []int32) (best sim.Result, choice LagChoice, meets bool, tried int) {
	play := func(c LagChoice) sim.Result {
		r := o.PlayLagged(tr, counts, c)
		if tried++; tried == 1 || better(r, best) {
			best, choice, meets = r, c, meets || r.MeetsSLO
		}
		return r
	}
	for _, lookback := range OracleLagLookbacks {
		lo, hi := -1, len(OracleLagHeadrooms)
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			r := play(LagChoice{lookback, OracleLagHeadrooms[mid]})
			if r.MeetsSLO {
				hi = mid
				continue
			}
			// A headroom that misses on as many GPU-hours as the best
			// row spends is beaten by none above it.
			if meets && r.GPUHours >= best.GPUHours {
				break
			}
			lo = mid
		}
	}
	return best, choice, meets, tried
}

// Run is the oracle-lag row on tr, oracle-slo's schedule given.
func (o OracleLag) Run(tr workload.Trace, counts []int32) sim.Result {
	best, c, meets, tried := o.Search(tr, counts)
	best.Name = o.Name()
	best.Note = fmt.Sprintf("lookback %v, headroom %.2f, a start-up (%v) late; ",
		time.Duration(c.Lookback)*OracleSLOInterval, c.Headroom, time.Duration(o.Lag())*OracleSLOInterval)
	if o.Drawn {
		best.Note += "start-ups drawn as each is asked for; "
	}
	if meets {
		best.Note += fmt.Sprintf("of %d tried, the fewest GPU-hours meeting the SLO", tried)
	} else {
		best.Note += fmt.Sprintf("none of %d tried meets the SLO, the highest attainment", tried)
	}
	return best
}

// better is whether r is a better row than best: meeting the SLO before
// not meeting it, then the fewer GPU-hours, and among rows that miss, the
// higher attainment.
func better(r, best sim.Result) bool {
	switch {
	case r.MeetsSLO != best.MeetsSLO:
		return r.MeetsSLO
	case r.MeetsSLO:
		return r.GPUHours < best.GPUHours
	}
	return r.SLOAttainment > best.SLOAttainment
}
