// Package fakevllm serves the request metrics of a vLLM pool on /metrics,
// for the tests and the demo that scale a GPUTaskSet from a real Prometheus
// scraping them. It has vLLM's names, types, labels and buckets:
//
//	vllm:num_requests_running          gauge     requests in the batches
//	vllm:num_requests_waiting          gauge     requests waiting for a slot
//	vllm:request_success_total         counter   requests finished
//	vllm:request_queue_time_seconds    histogram time each finished request waited
//	vllm:time_to_first_token_seconds   histogram each request's wait plus its prefill
//	vllm:inter_token_latency_seconds   histogram time between two output tokens
//	vllm:prompt_tokens_total           counter   prompt tokens prefilled
//	vllm:generation_tokens_total       counter   output tokens generated
//	vllm:request_generation_tokens     histogram output tokens of each finished request
//	vllm:request_prompt_tokens         histogram prompt tokens of each finished request
//	vllm:kv_cache_usage_perc           gauge     share of the KV cache in use, 0 to 1
//
// The values come from a load model instead of a GPU: requests arrive as a
// Poisson stream at a rate that may change with time, hold one of the
// pool's slots (workers × slots per worker, vLLM's --max-num-seqs) for an
// exponentially distributed time, and wait in one first-come queue in front
// of all the slots while none is free. That is the queue the SLO policy
// models, and what a router sending each request to the least busy worker
// approximates. The pool shows as one server (one series per metric); the
// documented queries sum over series, so they read a pool of many servers
// the same way.
//
// Tokens come from the same model: each request has Config.PromptTokens
// of prompt, prefilled when it gets a slot at Config.PrefillTokensPerSecond
// (its first token then comes: the TTFT is its wait plus that prefill),
// and Config.OutputTokens of output, one every α + β·batch (ITLBase and
// ITLPerSequence, the batch being the running requests per worker when it
// starts), which the histogram records when it finishes, as vLLM records
// each gap. A running request holds its prompt and half its output in the
// KV cache, of Config.KVTokensPerWorker a worker. Without them the token
// metrics stay at zero, as a vLLM without traffic shows them.
//
// Time is virtual: each scrape advances the model to the clock's now, so a
// fake clock drives it in unit tests and the real one in end-to-end tests.
package fakevllm

import (
	"container/heap"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// The metric names, as vLLM exposes them.
const (
	MetricRunning   = "vllm:num_requests_running"
	MetricWaiting   = "vllm:num_requests_waiting"
	MetricSuccess   = "vllm:request_success_total"
	MetricQueueTime = "vllm:request_queue_time_seconds"
	MetricTTFT      = "vllm:time_to_first_token_seconds"
	MetricITL       = "vllm:inter_token_latency_seconds"
	MetricPrompt    = "vllm:prompt_tokens_total"
	MetricGenerated = "vllm:generation_tokens_total"
	MetricOutputs   = "vllm:request_generation_tokens"
	MetricPrompts   = "vllm:request_prompt_tokens"
	MetricKVCache   = "vllm:kv_cache_usage_perc"
)

// TTFTBuckets and ITLBuckets are the upper bounds, in seconds, of vLLM's
// time-to-first-token and inter-token latency histograms.
var (
	TTFTBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}
	ITLBuckets  = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
)

// TokenBuckets are the upper bounds, in tokens, of vLLM's histograms of a
// request's tokens, vllm:request_generation_tokens and
// vllm:request_prompt_tokens: 1, 2, 5 and their powers of ten up to a
// 128k context.
var TokenBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}

// QueueTimeBuckets are the upper bounds, in seconds, of vLLM's request
// latency histograms, which vllm:request_queue_time_seconds uses.
var QueueTimeBuckets = []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}

// Config is the pool and its load.
type Config struct {
	// ModelName is the model_name label of every series.
	ModelName string
	// Rate is the arrival rate, in requests per second, at a time since
	// the pool started. It is read at each arrival.
	Rate func(elapsed time.Duration) float64
	// ServiceTime is the mean time a request holds a slot.
	ServiceTime time.Duration
	// SlotsPerWorker is how many requests one worker serves at once.
	SlotsPerWorker int
	// Workers is the number of workers serving now, read at each scrape:
	// a test or the demo ties it to the set's tasks. A worker removed
	// while its slots are busy finishes its requests first.
	Workers func() int
	// Seed makes a run repeatable.
	Seed uint64
	// Clock is the time the model runs to at each scrape; the real clock
	// when nil.
	Clock clock.PassiveClock

	// PromptTokens and OutputTokens are each request's tokens.
	PromptTokens, OutputTokens int
	// PrefillTokensPerSecond is how fast a worker prefills a prompt; 0
	// prefills at once.
	PrefillTokensPerSecond float64
	// ITLBase and ITLPerSequence give the time between two output tokens
	// at a batch of b running requests a worker: ITLBase + b·ITLPerSequence.
	ITLBase, ITLPerSequence time.Duration
	// KVTokensPerWorker is how many tokens a worker's KV cache holds; 0
	// shows no use.
	KVTokensPerWorker int
}

