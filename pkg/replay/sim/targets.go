package sim

import (
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"
)

// SLOTargets are the latencies users state, each to hold at Percentile
// of all requests: the wait for a worker, the time to first token and the
// inter-token latency (a request's mean gap between tokens). A zero
// target is not stated. A lost request misses every target, as a user
// who got no answer would count it.
type SLOTargets struct {
	Wait, TTFT, ITL time.Duration
	// Percentile is the share of requests (0-100) each target must hold
	// for; 0 means DefaultSLOPercentile.
	Percentile float64
}

// DefaultSLOPercentile is the percentile a target holds at unless told.
const DefaultSLOPercentile = 95

// DefaultWaitSLO is the wait target when no target is stated.
const DefaultWaitSLO = 10 * time.Second

// WithDefaults gives the targets their percentile, and a wait target
// when none is stated, so that every row has a target to meet.
func (t SLOTargets) WithDefaults() SLOTargets {
	if t.Percentile <= 0 {
		t.Percentile = DefaultSLOPercentile
	}
	if t.Wait <= 0 && t.TTFT <= 0 && t.ITL <= 0 {
		t.Wait = DefaultWaitSLO
	}
	return t
}

// Validate reports targets no request could be held to.
func (t SLOTargets) Validate() error {
	if t.Wait < 0 || t.TTFT < 0 || t.ITL < 0 {
		return fmt.Errorf("SLO targets must not be negative: wait %v, TTFT %v, ITL %v", t.Wait, t.TTFT, t.ITL)
	}
	if t.Percentile < 0 || t.Percentile > 100 {
		return fmt.Errorf("SLO percentile must be within 0-100, got %v", t.Percentile)
	}
	return nil
}

// Target names, as reports key the attainment by them.
const (
	TargetWait = "wait"
	TargetTTFT = "ttft"
	TargetITL  = "itl"
)

// Target is one stated target and how to read it from an outcome.
type Target struct {
	// Name is TargetWait, TargetTTFT or TargetITL.
	Name  string
	Limit time.Duration
	of    func(Outcome) time.Duration
}

// Stated are the targets given, in a fixed order: the columns of a table.
func (t SLOTargets) Stated() []Target {
	var out []Target
	if t.Wait > 0 {
		out = append(out, Target{TargetWait, t.Wait, func(o Outcome) time.Duration { return o.Wait }})
	}
	if t.TTFT > 0 {
		out = append(out, Target{TargetTTFT, t.TTFT, func(o Outcome) time.Duration { return o.TTFT }})
	}
	if t.ITL > 0 {
		out = append(out, Target{TargetITL, t.ITL, func(o Outcome) time.Duration { return o.ITL }})
	}
	return out
}

// String names the targets as a table heading does: "p95 wait ≤ 10s,
// TTFT ≤ 2s".
func (t SLOTargets) String() string {
	t = t.WithDefaults()
	var parts []string
	for _, g := range t.Stated() {
		parts = append(parts, fmt.Sprintf("%s ≤ %v", g.Label(), g.Limit))
	}
	return fmt.Sprintf("%s %s", t.PercentileLabel(), strings.Join(parts, ", "))
}

// PercentileLabel is how a table names the SLO's percentile: "p95".
func (t SLOTargets) PercentileLabel() string {
	return "p" + strings.TrimSuffix(fmt.Sprintf("%g", t.Percentile), ".0")
}

// Label is how a table names the target.
func (g Target) Label() string {
	switch g.Name {
	case TargetTTFT:
		return "TTFT"
	case TargetITL:
		return "ITL"
	}
	return g.Name
}

// Attainment is the share of requests within one target.
type Attainment struct {
	Target string  `json:"target"`
	Limit  float64 `json:"limit_s"`
	Share  float64 `json:"share"`
}

// meets reports whether share holds the target at percentile: at least
// that share of the requests within it, which is the percentile's
// nearest-rank value within it, lost requests ranked last.
func meets(share, percentile float64) bool { return share >= percentile/100-1e-12 }

// Measure computes the latency figures of a replay from every request's
// outcome: the percentiles over the requests a worker took, and each
// stated target's attainment over all of them.
func Measure(outcomes []Outcome, slo SLOTargets) Result {
	return measure(len(outcomes), slices.Values(outcomes), slo)
}

// measure is Measure over n outcomes given one at a time.
func measure(n int, outcomes iter.Seq[Outcome], slo SLOTargets) Result {
	slo = slo.WithDefaults()
	var r Result
	waits := make([]float64, 0, n)
	ttfts := make([]float64, 0, n)
	itls := make([]float64, 0, n)
	targets := slo.Stated()
	within := make([]int, len(targets))
	total := 0
	for o := range outcomes {
		total++
		if o.Failed {
			r.FailedRequests++
		}
		if !o.Started {
			continue
		}
		waits = append(waits, o.Wait.Seconds())
		ttfts = append(ttfts, o.TTFT.Seconds())
		if o.ITL > 0 {
			itls = append(itls, o.ITL.Seconds())
		}
		if o.Failed {
			continue
		}
		for i, t := range targets {
			if t.of(o) <= t.Limit {
				within[i]++
			}
		}
	}
	for _, p := range []struct {
		values        []float64
		p50, p95, p99 *float64
	}{
		{waits, &r.WaitP50, &r.WaitP95, &r.WaitP99},
		{ttfts, &r.TTFTP50, &r.TTFTP95, &r.TTFTP99},
		{itls, &r.ITLP50, &r.ITLP95, &r.ITLP99},
	} {
		q := percentiles(p.values, 0.50, 0.95, 0.99)
		*p.p50, *p.p95, *p.p99 = q[0], q[1], q[2]
	}
	r.MeetsSLO = true
	r.SLOAttainment = 1
	for i, t := range targets {
		share := 0.0
		if total > 0 {
			share = float64(within[i]) / float64(total)
		} else {
			share = 1
		}
		r.Attainment = append(r.Attainment, Attainment{Target: t.Name, Limit: t.Limit.Seconds(), Share: share})
		r.SLOAttainment = min(r.SLOAttainment, share)
		r.MeetsSLO = r.MeetsSLO && meets(share, slo.Percentile)
	}
	return r
}
