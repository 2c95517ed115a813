package sim

import (
	"math"
	"sort"
	"time"
)

// What the pool exports beside its request counts, as vLLM does: the TTFT
// histogram, the inter-token latency's sum and count, the prompt and
// generation token counters, and the KV cache's use. Each is kept as
// counters and per-window bucket counts updated as requests reach their
// first token or finish, so that a read costs a binary search and a
// copy, never a scan of the requests: the replay reads them at every
// evaluation of a days-long trace.

// TTFTBucketCount is the number of buckets of the TTFT histogram:
// VLLMTTFTBuckets and +Inf.
const TTFTBucketCount = 23

// TTFTBuckets are the observations per bucket of VLLMTTFTBuckets, +Inf
// last; not cumulative.
type TTFTBuckets [TTFTBucketCount]float64

// ttftBucket is the bucket of a TTFT in seconds: the first bound >= it,
// le being inclusive.
func ttftBucket(secs float64) uint8 { return uint8(sort.SearchFloat64s(VLLMTTFTBuckets, secs)) }

// TokenBucketCount is the number of buckets of the histograms of a
// request's tokens: VLLMTokenBuckets and +Inf.
const TokenBucketCount = 17

// TokenBuckets are the finished requests per bucket of VLLMTokenBuckets,
// +Inf last; not cumulative.
type TokenBuckets [TokenBucketCount]float64

// finishCounters are the counters a finished request adds to, as they
// stand after it: vllm:generation_tokens_total and
// vllm:inter_token_latency_seconds's sum and count.
type finishCounters struct {
	generation, itlSum, itlCount float64
}

// tokenBuckets are the buckets of vllm:request_generation_tokens and
// vllm:request_prompt_tokens that a finished request counts in, or
// noBucket for both where the trace has no token counts.
type tokenBuckets struct{ output, prompt uint8 }

const noBucket = math.MaxUint8

// firstTokenAt is a first token the fixed and batched models know ahead:
// the request's prefill ends at At.
type firstTokenAt struct {
	at  time.Time
	req int
}

type firstTokens []firstTokenAt

func (f firstTokens) Len() int { return len(f) }
func (f firstTokens) Less(i, j int) bool {
	if !f[i].at.Equal(f[j].at) {
		return f[i].at.Before(f[j].at)
	}
	return f[i].req < f[j].req
}
func (f firstTokens) Swap(i, j int) { f[i], f[j] = f[j], f[i] }

// Push and Pop are heap.Interface's; the pool calls pushHeap and popHeap.
func (f *firstTokens) Push(x any) { *f = append(*f, x.(firstTokenAt)) }
func (f *firstTokens) Pop() any {
	*f = (*f)[:len(*f)-1]
	return nil
}

// vllmCounters is what the pool keeps for those metrics.
type vllmCounters struct {
	// firstAt and firstBucket are each first token's time and TTFT
	// bucket, in time order; promptCum the prompt tokens counted up to and
	// including each.
	firstAt     []time.Time
	firstBucket []uint8
	promptCum   []float64
	// ahead are first tokens still to come under the fixed and batched
	// models, whose prefill ends at a time known at dispatch.
	ahead firstTokens
	// window holds the first tokens within the last WaitWindow, by
	// bucket; windowHead is the oldest of them in firstAt.
	window     TTFTBuckets
	windowHead int
	// total is the TTFT histogram's buckets since the trace's start;
	// prompt the prompt tokens.
	total  TTFTBuckets
	prompt float64
	// finish is the counters after each finished request, and
	// finishBuckets its token buckets, parallel to the pool's finishedAt;
	// finished the counters now.
	finish        []finishCounters
	finishBuckets []tokenBuckets
	finished      finishCounters
	// outputs and prompts count the requests that finished within the
	// last WaitWindow by token bucket; outputsHead is the oldest of them
	// in finishedAt.
	outputs, prompts TokenBuckets
	outputsHead      int
	// hist is the TTFT buckets at each scrape within the last
	// WaitWindow, oldest first: Prometheus's samples for the rate() in
	// histogram_quantile(q, rate(...[5m])).
	hist []histSample
}

type histSample struct {
	at      time.Time
	buckets TTFTBuckets
}

// firstTokenLater records that r's first token comes at at, once the pool
// gets there (flushFirstTokens).
func (p *Pool) firstTokenLater(r int, at time.Time) {
	if !at.After(p.now) {
		p.flushFirstTokens() // those due before it are recorded first
		p.recordFirstToken(r, at)
		return
	}
	pushHeap(&p.vllm.ahead, firstTokenAt{at: at, req: r})
}

// flushFirstTokens records the first tokens known ahead that have come by
// now, leaving out those of requests lost before their prefill ended.
// It runs before anything can fail a request at now (Remove), so a
// request lost after its first token still counts its token.
func (p *Pool) flushFirstTokens() {
	v := &p.vllm
	for len(v.ahead) > 0 && !v.ahead[0].at.After(p.now) {
		f := popHeap(&v.ahead)
		if !p.failed[f.req] {
			p.recordFirstToken(f.req, f.at)
		}
	}
}

// recordFirstToken counts r's first token at at, no earlier than the
// last one counted: its TTFT into the
// histogram and its prompt tokens into the counter, as vLLM counts a
// prompt once it is prefilled.
func (p *Pool) recordFirstToken(r int, at time.Time) {
	v := &p.vllm
	b := ttftBucket(at.Sub(p.start.Add(p.trace[r].Arrival)).Seconds())
	v.total[b]++
	v.window[b]++
	if p.tokens != nil {
		v.prompt += p.tokens[r].InputTokens
	}
	v.firstAt, v.firstBucket, v.promptCum = append(v.firstAt, at), append(v.firstBucket, b), append(v.promptCum, v.prompt)
}