// WithH100Tokens is cfg with the tokens of a Llama-3.1-8B-shaped model on
// an H100 (pkg/gpuprofile's h100-llama-3.1-8b, rounded): 1,000-token
// prompts prefilled at 38,000 tokens/s, 160 output tokens at 7 ms +
// 51.2 µs a running sequence, 465,000 tokens of KV cache a worker.
func (cfg Config) WithH100Tokens() Config {
	cfg.PromptTokens, cfg.OutputTokens, cfg.PrefillTokensPerSecond = 1000, 160, 38000
	cfg.ITLBase, cfg.ITLPerSequence, cfg.KVTokensPerWorker = 7*time.Millisecond, 51200*time.Nanosecond, 465000
	return cfg
}

// Snapshot is the pool's state at one time.
type Snapshot struct {
	Running, Waiting int
	// Succeeded counts the requests finished.
	Succeeded uint64
	// QueueTimeSum is the time, in seconds, that the finished requests
	// waited for a slot, summed.
	QueueTimeSum float64
	// TTFT and ITL are the two latency histograms' sums (seconds) and
	// counts: a TTFT for each request that got a slot, a gap for each
	// output token but the first of each finished request.
	TTFTSum, ITLSum     float64
	TTFTCount, ITLCount uint64
	// PromptTokens counts the tokens prefilled, GenerationTokens those
	// generated by the finished requests.
	PromptTokens, GenerationTokens uint64
	// KVCacheUsage is the share of the workers' KV cache the running
	// requests hold, at most 1.
	KVCacheUsage float64
}

// Pool is the load model and its /metrics handler.
type Pool struct {
	cfg   Config
	clock clock.PassiveClock
	start time.Time

	mu          sync.Mutex
	rng         *rand.Rand
	now         time.Time
	slots       int
	nextArrival time.Time
	// arrives is false when nextArrival is only a second look at a rate
	// that was zero.
	arrives bool
	// waiting holds the arrival times of the requests waiting, oldest first.
	waiting []time.Time
	running completions
	// finished counts the finished requests per bucket of their queue
	// time, the last entry for those above every bound (+Inf).
	finished     []uint64
	succeeded    uint64
	queueTimeSum float64
	// ttft, itl, outputs and prompts count the observations per bucket,
	// as finished does.
	ttft, itl, outputs, prompts []uint64
	tokens                      Snapshot
	lastWorker                  int
}

// New returns a pool that starts now, with no request yet.
func New(cfg Config) *Pool {
	c := cfg.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	now := c.Now()
	p := &Pool{
		cfg: cfg, clock: c, start: now, now: now,
		rng:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		finished: make([]uint64, len(QueueTimeBuckets)+1),
		ttft:     make([]uint64, len(TTFTBuckets)+1),
		itl:      make([]uint64, len(ITLBuckets)+1),
		outputs:  make([]uint64, len(TokenBuckets)+1),
		prompts:  make([]uint64, len(TokenBuckets)+1),
	}
	p.slots = p.slotsNow()
	p.nextArrival, p.arrives = p.arrivalAfter(now)
	return p
}

func (p *Pool) slotsNow() int {
	p.lastWorker = p.workersNow()
	return p.lastWorker * max(p.cfg.SlotsPerWorker, 0)
}

func (p *Pool) workersNow() int {
	if p.cfg.Workers == nil {
		return 0
	}
	return max(p.cfg.Workers(), 0)
}

// arrivalAfter draws the next arrival after t at the rate at t. With no
// load it looks again a second later, when the rate may have risen.
func (p *Pool) arrivalAfter(t time.Time) (time.Time, bool) {
	rate := 0.0
	if p.cfg.Rate != nil {
		rate = p.cfg.Rate(t.Sub(p.start))
	}
	if !(rate > 0) || math.IsInf(rate, 1) {
		return t.Add(time.Second), false
	}
	gap := time.Duration(p.rng.ExpFloat64() / rate * float64(time.Second))
	return t.Add(max(gap, time.Nanosecond)), true
}

// serviceTime draws the time one request holds its slot.
func (p *Pool) serviceTime() time.Duration {
	return time.Duration(p.rng.ExpFloat64() * float64(p.cfg.ServiceTime))
}

// Advance runs the model up to t: arrivals, completions and starts, in
// the order they happen. A t before the model's time does nothing.
func (p *Pool) Advance(t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.advance(t)
}

