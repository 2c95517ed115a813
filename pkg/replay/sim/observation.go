package sim

import (
	"fmt"
	"time"
)

// LoadKind is how the modelled backend computes its load index.
type LoadKind string

const (
	// LoadDemand is requests in flight plus waiting, over the slots of the
	// Ready workers that take work.
	LoadDemand LoadKind = "demand"
	// LoadUtilization is requests in flight over those slots.
	LoadUtilization LoadKind = "utilization"
)

// ParseLoadKind reads --load.
func ParseLoadKind(s string) (LoadKind, error) {
	switch LoadKind(s) {
	case LoadDemand, LoadUtilization:
		return LoadKind(s), nil
	}
	return "", fmt.Errorf("unknown load index %q: want demand or utilization", s)
}

// Observation is what the modelled backend knows at one moment.
type Observation struct {
	// InFlight and Waiting count requests on the serving (Ready, not
	// draining) workers and in the queue.
	InFlight, Waiting int
	// Serving counts the Ready workers that take requests; Starting the
	// ones that are not Ready yet; Draining the ones that finish their work
	// before they go.
	Serving, Starting, Draining int
	// Concurrency is the slots of one worker.
	Concurrency int
	// Running counts every request in flight, on draining and deleted
	// workers that still finish theirs too: vLLM's num_requests_running
	// summed over every pod that still serves.
	Running int
	// Arrivals and Completions are the requests per second that arrived
	// and that finished (vLLM's request_success_total: a request lost
	// with its worker is not one) over the last RateWindow, as a
	// Prometheus rate(...[1m]) gives them.
	Arrivals, Completions float64
	// Arrived and Completed count the requests that arrived and that
	// finished since the trace's start: the counters behind the rates.
	Arrived, Completed int
	// Started are the waits of the requests that got a slot within the
	// last WaitWindow, in the order they did: what vLLM's
	// request_queue_time_seconds histogram holds for
	// histogram_quantile(q, rate(...[5m])). Shared with the pool: read
	// only.
	Started []time.Duration

	// TTFT is the time to first token of the requests whose first token
	// came within the last WaitWindow, by vLLM's TTFT bucket: the
	// increase of vllm:time_to_first_token_seconds_bucket that
	// histogram_quantile(q, rate(...[5m])) reads (TTFTPercentile).
	TTFT TTFTBuckets
	// ITLSum and ITLCount are rate(vllm:inter_token_latency_seconds_sum
	// [1m]) and _count's: the gaps between output tokens, in seconds, and
	// how many there were, per second over RateWindow (InterTokenLatency).
	ITLSum, ITLCount float64
	// PromptTokens and GenerationTokens are rate(vllm:prompt_tokens_total
	// [1m]) and rate(vllm:generation_tokens_total[1m]): tokens per second
	// over RateWindow. 0 when the trace has no token counts.
	PromptTokens, GenerationTokens float64
	// The counters behind those rates, since the trace's start.
	PromptTokensTotal, GenerationTokensTotal, ITLSumTotal, ITLCountTotal float64
	// KVCacheUsage is avg(vllm:kv_cache_usage_perc) over the serving
	// workers, 0 to 1, valid when KVCacheKnown (see Pool.kvCacheUsage).
	KVCacheUsage float64
	KVCacheKnown bool
	// Outputs and Prompts are the output and prompt tokens of the
	// requests that finished within the last WaitWindow, by vLLM's
	// bucket: the increase of vllm:request_generation_tokens_bucket and
	// vllm:request_prompt_tokens_bucket that histogram_quantile(0.5,
	// rate(...[5m])) reads (GenerationTokensMedian, PromptTokensMedian).
	Outputs, Prompts TokenBuckets
}

// GenerationTokensMedian and PromptTokensMedian are the median output and
// prompt tokens of the requests that finished within the window, as
// histogram_quantile gives them from Outputs' and Prompts' buckets. ok is
// false when none finished.
func (o Observation) GenerationTokensMedian() (tokens float64, ok bool) {
	return tokensMedian(o.Outputs)
}

func (o Observation) PromptTokensMedian() (tokens float64, ok bool) { return tokensMedian(o.Prompts) }

func tokensMedian(b TokenBuckets) (float64, bool) {
	v, ok := HistogramQuantileCounts(0.5, VLLMTokenBuckets, b[:])
	if !ok {
		return 0, false
	}
	return v, true
}

// TTFTPercentile is the TTFT at percentile (0-100), in seconds, as
// histogram_quantile gives it from TTFT's buckets. ok is false when no
// first token came within the window, where histogram_quantile gives NaN.
// Like the other readings of the roles, it is the float a query answers,
// not a Duration, which would cut it to the nanosecond.
func (o Observation) TTFTPercentile(percentile float64) (seconds float64, ok bool) {
	v, ok := HistogramQuantileCounts(percentile/100, VLLMTTFTBuckets, o.TTFT[:])
	if !ok {
		return 0, false
	}
	return v, true
}

// InterTokenLatency is rate(sum) over rate(count) of the inter-token
// latency, in seconds. ok is false when no gap was counted within
// RateWindow, where the division gives NaN.
func (o Observation) InterTokenLatency() (seconds float64, ok bool) {
	if !(o.ITLCount > 0) {
		return 0, false
	}
	return o.ITLSum / o.ITLCount, true
}

// WaitWindow is the window of Observation.Started: the [5m] of the wait
// percentile query in docs/autoscaling.md.
const WaitWindow = 5 * time.Minute

// WaitPercentile is the wait at percentile (0-100) of the requests in
// Started, as histogram_quantile gives it from vLLM's queue-time buckets
// (VLLMQueueTimeBuckets): interpolated within the bucket that holds the
// rank, so a policy reads what a cluster's metrics tell, not the exact
// waits. It is in seconds, as TTFTPercentile. ok is false when none
// started, where histogram_quantile gives NaN.
func (o Observation) WaitPercentile(percentile float64) (seconds float64, ok bool) {
	if len(o.Started) == 0 {
		return 0, false
	}
	secs := make([]float64, len(o.Started))
	for i, w := range o.Started {
		secs[i] = w.Seconds()
	}
	v, ok := HistogramQuantile(percentile/100, VLLMQueueTimeBuckets, secs)
	if !ok {
		return 0, false
	}
	return v, true
}

// Workers is every live worker.
func (o Observation) Workers() int { return o.Serving + o.Starting + o.Draining }

// Ready counts the Ready workers, draining ones included, as a Deployment
// would count them.
func (o Observation) Ready() int { return o.Serving + o.Draining }

// LoadIndex is the value the backend reports. With no serving worker the
// slots of one worker stand in, so the index stays finite and still says
// how many workers the queue needs.
func (o Observation) LoadIndex(kind LoadKind) float64 {
	slots := max(o.Serving, 1) * o.Concurrency
	if kind == LoadUtilization {
		return float64(o.InFlight) / float64(slots)
	}
	return float64(o.InFlight+o.Waiting) / float64(slots)
}
