package scaling

import (
	"math"
	"slices"
	"sort"
	"time"
)

// Rises is how far the arrival rate rose within one start-up, over the
// last hours: for each start-up-long bucket, the highest rise seen in it.
// A rise shorter than a start-up cannot be served by the tasks it would
// add, so the SLO policy keeps headroom for the rises this history shows
// instead. It is bounded: at most maxRiseBuckets buckets, none older than
// maxRiseBuckets start-ups.
type Rises struct {
	Buckets []RiseBucket
}

// RiseBucket is the highest rise, in requests per second, of the readings
// from Start to Start plus one start-up.
type RiseBucket struct {
	Start time.Time
	Rise  float64
	// Level is the rate its highest rise rose from (riseWithin's lowest
	// rate), 0 where unknown.
	Level float64
	// From is when the rate its highest rise rose from was read (see
	// Record), zero where unknown.
	From time.Time
	// Service is the longest service time read within the bucket, and
	// PerToken the longest service time per output token (see
	// Rises.Served); 0 where none was.
	Service, PerToken float64
}

const (
	// maxRiseBuckets is how many start-ups the history covers: 4 hours
	// at a 2-minute start-up.
	maxRiseBuckets = 120
	// minRiseBuckets is how many start-ups the history must cover before
	// its percentile sizes anything: until then the policy follows every
	// rise, as it cannot tell a burst from the pool's usual traffic.
	minRiseBuckets = 10
	// RisePercentile is the percentile of the rises the headroom covers:
	// nearly the highest of the last hours, since a burst's requests are
	// a far larger share of the traffic than its start-ups are of the
	// time (at 90 the bursty shape's bursts went beyond the headroom and
	// the pool missed a 2 s TTFT on 9 % of its requests).
	RisePercentile = 99
	// LoneRise is how many times the next highest rise the highest must
	// be to stand alone: a step or a flash crowd, an event of the last
	// hours rather than what the traffic does again. A highest rise
	// within it of the next is the height the traffic's bursts reach, and
	// sizes the headroom.
	LoneRise = 2
	// BusyServicePercentile is the percentile of the buckets' service
	// times that the pool's capacity is read at (Rises.BusyService): a
	// burst lengthens the service (an engine prefilling its queue carries
	// a chunk of prompt in every step) at the moment the tasks asked for
	// it are not yet Ready, so the pool holds the capacity of its busy
	// start-ups, not of the quietest minute.
	BusyServicePercentile = 90
	// LevelStartups is how many start-ups back the rate the rises are
	// taken at reaches (Rises.Headroom): a lull between bursts shorter
	// than that is the traffic between two bursts, not a quieter hour.
	// Taken at the lull's own rate, the headroom halved between the
	// bursty shape's bursts with 5-minute start-ups, and the next burst
	// queued on it (93.44 % of the requests within a 2 s TTFT).
	LevelStartups = 5
)

// Record adds a rise seen at now that began at began, from the rate level
// read at from (see riseWithin), in buckets width long (the start-up
// time), and forgets what is older than maxRiseBuckets buckets. Each
// start-up gets its bucket, and the rise goes to the bucket it began in:
// the readings of one step or flash crowd, which go on showing it until a
// start-up has passed, are one rise of the history, not one for each
// bucket they fall in, so a step seen once in the last hours stays above
// the percentile instead of sizing the headroom until it is forgotten.
// Nor does one rise take two buckets when the reading halfway up it, when
// it began, moves into the next bucket as it grows (behind a scrape a
// flash crowd's first reading shows a part of it): the readings that rise
// from the same reading (from) are one rise, kept in the latest bucket
// it began in, at the most they show. Counted in two buckets, one crowd
// would be two rises within LoneRise of each other, and size the
// headroom for the hours the history covers. A zero from is no reading:
// its rise is nobody else's. It returns a new history and leaves r as it
// was.
func (r Rises) Record(now, began, from time.Time, rise, level float64, width time.Duration) Rises {
	if !(rise >= 0) || math.IsInf(rise, 1) || width <= 0 {
		return r
	}
	horizon := now.Add(-maxRiseBuckets * width)
	kept := make([]RiseBucket, 0, min(len(r.Buckets)+1, maxRiseBuckets))
	for _, b := range r.Buckets {
		if b.Start.After(horizon) && !b.Start.After(now) {
			kept = append(kept, b)
		}
	}
	if n := len(kept); n == 0 || !now.Before(kept[n-1].Start.Add(width)) {
		kept = append(kept, RiseBucket{Start: now})
	}
	if len(kept) > maxRiseBuckets {
		kept = kept[len(kept)-maxRiseBuckets:]
	}
	k := len(kept) - 1
	for k > 0 && began.Before(kept[k].Start) {
		k--
	}
	for j := range kept {
		if from.IsZero() || j == k || !kept[j].From.Equal(from) {
			continue
		}
		if j > k {
			k = j
			break
		}
		// It began in an earlier bucket at first: that one gives it up.
		rise = max(rise, kept[j].Rise)
		kept[j].Rise, kept[j].Level, kept[j].From = 0, 0, time.Time{}
		break
	}
	if rise >= kept[k].Rise {
		kept[k].Rise, kept[k].Level, kept[k].From = rise, level, from
	}
	return Rises{Buckets: kept}
}

