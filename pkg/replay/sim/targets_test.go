package sim

import (
	"testing"
	"time"
)

// Twenty requests: the first k of each latency within any target, the
// rest far beyond it, so that a target's share is known exactly.
func outcomesFor(waitBad, ttftBad, itlBad, lost int) []Outcome {
	out := make([]Outcome, 20)
	for i := range out {
		o := Outcome{Started: true, Wait: 0, TTFT: 100 * time.Millisecond, ITL: 20 * time.Millisecond}
		if i < waitBad {
			o.Wait = time.Minute
		}
		if i < ttftBad {
			o.TTFT = time.Minute
		}
		if i < itlBad {
			o.ITL = time.Second
		}
		if i >= 20-lost {
			o.Failed = true
		}
		out[i] = o
	}
	return out
}

// measure's attainment is per stated target, over all requests with lost
// ones as misses; a row meets the SLO only if every stated target holds
// at the percentile.
func TestMeasureAttainmentPerTarget(t *testing.T) {
	all := SLOTargets{Wait: 10 * time.Second, TTFT: 2 * time.Second, ITL: 50 * time.Millisecond}
	for _, tc := range []struct {
		name                     string
		slo                      SLOTargets
		waitBad, ttftBad, itlBad int
		lost                     int
		want                     map[string]float64
		meets                    bool
	}{
		{name: "every target held", slo: all, want: map[string]float64{TargetWait: 1, TargetTTFT: 1, TargetITL: 1}, meets: true},
		{name: "one of 20 misses the TTFT: exactly p95", slo: all, ttftBad: 1, want: map[string]float64{TargetWait: 1, TargetTTFT: 0.95, TargetITL: 1}, meets: true},
		{name: "two miss the ITL: below p95", slo: all, itlBad: 2, want: map[string]float64{TargetWait: 1, TargetTTFT: 1, TargetITL: 0.90}, meets: false},
		{name: "two miss the ITL, not stated", slo: SLOTargets{Wait: 10 * time.Second, TTFT: 2 * time.Second}, itlBad: 2, want: map[string]float64{TargetWait: 1, TargetTTFT: 1}, meets: true},
		{name: "two miss the ITL at p90", slo: SLOTargets{ITL: 50 * time.Millisecond, Percentile: 90}, itlBad: 2, want: map[string]float64{TargetITL: 0.90}, meets: true},
		{name: "a lost request misses every target", slo: all, lost: 2, want: map[string]float64{TargetWait: 0.90, TargetTTFT: 0.90, TargetITL: 0.90}, meets: false},
		{name: "nothing stated: the wait's 10 s", slo: SLOTargets{}, waitBad: 1, want: map[string]float64{TargetWait: 0.95}, meets: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Measure(outcomesFor(tc.waitBad, tc.ttftBad, tc.itlBad, tc.lost), tc.slo)
			got := map[string]float64{}
			for _, a := range r.Attainment {
				got[a.Target] = a.Share
			}
			if len(got) != len(tc.want) {
				t.Errorf("attainment %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if g, ok := got[k]; !ok || g < v-1e-9 || g > v+1e-9 {
					t.Errorf("attainment of %s = %v, want %v", k, got[k], v)
				}
			}
			if r.MeetsSLO != tc.meets {
				t.Errorf("meets the SLO = %v, want %v", r.MeetsSLO, tc.meets)
			}
			if r.FailedRequests != tc.lost {
				t.Errorf("lost %d, want %d", r.FailedRequests, tc.lost)
			}
		})
	}
}

// The percentiles of TTFT and ITL are over the requests served; a
// request of one token has no gap and is left out of the ITL's.
func TestMeasurePercentiles(t *testing.T) {
	var out []Outcome
	for i := 1; i <= 100; i++ {
		out = append(out, Outcome{Started: true, TTFT: time.Duration(i) * time.Second, ITL: time.Duration(i) * time.Millisecond})
	}
	out = append(out, Outcome{Started: true, TTFT: time.Second}) // one token
	r := Measure(out, SLOTargets{})
	if r.ITLP50 != 0.050 || r.ITLP95 != 0.095 || r.ITLP99 != 0.099 {
		t.Errorf("ITL percentiles %v %v %v, want 50, 95, 99 ms", r.ITLP50, r.ITLP95, r.ITLP99)
	}
	if r.TTFTP99 != 99 || r.TTFTP50 != 50 {
		t.Errorf("TTFT p50 %v p99 %v, want 50 and 99 (101 requests, two of 1 s)", r.TTFTP50, r.TTFTP99)
	}
}
