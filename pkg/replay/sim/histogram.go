package sim

import (
	"math"
	"sort"
)

// The bucket bounds (le, in seconds) of vLLM's latency histograms
// (vllm/v1/metrics/loggers.py). A percentile that a policy reads comes
// from these buckets, as histogram_quantile computes it over a cluster's
// metrics, never from the exact latencies the replay knows.
var (
	// VLLMQueueTimeBuckets are vllm:request_queue_time_seconds's (and
	// vllm:e2e_request_latency_seconds's).
	VLLMQueueTimeBuckets = []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}
	// VLLMTTFTBuckets are vllm:time_to_first_token_seconds's.
	VLLMTTFTBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}
	// VLLMITLBuckets are vllm:inter_token_latency_seconds's.
	VLLMITLBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
	// VLLMTokenBuckets are vllm:request_generation_tokens's and
	// vllm:request_prompt_tokens's (in tokens): 1, 2, 5 and their powers
	// of ten up to a 128k context.
	VLLMTokenBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}
)

// HistogramQuantile is what Prometheus's histogram_quantile(q, …) gives
// for values observed into a histogram of bounds (ascending upper bounds,
// +Inf implied): it finds the bucket that holds the rank q × count and
// interpolates linearly within it, from the bucket's lower bound (0 for
// the first); a rank in the +Inf bucket gives the highest finite bound.
// ok is false with no observation, where histogram_quantile gives NaN.
// Values are in the bounds' unit.
func HistogramQuantile(q float64, bounds []float64, values []float64) (v float64, ok bool) {
	if len(values) == 0 || len(bounds) == 0 {
		return math.NaN(), false
	}
	counts := make([]float64, len(bounds)+1)
	for _, x := range values {
		counts[sort.SearchFloat64s(bounds, x)]++ // the first bound >= x: le is inclusive
	}
	return HistogramQuantileCounts(q, bounds, counts)
}

// HistogramQuantileCounts is HistogramQuantile over the observations'
// counts per bucket (not cumulative; counts[len(bounds)] is the +Inf
// bucket's), as the increases of a histogram's buckets over a window give
// them: what the pool keeps instead of every value it observed. ok is
// false when the counts sum to 0.
func HistogramQuantileCounts(q float64, bounds []float64, counts []float64) (v float64, ok bool) {
	if len(bounds) == 0 || len(counts) != len(bounds)+1 {
		return math.NaN(), false
	}
	// Cumulative counts per bound, as the le="…" series hold them; the
	// last is +Inf.
	cum := make([]float64, len(counts))
	total := 0.0
	for i, c := range counts {
		total += c
		cum[i] = total
	}
	if !(total > 0) {
		return math.NaN(), false
	}
	switch {
	case q < 0:
		return math.Inf(-1), true
	case q > 1:
		return math.Inf(1), true
	}
	counts = cum
	rank := q * counts[len(counts)-1]
	b := sort.Search(len(counts)-1, func(i int) bool { return counts[i] >= rank })
	if b == len(counts)-1 {
		return bounds[len(bounds)-1], true
	}
	if b == 0 && bounds[0] <= 0 {
		return bounds[0], true
	}
	start, end, count := 0.0, bounds[b], counts[b]
	if b > 0 {
		start = bounds[b-1]
		count -= counts[b-1]
		rank -= counts[b-1]
	}
	return start + (end-start)*(rank/count), true
}