// Headroom is the RisePercentile of the rises of the buckets within
// maxRiseBuckets start-ups of now, the start-up going on left out: a
// rise does not size the headroom that is to absorb it. It is the
// highest rise only where that is within LoneRise times the next: of a
// hundred buckets or fewer the nearest rank of the 99th percentile is
// the highest, and of more the next, but a traffic whose bursts come
// near its highest rise again has bursts that high, and the next one
// can go past the rises the history holds. A rise seen once in the last
// hours, beyond LoneRise times every other (a step, a flash crowd, each
// one rise of the history, see Record), is not what the traffic shows
// at the percentile: the next sizes the headroom. Nor are the readings
// of the queue it left: while new tasks work it off, an interval's rate
// sets the minute's completions, which still hold the queue, against
// the interval's change of the pool and reads up to half again the
// arrivals, a rise that would keep the crowd's headroom for hours; the
// start-ups after the highest until that queue is worked off are left
// out. The start-up before it is not: on real traffic a crowd that rose
// over two start-ups was followed by a higher one within half an hour.
//
// The rises are taken at the rate the traffic holds: level, the rate the
// arrivals hold now, or the highest rate a rise of the last
// LevelStartups start-ups rose from, if higher. A rise that began from a
// higher rate (Level) counts for that rate's share of it, as a pool's
// bursts grow and shrink with its traffic: after a surge, or in the
// evening of a busy day, the rises of the busy hours would keep the
// capacity for them for the hours the history covers, on a traffic a
// quarter as large. A rise from a lower rate counts as it was: the bursts
// of a quiet hour are the least the traffic shows. At +Inf every rise
// counts as it was seen.
// ok is false while fewer than minRiseBuckets buckets are known.
func (r Rises) Headroom(now time.Time, width time.Duration, level float64) (float64, bool) {
	horizon := now.Add(-maxRiseBuckets * width)
	var known []RiseBucket
	for _, b := range r.Buckets {
		if b.Start.After(horizon) && !b.Start.After(now.Add(-width)) {
			known = append(known, b)
		}
	}
	if len(known) < minRiseBuckets {
		return 0, false
	}
	for _, b := range r.Buckets {
		if now.Sub(b.Start) <= LevelStartups*width {
			level = max(level, b.Level)
		}
	}
	// The start-ups after the highest rise until the queue it left is
	// worked off (its own, the new tasks', BacklogClearing of one more,
	// and the minute the completions are counted over) read that queue,
	// not the traffic: they are left out.
	top := known[0]
	for _, b := range known {
		if b.Rise > top.Rise {
			top = b
		}
	}
	cleared := top.Start.Add(time.Duration((2+BacklogClearing)*float64(width)) + CountWindow)
	var rises []float64
	for _, b := range known {
		if !b.Start.After(top.Start) || !b.Start.Before(cleared) {
			rise := b.Rise
			if b.Level > level {
				rise *= level / b.Level
			}
			rises = append(rises, rise)
		}
	}
	sort.Float64s(rises)
	n := len(rises)
	if n < 2 || rises[n-1] <= LoneRise*rises[n-2] {
		return rises[n-1], true
	}
	// The nearest rank: the smallest rise at or above the percentile,
	// below the lone highest.
	rank := int(math.Ceil(float64(RisePercentile)/100*float64(n))) - 1
	return rises[min(max(rank, 0), n-2)], true
}

