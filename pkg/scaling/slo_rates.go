package scaling

import (
	"time"

	"github.com/gputask/gputask-controller/pkg/queueing"
)

// The SLO policy's history of arrival rates (QueueState.Rates): how long
// it is kept, and the arrivals, counts and trend read from it.

// RateSample is the arrival rate measured at Time: Rate over the window
// the source counts in (CountWindow), the rate the trend, the dispersion
// and the sustained level are read from; Recent over the last interval;
// OverService the mean of the interval rates over the last service time
// (serviceIntervals), the rate that fills the slots, whose rises size the
// burst headroom (Recent and OverService are Rate where arrivals are
// counted); and InPool the requests running and waiting then.
type RateSample struct {
	Time        time.Time
	Rate        float64
	Recent      float64
	OverService float64
	InPool      float64
}

// rateWindow is how far back the arrival rates are kept: enough intervals
// for their dispersion, and two start-up times for their trend.
func rateWindow(in Inputs) time.Duration {
	return max(2*in.Startup, 20*in.Interval) + jitterOf(in)
}

// jitterOf is how much later than whole intervals a cluster's evaluations
// may come: the rates are read an interval apart, give or take
// milliseconds, so a window of whole intervals widened by it holds the
// same readings in a cluster as in exact time, rather than losing its
// oldest whenever an evaluation comes a millisecond late.
func jitterOf(in Inputs) time.Duration { return in.Interval / 4 }

func appendRate(rates []RateSample, sample RateSample, window time.Duration) []RateSample {
	now := sample.Time
	kept := make([]RateSample, 0, len(rates)+1)
	for _, r := range rates {
		if r.Time.Before(now) && now.Sub(r.Time) <= window {
			kept = append(kept, r)
		}
	}
	kept = append(kept, sample)
	if len(kept) > maxRateSamples {
		kept = kept[len(kept)-maxRateSamples:]
	}
	return kept
}

// CountWindow is the window of the rate that the Arrivals or Completions
// query reads, the [1m] of the queries the docs give: the pool's growth
// is taken over the same window, so that the requests finished in it plus
// the growth are the requests that arrived in it, however the pool's
// completions move within the window.
const CountWindow = time.Minute

// arrivalsFromCompletions is the arrival rate, where only completions are
// counted, over the window they are counted in (CountWindow) and over
// the interval since the last reading: the completions plus the pool's
// growth over each. The window's is exact; the interval's sets a
// minute's completions against an interval's growth, and so it swings
// while the completions move within the minute (a client of long prompts
// filling the KV caches, a queue drained by new tasks), but it shows a
// step up an interval after it comes, and the rises of a burst shorter
// than the window, which the window's mean smooths away.
func arrivalsFromCompletions(rates []RateSample, now time.Time, jitter time.Duration, completions, inPool float64) (window, recent float64) {
	before, span := countedSince(rates, now, CountWindow, jitter)
	window = queueing.ArrivalsFromCompletions(completions, inPool, before, span)
	before, span = countedSince(rates, now, 0, 0)
	return window, queueing.ArrivalsFromCompletions(completions, inPool, before, span)
}

// serviceIntervals is how many intervals the rate that fills the slots is
// the mean over: the last service time's (the one learned so far), between
// one interval and CountWindow. By Little's law the requests in flight are
// those that arrived within the last service time, so a rise shorter than
// it fills the slots for part of one only: among minute-long requests a
// 15 s burst of arrivals holds a quarter of the slots a rise of its height
// that lasts would. One interval while the service time is unknown.
func serviceIntervals(little queueing.Little, interval time.Duration) float64 {
	service, ok := little.ServiceTime()
	if !ok || interval <= 0 {
		return 1
	}
	return max(1, min(service, CountWindow.Seconds())/interval.Seconds())
}

// meanOfLast is the mean of recent and the interval rates of the readings
// before it over the last n intervals, as many as there are: each reading
// weighs its interval's share of them, the oldest a part where n is not
// whole, so that the mean moves little when the service time does.
func meanOfLast(rates []RateSample, recent, n float64) float64 {
	sum, weight := recent, 1.0
	for i := len(rates) - 1; i >= 0 && weight < n; i-- {
		w := min(1, n-weight)
		sum += w * rates[i].Recent
		weight += w
	}
	return sum / weight
}

// countedSince is the requests in the pool at the reading one window
// before now, give or take jitter, and the seconds since it; without such
// a reading (fewer readings than the window, as in the first minute after
// a start, or readings further apart than it), at the last reading before
// now, as with a window of 0. span is 0 without a reading before now.
func countedSince(rates []RateSample, now time.Time, window, jitter time.Duration) (inPool, span float64) {
	for _, r := range rates {
		if !r.Time.Before(now) {
			break
		}
		inPool, span = r.InPool, now.Sub(r.Time).Seconds()
		if age := now.Sub(r.Time); window > 0 && age >= window-jitter && age <= window+jitter {
			break
		}
	}
	return inPool, span
}

// ratesSince are the rates read at since or later.
func ratesSince(rates []RateSample, since time.Time) []RateSample {
	for i, r := range rates {
		if !r.Time.Before(since) {
			return rates[i:]
		}
	}
	return nil
}

// countsOf turns the rates into arrival counts per interval between
// readings, the unit in which Poisson arrivals have an index of dispersion
// of 1.
func countsOf(rates []RateSample) []float64 {
	counts := make([]float64, 0, len(rates))
	for i := 1; i < len(rates); i++ {
		counts = append(counts, rates[i].Rate*rates[i].Time.Sub(rates[i-1].Time).Seconds())
	}
	return counts
}

// sustainWindow is how long a rise beyond the burst headroom must last to
// be followed: a quarter of a start-up (see sloStep).
func sustainWindow(in Inputs) time.Duration { return in.Startup/4 + jitterOf(in) }

// trendWindow is how far back the trend is read.
func trendWindow(in Inputs) time.Duration {
	return max(in.Startup, 3*in.Interval) + jitterOf(in)
}

// trendSamples are the rates within window of now and not before since,
// in seconds before now.
func trendSamples(rates []RateSample, now time.Time, window time.Duration, since time.Time) []queueing.Sample {
	var out []queueing.Sample
	for _, r := range rates {
		if now.Sub(r.Time) <= window && !r.Time.Before(since) {
			out = append(out, queueing.Sample{T: -now.Sub(r.Time).Seconds(), Rate: r.Rate})
		}
	}
	return out
}
