package sim

import (
	"sort"
	"time"
)

// The metrics a source reads of the pool: fresh, or as a Prometheus
// scrape every interval holds them, with the rates over RateWindow.

// RateWindow is the window of Observation's rates: the [1m] of the
// rate() that docs/autoscaling.md's vLLM metrics use.
const RateWindow = time.Minute

// counterSample is the pool's request counters at one scrape.
type counterSample struct {
	at                 time.Time
	arrived, completed int
	// The token and inter-token latency counters (Observation's totals).
	prompt, generation, itlSum, itlCount float64
}

// SetScrape puts a Prometheus scrape every interval in front of the
// metrics (see Metrics); 0 reads them fresh. The scrapes fall half an
// interval after the first arrival and every interval on, so that they
// sit midway between the syncs of a policy with the same period, not on
// them: a value read is then half an interval old, on average what an
// unaligned scrape gives.
func (p *Pool) SetScrape(interval time.Duration) {
	p.scrape = max(interval, 0)
	p.nextScrape = p.start.Add(p.scrape / 2)
	// The scrape taken here, at the trace's start, holds the counters at
	// 0: the first scrapes' rates cover the time elapsed since, as
	// Observe's do.
	p.counters, p.vllm.hist = nil, nil
	p.scraped = p.scrapeNow()
}

// FollowScrapes makes the pool's scrapes the ones Scrape takes, at the
// times a real Prometheus scrapes a server of the pool's metrics, in place
// of one every interval: a model kept in step with a cluster then reads
// the samples the cluster's Prometheus holds.
func (p *Pool) FollowScrapes() { p.followed = true }

// Scrape takes a scrape of the pool as it is now, after SetScrape and
// FollowScrapes.
func (p *Pool) Scrape() { p.scraped = p.scrapeNow() }

// Metrics is what a metrics source serves now: the workers as they are
// with a fresh read, or as they were at the last scrape, with the rates
// and the TTFT histogram over the scrapes within their windows.
//
// Prometheus takes a window back from the query's time. The pool's own
// scrapes fall midway between reads of the same period, so that the
// window back from the last scrape holds the same samples, and the
// sample of the trace's start stands for the scrapes before it; a pool
// that follows a real Prometheus's scrapes (FollowScrapes), whose times
// vary by milliseconds, takes the window back from now, as the query
// does.
func (p *Pool) Metrics() Observation {
	if p.scrape <= 0 {
		o := p.Observe()
		o.Started = p.recentWaits()
		return o
	}
	end := p.scrapedAt
	if p.followed {
		end = p.now
	}
	o := p.scraped
	p.scrapedRates(&o, end)
	o.TTFT = p.scrapedTTFT(end)
	return o
}

// recentWaits are the waits of the requests that got a slot within the
// last WaitWindow.
func (p *Pool) recentWaits() []time.Duration {
	from := p.now.Add(-WaitWindow)
	i := sort.Search(len(p.startedAt), func(i int) bool { return p.startedAt[i].After(from) })
	return p.startWaits[i:len(p.startWaits):len(p.startWaits)]
}

// scrapeUntil takes the scrapes due before t (or at t, when inclusive),
// each of the pool as it was at its time.
func (p *Pool) scrapeUntil(t time.Time, inclusive bool) {
	for p.scrape > 0 && !p.followed && (p.nextScrape.Before(t) || inclusive && p.nextScrape.Equal(t)) {
		if p.nextScrape.After(p.now) {
			p.now = p.nextScrape
		}
		p.scraped = p.scrapeNow()
		p.nextScrape = p.nextScrape.Add(p.scrape)
	}
}

// scrapeNow is one scrape: the gauges as they are, and the request and
// token counters and the TTFT histogram as samples for the rates that
// Metrics reads.
func (p *Pool) scrapeNow() Observation {
	o := p.Observe()
	o.Started = p.recentWaits()
	p.counters = append(p.counters, counterSample{at: p.now, arrived: p.next, completed: p.completed(),
		prompt: o.PromptTokensTotal, generation: o.GenerationTokensTotal, itlSum: o.ITLSumTotal, itlCount: o.ITLCountTotal})
	p.vllm.hist = append(p.vllm.hist, histSample{at: p.now, buckets: p.vllm.total})
	p.scrapedAt = p.now
	// The rates as of the scrape leave out the samples that no later
	// read's window holds.
	p.scrapedRates(&o, p.now)
	o.TTFT = p.scrapedTTFT(p.now)
	return o
}

// scrapedRates sets o's rates from the scrapes within RateWindow before
// end, as Prometheus's rate() takes the increase between the first and
// the last sample in its window over the time between them (0 until there
// are two).
func (p *Pool) scrapedRates(o *Observation, end time.Time) {
	drop := 0
	for drop < len(p.counters) && !p.counters[drop].at.After(end.Add(-RateWindow)) {
		drop++
	}
	p.counters = p.counters[drop:]
	o.Arrivals, o.Completions = 0, 0
	o.PromptTokens, o.GenerationTokens, o.ITLSum, o.ITLCount = 0, 0, 0, 0
	if len(p.counters) == 0 {
		return
	}
	if first, last := p.counters[0], p.counters[len(p.counters)-1]; last.at.After(first.at) {
		span := last.at.Sub(first.at).Seconds()
		o.Arrivals = float64(last.arrived-first.arrived) / span
		o.Completions = float64(last.completed-first.completed) / span
		o.PromptTokens = (last.prompt - first.prompt) / span
		o.GenerationTokens = (last.generation - first.generation) / span
		o.ITLSum, o.ITLCount = (last.itlSum-first.itlSum)/span, (last.itlCount-first.itlCount)/span
	}
}