func (p *Pool) advance(t time.Time) {
	if !t.After(p.now) {
		return
	}
	// The workers change between scrapes; the model sees a change at the
	// scrape that reads it, as a scrape sees the pods that are there.
	p.slots = p.slotsNow()
	for {
		next := p.nextArrival
		completion := p.running.Len() > 0 && !p.running[0].done.After(next)
		if completion {
			next = p.running[0].done
		}
		if next.After(t) {
			break
		}
		p.now = next
		if completion {
			r := heap.Pop(&p.running).(request)
			p.finish(r)
		} else {
			if p.arrives {
				p.waiting = append(p.waiting, next)
			}
			p.nextArrival, p.arrives = p.arrivalAfter(next)
		}
		p.startWaiting()
	}
	p.now = t
	p.startWaiting()
}

// startWaiting gives free slots to the oldest waiting requests.
func (p *Pool) startWaiting() {
	for len(p.waiting) > 0 && p.running.Len() < p.slots {
		arrived := p.waiting[0]
		p.waiting = p.waiting[1:]
		r := request{done: p.now.Add(p.serviceTime()), queued: p.now.Sub(arrived).Seconds(), itl: p.itlAt(p.running.Len() + 1)}
		heap.Push(&p.running, r)
		p.firstToken(r)
	}
}

// itlAt is the time between two output tokens with running requests in
// the pool's batches.
func (p *Pool) itlAt(running int) float64 {
	batch := float64(running) / float64(max(p.lastWorker, 1))
	return p.cfg.ITLBase.Seconds() + batch*p.cfg.ITLPerSequence.Seconds()
}

// firstToken records a request's prompt, prefilled as it gets its slot, and
// its first token.
func (p *Pool) firstToken(r request) {
	prefill := 0.0
	if p.cfg.PrefillTokensPerSecond > 0 {
		prefill = float64(p.cfg.PromptTokens) / p.cfg.PrefillTokensPerSecond
	}
	ttft := r.queued + prefill
	p.tokens.PromptTokens += uint64(max(p.cfg.PromptTokens, 0))
	p.tokens.TTFTSum += ttft
	p.tokens.TTFTCount++
	p.ttft[bucketOf(TTFTBuckets, ttft)]++
}

func (p *Pool) finish(r request) {
	p.succeeded++
	p.queueTimeSum += r.queued
	p.finished[bucketOf(QueueTimeBuckets, r.queued)]++
	out := max(p.cfg.OutputTokens, 0)
	p.tokens.GenerationTokens += uint64(out)
	p.outputs[bucketOf(TokenBuckets, float64(out))]++
	p.prompts[bucketOf(TokenBuckets, float64(max(p.cfg.PromptTokens, 0)))]++
	if gaps := uint64(max(out-1, 0)); gaps > 0 {
		p.tokens.ITLSum += float64(gaps) * r.itl
		p.tokens.ITLCount += gaps
		p.itl[bucketOf(ITLBuckets, r.itl)] += gaps
	}
}

// bucketOf is the index of the first bound at or above v, len(bounds) for
// +Inf.
func bucketOf(bounds []float64, v float64) int {
	i := 0
	for i < len(bounds) && v > bounds[i] {
		i++
	}
	return i
}

// kvCacheUsage is the share of the workers' KV cache the running requests
// hold: each its prompt and half its output, on average.
func (p *Pool) kvCacheUsage() float64 {
	capacity := float64(p.lastWorker) * float64(max(p.cfg.KVTokensPerWorker, 0))
	if capacity <= 0 {
		return 0
	}
	held := float64(p.running.Len()) * (float64(max(p.cfg.PromptTokens, 0)) + float64(max(p.cfg.OutputTokens, 0))/2)
	return min(held/capacity, 1)
}

// Snapshot advances the model to the clock's now and returns its state.
func (p *Pool) Snapshot() Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.advance(p.clock.Now())
	return p.snapshot()
}

func (p *Pool) snapshot() Snapshot {
	s := p.tokens
	s.Running, s.Waiting, s.Succeeded, s.QueueTimeSum = p.running.Len(), len(p.waiting), p.succeeded, p.queueTimeSum
	s.KVCacheUsage = p.kvCacheUsage()
	return s
}

// ServeHTTP answers a scrape in the Prometheus text format.
func (p *Pool) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	// Prometheus 3 refuses a scrape without a known Content-Type.
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	p.WriteMetrics(w)
}