// Served records service, the service time read at now, and perToken,
// the same per output token, in the bucket now falls in: Record's last,
// so it runs after Record. A value no reading could give is left out.
// It returns a new history and leaves r as it was.
func (r Rises) Served(now time.Time, service, perToken float64) Rises {
	n := len(r.Buckets)
	valid := func(v float64) bool { return v > 0 && !math.IsInf(v, 1) }
	if n == 0 || !valid(service) || !valid(perToken) || now.Before(r.Buckets[n-1].Start) {
		return r
	}
	kept := slices.Clone(r.Buckets)
	kept[n-1].Service = max(kept[n-1].Service, service)
	kept[n-1].PerToken = max(kept[n-1].PerToken, perToken)
	return Rises{Buckets: kept}
}

// BusyService is the BusyServicePercentile (the nearest rank) of the
// buckets' service times within maxRiseBuckets start-ups of now, the one
// going on among them, and the same of their service times per output
// token. ok is false while fewer than minRiseBuckets buckets read one.
func (r Rises) BusyService(now time.Time, width time.Duration) (service, perToken float64, ok bool) {
	horizon := now.Add(-maxRiseBuckets * width)
	var services, perTokens []float64
	for _, b := range r.Buckets {
		if b.Start.After(horizon) && !b.Start.After(now) && b.Service > 0 {
			services, perTokens = append(services, b.Service), append(perTokens, b.PerToken)
		}
	}
	if len(services) < minRiseBuckets {
		return 0, 0, false
	}
	rank := min(max(int(math.Ceil(BusyServicePercentile/100.0*float64(len(services))))-1, 0), len(services)-1)
	sort.Float64s(services)
	sort.Float64s(perTokens)
	return services[rank], perTokens[rank], true
}

// riseWithin is how far rates[len-1] rose above the lowest rate of the
// window before it (low), in the rates that fill the slots
// (RateSample.OverService), when that rise began: the first reading
// after the lowest that is halfway up it, and when the lowest was read
// (from). A step's readings all give the time of the step, a steady
// climb's the middle of the window.
//
// A reading is never lower than its minute's rate (RateSample.Rate)
// there: derived from the completions, the rate of one interval is the
// minute's completions plus the interval's growth of the pool, and while
// a queue drains (the new tasks of a flash crowd clearing its backlog)
// the pool shrinks at the rate the tasks complete now, which the minute's
// completions show only later. That interval reads far fewer arrivals
// than came, and a rise measured from it is one the traffic never made.
// A burst's end still shows, a minute late.
//
// fromIdle says whether the pool held no request (RateSample.InPool
// below 1) at the lowest reading or within the counting window
// (CountWindow) before it: the rise is traffic starting (the day's first
// requests, a client switched on), not a burst on top of a load. A rate
// counted over a window that reaches back into idle is lower than the
// traffic, and a rise from it is the start too.
func riseWithin(rates []RateSample, now time.Time, window time.Duration) (rise, low float64, began, from time.Time, fromIdle bool) {
	if len(rates) == 0 {
		return 0, 0, now, now, false
	}
	last := rates[len(rates)-1].OverService
	low = last
	at := len(rates) - 1
	for i, s := range rates {
		if r := max(s.OverService, s.Rate); now.Sub(s.Time) <= window && r < low {
			low, at = r, i
		}
	}
	for _, s := range rates[:at+1] {
		fromIdle = fromIdle || (s.InPool < 1 && !s.Time.Before(rates[at].Time.Add(-CountWindow)))
	}
	rise, began, from = last-low, rates[len(rates)-1].Time, rates[at].Time
	for _, s := range rates[at:] {
		if s.OverService >= low+rise/2 {
			return rise, low, s.Time, from, fromIdle
		}
	}
	return rise, low, began, from, fromIdle
}

// sustainedRate is the lowest rate within window of now: the level the
// arrivals have held for at least that long.
func sustainedRate(rates []RateSample, now time.Time, window time.Duration) float64 {
	low := math.Inf(1)
	for _, s := range rates {
		if now.Sub(s.Time) <= window {
			low = min(low, s.Rate)
		}
	}
	if math.IsInf(low, 1) {
		return 0
	}
	return low
}

// isJump says whether rate, read at now, is a step: it more than doubles
// every rate of the window before it, or falls below half the reading
// just before it (a burst ending). A trend line or a dispersion through a
// step would read a slope or a burstiness the traffic on either side of
// it does not have.
func isJump(rates []RateSample, now time.Time, window time.Duration, rate float64) bool {
	var high, prev float64
	for _, s := range rates {
		if s.Time.Before(now) && now.Sub(s.Time) <= window {
			high, prev = max(high, s.Rate), s.Rate
		}
	}
	return rate > 2*high || rate < prev/2
}