// recordFinish counts r's output tokens and its gaps between them (the
// request's first to last token over its tokens less one: what vLLM's
// per-token observations sum and count to) as it finishes now. A request
// is counted when it finishes, not token by token: the counters' rates
// over a minute lag by the requests' decode time, and cost nothing per
// token.
func (p *Pool) recordFinish(r int) {
	v := &p.vllm
	b := tokenBuckets{output: noBucket, prompt: noBucket}
	if p.tokens != nil {
		out := p.tokens[r].OutputTokens
		v.finished.generation += out
		b = tokenBuckets{output: uint8(sort.SearchFloat64s(VLLMTokenBuckets, out)), prompt: uint8(sort.SearchFloat64s(VLLMTokenBuckets, p.tokens[r].InputTokens))}
		v.outputs[b.output]++
		v.prompts[b.prompt]++
		if out > 1 && p.firstToken[r] != 0 {
			v.finished.itlSum += p.now.Sub(p.timeOf(p.firstToken[r])).Seconds()
			v.finished.itlCount += out - 1
		}
	}
	v.finish, v.finishBuckets = append(v.finish, v.finished), append(v.finishBuckets, b)
}

// slideOutputs brings the token buckets of finished requests to those
// that finished within (now-WaitWindow, now].
func (p *Pool) slideOutputs() {
	v := &p.vllm
	from := p.now.Add(-WaitWindow)
	for v.outputsHead < len(p.finishedAt) && !p.finishedAt[v.outputsHead].After(from) {
		if b := v.finishBuckets[v.outputsHead]; b.output != noBucket {
			v.outputs[b.output]--
			v.prompts[b.prompt]--
		}
		v.outputsHead++
	}
}

// slideTTFT brings the window of first tokens to (now-WaitWindow, now].
func (p *Pool) slideTTFT() {
	p.flushFirstTokens()
	v := &p.vllm
	from := p.now.Add(-WaitWindow)
	for v.windowHead < len(v.firstAt) && !v.firstAt[v.windowHead].After(from) {
		v.window[v.firstBucket[v.windowHead]]--
		v.windowHead++
	}
}

// observeVLLM fills o's vLLM metrics as a fresh read gives them: the
// TTFT of the first tokens within WaitWindow, and the counters' rates
// over the last window (RateWindow, shorter within the trace's first
// minute); finishedFrom is the first of finishedAt within it.
func (p *Pool) observeVLLM(o *Observation, window float64, finishedFrom int) {
	p.slideOutputs()
	o.Outputs, o.Prompts = p.vllm.outputs, p.vllm.prompts
	p.slideTTFT()
	v := &p.vllm
	o.TTFT = v.window
	o.PromptTokensTotal, o.GenerationTokensTotal = v.prompt, v.finished.generation
	o.ITLSumTotal, o.ITLCountTotal = v.finished.itlSum, v.finished.itlCount
	if window <= 0 {
		return
	}
	from := p.now.Add(-RateWindow)
	i := sort.Search(len(v.firstAt), func(i int) bool { return v.firstAt[i].After(from) })
	prompt := v.prompt
	if i > 0 {
		prompt -= v.promptCum[i-1]
	}
	f := v.finished
	if finishedFrom > 0 {
		b := v.finish[finishedFrom-1]
		f = finishCounters{generation: f.generation - b.generation, itlSum: f.itlSum - b.itlSum, itlCount: f.itlCount - b.itlCount}
	}
	o.PromptTokens, o.GenerationTokens = prompt/window, f.generation/window
	o.ITLSum, o.ITLCount = f.itlSum/window, f.itlCount/window
}

// scrapedTTFT is the TTFT histogram that a query now gives to
// histogram_quantile(q, rate(...[5m])): the buckets' increase between
// the first and the last scrape within WaitWindow before end (none until
// there are two).
func (p *Pool) scrapedTTFT(end time.Time) TTFTBuckets {
	v := &p.vllm
	drop := 0
	for drop < len(v.hist) && !v.hist[drop].at.After(end.Add(-WaitWindow)) {
		drop++
	}
	v.hist = v.hist[drop:]
	var inc TTFTBuckets
	if len(v.hist) == 0 {
		return inc
	}
	first, last := v.hist[0], v.hist[len(v.hist)-1]
	for i := range inc {
		inc[i] = last.buckets[i] - first.buckets[i]
	}
	return inc
}

// kvCacheUsage is avg(vllm:kv_cache_usage_perc) over the serving workers
// under the engine model: each engine's KV blocks in use over its cache's
// blocks, as of its last step, 0 for a worker that has had no request.
// ok is false with no serving worker, where avg() has no series. The
// fixed and batched models hold no KV cache: their workers read 0, which
// the SLO policy takes as no reading of the context (it falls back to the
// token rates), where no value would be a failed read that holds back
// every scale-in.
func (p *Pool) kvCacheUsage() (usage float64, ok bool) {
	n := 0
	for _, w := range p.workers {
		if w.Draining || !w.Ready(p.now) {
			continue
		}
		n++
		if w.eng != nil {
			used, capacity := w.eng.KVBlocks()
			if capacity > 0 {
				usage += float64(used) / float64(capacity)
			}
		}
	}
	if n == 0 {
		return 0, false
	}
	return usage / float64(n), true
}