// WriteMetrics advances the model to the clock's now and writes the
// metric families in the Prometheus text format.
func (p *Pool) WriteMetrics(w io.Writer) {
	p.mu.Lock()
	p.advance(p.clock.Now())
	s := p.snapshot()
	finished := append([]uint64(nil), p.finished...)
	ttft := append([]uint64(nil), p.ttft...)
	itl := append([]uint64(nil), p.itl...)
	outputs := append([]uint64(nil), p.outputs...)
	prompts := append([]uint64(nil), p.prompts...)
	p.mu.Unlock()

	labels := fmt.Sprintf(`engine="0",model_name=%q`, p.cfg.ModelName)
	fmt.Fprintf(w, "# HELP %s Number of requests in model execution batches.\n# TYPE %[1]s gauge\n%[1]s{%s} %d\n", MetricRunning, labels, s.Running)
	fmt.Fprintf(w, "# HELP %s Number of requests waiting to be processed.\n# TYPE %[1]s gauge\n%[1]s{%s} %d\n", MetricWaiting, labels, s.Waiting)
	fmt.Fprintf(w, "# HELP %s Count of successfully processed requests.\n# TYPE %[1]s counter\n%[1]s{%s,finished_reason=\"stop\"} %d\n",
		MetricSuccess, labels, s.Succeeded)
	fmt.Fprintf(w, "# HELP %s Histogram of time spent in WAITING phase for request.\n# TYPE %[1]s histogram\n", MetricQueueTime)
	var cumulative uint64
	for i, le := range QueueTimeBuckets {
		cumulative += finished[i]
		fmt.Fprintf(w, "%s_bucket{%s,le=%q} %d\n", MetricQueueTime, labels, strconv.FormatFloat(le, 'f', -1, 64), cumulative)
	}
	fmt.Fprintf(w, "%s_bucket{%s,le=\"+Inf\"} %d\n", MetricQueueTime, labels, s.Succeeded)
	fmt.Fprintf(w, "%s_sum{%s} %s\n", MetricQueueTime, labels, strconv.FormatFloat(s.QueueTimeSum, 'g', -1, 64))
	fmt.Fprintf(w, "%s_count{%s} %d\n", MetricQueueTime, labels, s.Succeeded)
	writeHistogram(w, MetricTTFT, "Histogram of time to first token in seconds.", labels, TTFTBuckets, ttft, s.TTFTSum)
	writeHistogram(w, MetricITL, "Histogram of inter-token latency in seconds.", labels, ITLBuckets, itl, s.ITLSum)
	fmt.Fprintf(w, "# HELP %s Number of prefill tokens processed.\n# TYPE %[1]s counter\n%[1]s{%s} %d\n", MetricPrompt, labels, s.PromptTokens)
	fmt.Fprintf(w, "# HELP %s Number of generation tokens processed.\n# TYPE %[1]s counter\n%[1]s{%s} %d\n", MetricGenerated, labels, s.GenerationTokens)
	writeHistogram(w, MetricOutputs, "Number of generation tokens processed.", labels, TokenBuckets, outputs, float64(s.GenerationTokens))
	writeHistogram(w, MetricPrompts, "Number of prefill tokens processed.", labels, TokenBuckets, prompts, float64(s.Succeeded)*float64(max(p.cfg.PromptTokens, 0)))
	fmt.Fprintf(w, "# HELP %s KV-cache usage. 1 means 100 percent usage.\n# TYPE %[1]s gauge\n%[1]s{%s} %s\n", MetricKVCache, labels, strconv.FormatFloat(s.KVCacheUsage, 'g', -1, 64))
}

// writeHistogram writes one histogram family: its cumulative buckets, the
// +Inf bucket and the count (every observation), and the sum.
func writeHistogram(w io.Writer, name, help, labels string, bounds []float64, counts []uint64, sum float64) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %[1]s histogram\n", name, help)
	var cumulative uint64
	for i, le := range bounds {
		cumulative += counts[i]
		fmt.Fprintf(w, "%s_bucket{%s,le=%q} %d\n", name, labels, strconv.FormatFloat(le, 'f', -1, 64), cumulative)
	}
	cumulative += counts[len(bounds)]
	fmt.Fprintf(w, "%s_bucket{%s,le=\"+Inf\"} %d\n", name, labels, cumulative)
	fmt.Fprintf(w, "%s_sum{%s} %s\n", name, labels, strconv.FormatFloat(sum, 'g', -1, 64))
	fmt.Fprintf(w, "%s_count{%s} %d\n", name, labels, cumulative)
}

// request is one request holding a slot.
type request struct {
	// done is when it finishes, queued how long it waited and itl the
	// time between its output tokens, in seconds.
	done        time.Time
	queued, itl float64
}

// completions is a min-heap of the running requests by their end.
type completions []request

func (c completions) Len() int           { return len(c) }
func (c completions) Less(i, j int) bool { return c[i].done.Before(c[j].done) }
func (c completions) Swap(i, j int)      { c[i], c[j] = c[j], c[i] }
func (c *completions) Push(x any)        { *c = append(*c, x.(request)) }
func (c *completions) Pop() any {
	old := *c
	r := old[len(old)-1]
	*c = old[:len(old)-1]
	return r
}
