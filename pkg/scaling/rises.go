package scaling

import (
	"math"
	"sort"
	"time"
)

// Rises is how far the arrival rate rose within one start-up, over the
// last hours: for each start-up-long bucket, the highest rise seen in it,
// and the highest rate. A rise shorter than a start-up cannot be served by
// the tasks it would add, so the SLO policy keeps headroom for the rises
// this history shows instead, up to the rates it shows. It is bounded: at
// most maxRiseBuckets buckets, none older than maxRiseBuckets start-ups.
type Rises struct {
	Buckets []RiseBucket
}

// RiseBucket is the highest rise and the highest rate, in requests per
// second, of the readings from Start to Start plus one start-up.
type RiseBucket struct {
	Start time.Time
	Rise  float64
	High  float64
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
)

// Record adds a rise to rate seen at now, in buckets width long (the
// start-up time), and forgets what is older than maxRiseBuckets buckets.
// It returns a new history and leaves r as it was.
func (r Rises) Record(now time.Time, rise, rate float64, width time.Duration) Rises {
	if !(rise >= 0) || math.IsInf(rise, 1) || !(rate >= 0) || math.IsInf(rate, 1) || width <= 0 {
		return r
	}
	horizon := now.Add(-maxRiseBuckets * width)
	kept := make([]RiseBucket, 0, min(len(r.Buckets)+1, maxRiseBuckets))
	for _, b := range r.Buckets {
		if b.Start.After(horizon) && !b.Start.After(now) {
			kept = append(kept, b)
		}
	}
	if n := len(kept); n > 0 && now.Before(kept[n-1].Start.Add(width)) {
		kept[n-1].Rise, kept[n-1].High = max(kept[n-1].Rise, rise), max(kept[n-1].High, rate)
	} else {
		kept = append(kept, RiseBucket{Start: now, Rise: rise, High: rate})
	}
	if len(kept) > maxRiseBuckets {
		kept = kept[len(kept)-maxRiseBuckets:]
	}
	return Rises{Buckets: kept}
}

// Headroom is the RisePercentile of the rises of the buckets within
// maxRiseBuckets start-ups of now, the start-up going on left out: a
// rise does not size the headroom that is to absorb it. ok is false while
// fewer than minRiseBuckets buckets are known.
func (r Rises) Headroom(now time.Time, width time.Duration) (float64, bool) {
	return r.percentile(now, width, func(b RiseBucket) float64 { return b.Rise })
}

// Level is the RisePercentile of the highest rates of the same buckets as
// Headroom: the rate the traffic of the last hours rose to, its bursts
// included. ok is false while fewer than minRiseBuckets buckets are known.
func (r Rises) Level(now time.Time, width time.Duration) (float64, bool) {
	return r.percentile(now, width, func(b RiseBucket) float64 { return b.High })
}

func (r Rises) percentile(now time.Time, width time.Duration, of func(RiseBucket) float64) (float64, bool) {
	horizon := now.Add(-maxRiseBuckets * width)
	var values []float64
	for _, b := range r.Buckets {
		if b.Start.After(horizon) && !b.Start.After(now.Add(-width)) {
			values = append(values, of(b))
		}
	}
	if len(values) < minRiseBuckets {
		return 0, false
	}
	sort.Float64s(values)
	// The nearest rank: the smallest value at or above the percentile.
	rank := int(math.Ceil(float64(RisePercentile)/100*float64(len(values)))) - 1
	return values[min(max(rank, 0), len(values)-1)], true
}

// riseWithin is how far rates[len-1] rose above the lowest rate of the
// window before it, in the rates that fill the slots
// (RateSample.OverService).
func riseWithin(rates []RateSample, now time.Time, window time.Duration) float64 {
	if len(rates) == 0 {
		return 0
	}
	last := rates[len(rates)-1].OverService
	low := last
	for _, s := range rates {
		if now.Sub(s.Time) <= window {
			low = min(low, s.OverService)
		}
	}
	return last - low
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
