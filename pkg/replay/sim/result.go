package sim

import (
	"math"
	"math/rand/v2"
)

// Result is what one policy cost and what its requests saw.
type Result struct {
	Name string `json:"name"`
	// GPUHours counts every worker from creation to removal, starting and
	// draining included.
	GPUHours float64 `json:"gpu_hours"`
	// WaitP50, WaitP95 and WaitP99 are percentiles of the time requests
	// waited for a worker, in seconds, over the requests that got one;
	// TTFT… of the time to first token, over the same; ITL… of each
	// request's mean gap between tokens, over those with two tokens or
	// more.
	WaitP50 float64 `json:"wait_p50_s"`
	WaitP95 float64 `json:"wait_p95_s"`
	WaitP99 float64 `json:"wait_p99_s"`
	TTFTP50 float64 `json:"ttft_p50_s"`
	TTFTP95 float64 `json:"ttft_p95_s"`
	TTFTP99 float64 `json:"ttft_p99_s"`
	ITLP50  float64 `json:"itl_p50_s"`
	ITLP95  float64 `json:"itl_p95_s"`
	ITLP99  float64 `json:"itl_p99_s"`
	// Attainment is, per stated target, the share of all requests within
	// it and not lost.
	Attainment []Attainment `json:"attainment"`
	// SLOAttainment is the lowest of Attainment's shares.
	SLOAttainment float64 `json:"slo_attainment"`
	// MeetsSLO is whether every stated target holds at the SLO's
	// percentile.
	MeetsSLO bool `json:"meets_slo"`
	// BelowOracleSLO flags a row that meets the SLO on fewer GPU-hours
	// than the oracle-slo schedule: a finding to explain, as that
	// schedule is the fewest workers found to meet the SLO interval by
	// interval.
	BelowOracleSLO bool `json:"below_oracle_slo,omitempty"`
	// FailedRequests were lost with a worker removed while serving them, or
	// never served before the replay ended.
	FailedRequests int `json:"failed_requests"`
	// ScaleEvents counts changes of the count asked for.
	ScaleEvents int `json:"scale_events"`
	// PeakReplicas is the most workers alive at once.
	PeakReplicas int `json:"peak_replicas"`
	// NodeHours counts every node from its launch to its removal, when
	// the replay models nodes (NodeModel); PeakNodes is the most nodes up
	// or launching at once.
	NodeHours float64 `json:"node_hours,omitempty"`
	PeakNodes int     `json:"peak_nodes,omitempty"`
	// Evictions counts the workers the node autoscaler's consolidation
	// evicted.
	Evictions int `json:"evictions,omitempty"`
	// Note says how the row was set up where its name does not: the
	// target a searched row plays at.
	Note   string   `json:"note,omitempty"`
	Series []Sample `json:"-"`
}

// percentiles are the nearest-rank percentiles of values at qs (0 to 1,
// ascending), reordering values: a selection, not a sort, as a day of a
// large pool measures tens of millions of requests.
func percentiles(values []float64, qs ...float64) []float64 {
	out := make([]float64, len(qs))
	if len(values) == 0 {
		return out
	}
	from := 0 // values[from:] hold every rank at or after the last selected
	for i, q := range qs {
		k := min(max(int(math.Ceil(q*float64(len(values))))-1, from), len(values)-1)
		out[i] = nth(values[from:], k-from)
		from = k
	}
	return out
}

// nth is the k-th smallest of v (from 0), which it leaves at v[k] with
// none larger before it and none smaller after it: a quickselect with a
// three-way partition, so that the many equal waits of a pool that keeps
// up cost one pass, and pivots drawn at random from a fixed seed.
func nth(v []float64, k int) float64 {
	rng := rand.New(rand.NewPCG(uint64(len(v)), uint64(k)))
	lo, hi := 0, len(v) // k is within [lo, hi)
	for hi-lo > 1 {
		pivot := v[lo+rng.IntN(hi-lo)]
		lt, i, gt := lo, lo, hi // [lo,lt) < pivot, [lt,i) == pivot, [gt,hi) > pivot
		for i < gt {
			switch {
			case v[i] < pivot:
				v[lt], v[i] = v[i], v[lt]
				lt++
				i++
			case v[i] > pivot:
				gt--
				v[i], v[gt] = v[gt], v[i]
			default:
				i++
			}
		}
		switch {
		case k < lt:
			hi = lt
		case k >= gt:
			lo = gt
		default:
			return pivot
		}
	}
	return v[k]
}
