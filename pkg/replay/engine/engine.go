// Package engine models one GPU worker serving an LLM as vLLM does:
// continuous batching with chunked prefill, first-come admission bounded
// by the number of sequences and by the KV cache, and preemption by
// recomputation when the cache runs out. Its speeds come from a measured
// profile (pkg/gpuprofile).
//
// Each step, every running sequence that has its prompt computed decodes
// one token, and the step also carries up to MaxBatchedTokens prompt
// tokens of admitted sequences still in prefill, oldest first. A step
// takes
//
//	ITL(decoding sequences, their mean context) + prompt tokens / prefill rate
//
// (no ITL term when nothing decodes). A sequence's first token comes at
// the end of the step that computes the last of its prompt; each later
// step adds one token, and it finishes with its last.
//
// Before each step the scheduler (as vLLM's) preempts the newest running
// sequence while the KV blocks the step needs exceed the cache, putting
// it back at the head of the worker's queue with its generated tokens
// kept; then admits waiting requests first-come while fewer than
// MaxNumSeqs run, the step has prompt-token budget left, and the
// request's blocks (its prompt and the tokens it generated, in
// BlockSize-token blocks) fit beside those of the running sequences. A
// preempted sequence recomputes its prompt and generated tokens as a
// prefill when admitted again.
//
// It is event driven: between two events (an admission, a step that
// carries prompt tokens, a completion, the KV cache running out, the mean
// context crossing a measured context of the profile) the batch is
// constant and the mean context grows by one token a step, so the time
// of k steps is a sum of a linear function, which Worker computes and
// inverts in closed form. A worker's cost grows with the requests it
// serves, not with the tokens it decodes.
package engine

import (
	"container/heap"
	"fmt"
	"math"

	"github.com/gputask/gputask-controller/pkg/gpuprofile"
)

// Config is what every worker of a pool shares.
type Config struct {
	Profile *gpuprofile.Profile
	// MaxBatchedTokens is the prompt tokens one step carries (vLLM's
	// max_num_batched_tokens); 0 means DefaultMaxBatchedTokens.
	MaxBatchedTokens int
	// MaxNumSeqs is the sequences that run at once (max_num_seqs); 0
	// means DefaultMaxNumSeqs.
	MaxNumSeqs int
	// BlockSize is the tokens of one KV block; 0 means DefaultBlockSize.
	BlockSize int
	// KVTokens overrides the profile's kv_tokens_fit when above 0.
	KVTokens int64
}

// vLLM's defaults for online serving on a large GPU.
const (
	DefaultMaxBatchedTokens = 8192
	DefaultMaxNumSeqs       = 256
	DefaultBlockSize        = 16
)

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	if c.MaxBatchedTokens == 0 {
		c.MaxBatchedTokens = DefaultMaxBatchedTokens
	}
	if c.MaxNumSeqs == 0 {
		c.MaxNumSeqs = DefaultMaxNumSeqs
	}
	if c.BlockSize == 0 {
		c.BlockSize = DefaultBlockSize
	}
	return c
}

// Validate reports a configuration no worker can run.
func (c Config) Validate() error {
	c = c.WithDefaults()
	switch {
	case c.Profile == nil:
		return fmt.Errorf("no GPU profile")
	case c.MaxBatchedTokens < 1:
		return fmt.Errorf("max batched tokens %d: want at least 1", c.MaxBatchedTokens)
	case c.MaxNumSeqs < 1 || c.MaxNumSeqs > gpuprofile.MaxBatch:
		return fmt.Errorf("max num seqs %d: want 1 to %d", c.MaxNumSeqs, gpuprofile.MaxBatch)
	case c.BlockSize < 1:
		return fmt.Errorf("block size %d: want at least 1", c.BlockSize)
	case c.KVTokens < 0:
		return fmt.Errorf("KV tokens %d: want at least 0", c.KVTokens)
	case c.CacheTokens()/int64(c.BlockSize) < 1:
		return fmt.Errorf("a KV cache of %d tokens holds no block of %d", c.CacheTokens(), c.BlockSize)
	}
	return nil
}

// CacheTokens is the tokens the KV cache holds: KVTokens, or the
// profile's kv_tokens_fit.
func (c Config) CacheTokens() int64 {
	if c.KVTokens > 0 {
		return c.KVTokens
	}
	return c.Profile.KVTokensFit
}

// Kind is what happened to a request.
type Kind int

const (
	// Admitted: the request got a place in the batch (again, after a
	// preemption).
	Admitted Kind = iota
	// FirstToken: its first output token came.
	FirstToken
	// Finished: its last output token came.
	Finished
	// Preempted: it left the batch for the head of the queue, its KV
	// blocks freed.
	Preempted
	// Rejected: its prompt and output cannot fit the KV cache even alone,
	// as vLLM refuses a request longer than the model length.
	Rejected
)

func (k Kind) String() string {
	return [...]string{"admitted", "first token", "finished", "preempted", "rejected"}[k]
}

// Event is one thing that happened to a request, at a time in seconds on
// the clock the caller gives the worker.
type Event struct {
	Kind Kind
	ID   int
	At   float64
}

type state int8

const (
	waiting state = iota
	prefilling
	decoding
	done
)

// seq is one request on the worker.
type seq struct {
	id             int
	prompt, output int
	state          state
	// g is the tokens generated when the sequence last changed state; a
	// decoding one generates one more each step since s0.
	g  int
	s0 int64
	// key is the sequence's context minus the step count, modulo the
	// block size, while it decodes: the phase in which its KV grows by
	// a block.
	key int
	// computed is the tokens of its prefill done; blocks the KV blocks
	// its prefill holds.
	computed, blocks int64
	// finish is the step count after which it has its last token, while
	// it decodes; heapAt its place in the decoders' heap.
	finish int64
	heapAt int
	// prev and next link the running sequences, oldest first.
	prev, next *seq
}

// Worker is one GPU worker. Its clock is float seconds given by the
// caller (Enqueue's at, Advance's to); it moves only forward.
type Worker struct {
	cfg      Config
	profile  *gpuprofile.Profile
	rate     float64 // prefill tokens per second
	capacity int64   // KV blocks
	block    int64
	emit     func(Event)

	// t is the boundary where the step or run in flight began.
	t float64
	// steps is the decode steps taken (every step in which something
	// decodes counts one): the clock of the decoding sequences.
	steps int64

	// Decoding sequences: their number, the sum of their contexts and of
	// their KV blocks at steps, the count by key, and a heap by finish.
	sumCtx    int64
	decBlocks int64
	keys      []int
	decoders  decoderHeap
	// Prefilling sequences in admission order, and their KV blocks.
	prefill    []*seq
	preBlocks  int64
	head, tail *seq // running, oldest first
	running    int
	queue      []*seq // waiting, head first at queue[qHead]
	qHead      int

	// The step or run in flight: k steps ending at end; chunks are the
	// prompt tokens it computes for prefill[i] (a run carries none).
	busy   bool
	k      int64
	end    float64
	alpha  float64 // the ITL's piece over the run: alpha + slope × context
	slope  float64
	c0     float64 // the mean context at its first step
	chunks []int64

	// Counters.
	iterations, modelled, preemptions int64
}

// New makes an idle worker whose clock starts at at.
func New(cfg Config, at float64, emit func(Event)) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	w := &Worker{
		cfg: cfg, profile: cfg.Profile, rate: cfg.Profile.PrefillTokensPerSecond(),
		block: int64(cfg.BlockSize), emit: emit, t: at,
	}
	w.capacity = cfg.CacheTokens() / w.block
	w.keys = make([]int, cfg.BlockSize)
	return w, nil
}

// blocksOf is the KV blocks of tokens.
func (w *Worker) blocksOf(tokens int64) int64 { return (tokens + w.block - 1) / w.block }

// Running is the sequences in the batch (decoding or in prefill).
func (w *Worker) Running() int { return w.running }

// Waiting is the requests in the worker's queue.
func (w *Worker) Waiting() int { return len(w.queue) - w.qHead }

// Outstanding is the requests sent to the worker and not finished.
func (w *Worker) Outstanding() int { return w.running + w.Waiting() }

// Iterations is how many times the worker scheduled: steps that carry
// prompt tokens, and runs of decode steps between events. Its cost.
func (w *Worker) Iterations() int64 { return w.iterations }

// Steps is the engine steps modelled.
func (w *Worker) Steps() int64 { return w.modelled }

// Preemptions counts the sequences preempted.
func (w *Worker) Preemptions() int64 { return w.preemptions }

// KVBlocks is the KV blocks in use and the cache's size.
func (w *Worker) KVBlocks() (used, capacity int64) {
	return w.decBlocks + w.preBlocks, w.capacity
}

// Busy reports a step or run in flight.
func (w *Worker) Busy() bool { return w.busy }

// Next is when the step or run in flight ends, at which Advance must be
// called; +Inf when the worker is idle.
func (w *Worker) Next() float64 {
	if !w.busy {
		return math.Inf(1)
	}
	return w.end
}

// Enqueue sends the worker a request at at (not before the worker's last
// event). It joins the first step that begins at or after at: at once on
// an idle worker, or with the requests of the same instant.
// Prompt and output count at least one token each.
func (w *Worker) Enqueue(id, prompt, output int, at float64) {
	w.Advance(at)
	s := &seq{id: id, prompt: max(prompt, 1), output: max(output, 1), heapAt: -1}
	if w.blocksOf(int64(s.prompt+s.output)) > w.capacity {
		w.emit(Event{Kind: Rejected, ID: id, At: at})
		return
	}
	w.queue = append(w.queue, s)
	switch {
	case !w.busy:
		w.t = math.Max(w.t, at)
		w.open()
	case w.t >= at:
		// The step in flight begins now: schedule it again with this
		// request in the queue. What it scheduled stays; only admissions
		// can be added.
		w.iterations--
		w.open()
	default:
		w.split(at)
	}
}

// Abort takes every request off the worker (its pod is gone) and returns
// their ids, running ones first; the worker is idle after.
func (w *Worker) Abort() []int {
	var ids []int
	for s := w.head; s != nil; s = s.next {
		ids = append(ids, s.id)
	}
	for _, s := range w.queue[w.qHead:] {
		ids = append(ids, s.id)
	}
	*w = Worker{cfg: w.cfg, profile: w.profile, rate: w.rate, capacity: w.capacity, block: w.block,
		emit: w.emit, t: w.t, keys: make([]int, w.block),
		iterations: w.iterations, modelled: w.modelled, preemptions: w.preemptions}
	return ids
}

// DropWaiting takes the requests waiting in the worker's queue off it and
// returns their ids, head first; the running ones stay.
func (w *Worker) DropWaiting() []int {
	var ids []int
	for _, s := range w.queue[w.qHead:] {
		ids = append(ids, s.id)
	}
	w.queue, w.qHead = nil, 0
	return ids
}

// Advance plays the worker up to to: every step or run that ends at or
// before to completes, and the next begins.
func (w *Worker) Advance(to float64) {
	for w.busy && w.end <= to {
		w.close()
		w.open()
	}
}

// split cuts a run of decode steps at the first boundary at or after at,
// so that a request arriving at at is scheduled there.
func (w *Worker) split(at float64) {
	if len(w.chunks) > 0 || w.k <= 1 {
		return // a single step is not cut
	}
	if k := w.stepsUntil(at - w.t); k < w.k {
		w.k = k
		w.end = w.t + w.runTime(k)
	}
}

// runTime is the time of the first k steps of the run in flight: the sum
// of alpha + slope × (c0 + j) for j below k.
func (w *Worker) runTime(k int64) float64 {
	kf := float64(k)
	return kf*(w.alpha+w.slope*w.c0) + w.slope*kf*(kf-1)/2
}

// stepsUntil is the fewest steps of the run in flight that take dt (> 0)
// or more, at most its length.
func (w *Worker) stepsUntil(dt float64) int64 {
	// runTime(x) = a x² + b x with b > 0 (the first step takes time); its
	// root at dt in the form that does not cancel when a is small.
	a, b := w.slope/2, w.alpha+w.slope*w.c0-w.slope/2
	x := 2 * dt / (b + math.Sqrt(math.Max(b*b+4*a*dt, 0)))
	if math.IsNaN(x) || math.IsInf(x, 0) || x > float64(w.k) {
		x = float64(w.k)
	}
	k := min(max(int64(math.Ceil(x)), 1), w.k)
	// The root is exact up to rounding; settle it on the sums themselves.
	for k > 1 && w.runTime(k-1) >= dt {
		k--
	}
	for k < w.k && w.runTime(k) < dt {
		k++
	}
	return k
}

// close ends the step or run in flight at its end: the decoding
// sequences gain its tokens, prefills progress, and what finished leaves.
func (w *Worker) close() {
	w.busy = false
	w.t = w.end
	k := w.k
	if w.decoders.Len() > 0 && k > 0 {
		w.decBlocks += w.blockGrowth(k)
		w.sumCtx += int64(w.decoders.Len()) * k
		w.steps += k
	}
	w.modelled += max(k, 1)
	for w.decoders.Len() > 0 && w.decoders[0].finish <= w.steps {
		s := heap.Pop(&w.decoders).(*seq)
		w.leaveDecoding(s)
		w.finish(s)
	}
	if len(w.chunks) == 0 {
		return
	}
	kept := w.prefill[:0]
	for i, s := range w.prefill {
		if i >= len(w.chunks) {
			kept = append(kept, s)
			continue
		}
		s.computed += w.chunks[i]
		if s.computed < int64(s.prompt+s.g) {
			kept = append(kept, s)
			continue
		}
		// Its prefill done, the step samples its next token.
		w.preBlocks -= s.blocks
		s.blocks, s.computed = 0, 0
		s.g++
		if s.g == 1 {
			w.emit(Event{Kind: FirstToken, ID: s.id, At: w.t})
		}
		if s.g >= s.output {
			w.finish(s)
			continue
		}
		w.joinDecoding(s)
	}
	clear(w.prefill[len(kept):])
	w.prefill = kept
	w.chunks = w.chunks[:0]
}

// finish takes a sequence that has its last token out of the batch.
func (w *Worker) finish(s *seq) {
	s.state = done
	w.unlink(s)
	w.emit(Event{Kind: Finished, ID: s.id, At: w.t})
}

// context is a decoding sequence's tokens in KV cache at the next step,
// counting the one it feeds.
func (w *Worker) context(s *seq) int64 {
	return int64(s.prompt+s.g) + (w.steps - s.s0)
}

func (w *Worker) joinDecoding(s *seq) {
	s.state, s.s0 = decoding, w.steps
	ctx := w.context(s)
	s.key = int(((ctx-w.steps)%w.block + w.block) % w.block)
	w.keys[s.key]++
	w.sumCtx += ctx
	w.decBlocks += w.blocksOf(ctx)
	s.finish = w.steps + int64(s.output-s.g)
	heap.Push(&w.decoders, s)
}

// leaveDecoding takes s out of the decoding sequences' sums; s.g becomes
// its tokens generated.
func (w *Worker) leaveDecoding(s *seq) {
	ctx := w.context(s)
	w.keys[s.key]--
	w.sumCtx -= ctx
	w.decBlocks -= w.blocksOf(ctx)
	s.g += int(w.steps - s.s0)
}

// blockGrowth is the KV blocks the decoding sequences add over k more
// steps. A sequence of context x needs ceil(x/B) blocks, one more each
// time x passes a multiple of B; with x = key + steps (mod B) for all of
// them, the keys' counts give the growth of all at once.
func (w *Worker) blockGrowth(k int64) int64 {
	whole, part := k/w.block, k%w.block
	g := int64(w.decoders.Len()) * whole
	if part > 0 {
		for key, n := range w.keys {
			if n > 0 && w.crossing(key) <= part {
				g += int64(n)
			}
		}
	}
	return g
}

// crossing is the step (1 to B) at which a sequence of that key next
// needs one more block: when its context passes a multiple of B.
func (w *Worker) crossing(key int) int64 {
	// Its context is key + steps mod B now; at ctx ≡ 1 (mod B) the
	// context just passed a block's end.
	r := (int64(key) + w.steps) % w.block // context mod B now
	return (1-r+w.block-1)%w.block + 1
}

// stepsUntilFull is the fewest steps of the decoding sequences after
// which they need more KV blocks than room.
func (w *Worker) stepsUntilFull(room int64) int64 {
	n := int64(w.decoders.Len())
	whole := room / n
	rest := room - whole*n
	var byCrossing [64]int64
	cross := byCrossing[:w.block+1]
	if w.block > 63 {
		cross = make([]int64, w.block+1)
	}
	for key, c := range w.keys {
		if c > 0 {
			cross[w.crossing(key)] += int64(c)
		}
	}
	var g int64
	for j := int64(1); j <= w.block; j++ {
		g += cross[j]
		if g > rest {
			return whole*w.block + j
		}
	}
	return whole*w.block + w.block + 1 // cannot happen: g reaches n > rest
}

// open schedules the next step at t: preempt what the cache cannot hold,
// give prefills their prompt tokens, admit from the queue, then set the
// step or run in flight.
func (w *Worker) open() {
	for w.decBlocks+w.preBlocks > w.capacity && w.tail != nil {
		w.preempt(w.tail)
	}
	budget := int64(w.cfg.MaxBatchedTokens)
	w.chunks = w.chunks[:0]
	var tokens int64
	for _, s := range w.prefill {
		c := min(int64(s.prompt+s.g)-s.computed, budget)
		w.chunks = append(w.chunks, c)
		budget -= c
		tokens += c
	}
	for budget > 0 && w.running < w.cfg.MaxNumSeqs && w.qHead < len(w.queue) {
		s := w.queue[w.qHead]
		need := w.blocksOf(int64(s.prompt + s.g))
		if w.decBlocks+w.preBlocks+need > w.capacity {
			break // first come: nothing overtakes the head
		}
		w.queue[w.qHead] = nil
		w.qHead++
		s.state, s.blocks, s.computed = prefilling, need, 0
		w.preBlocks += need
		w.link(s)
		w.prefill = append(w.prefill, s)
		c := min(int64(s.prompt+s.g), budget)
		w.chunks = append(w.chunks, c)
		budget -= c
		tokens += c
		w.emit(Event{Kind: Admitted, ID: s.id, At: w.t})
	}
	if w.qHead > 1024 && w.qHead*2 > len(w.queue) {
		w.queue = append(w.queue[:0], w.queue[w.qHead:]...)
		w.qHead = 0
	}
	n := w.decoders.Len()
	if tokens == 0 && n == 0 {
		w.chunks = w.chunks[:0]
		return // idle
	}
	w.iterations++
	w.busy = true
	if n == 0 {
		w.k, w.alpha, w.slope, w.c0 = 0, 0, 0, 0
		w.end = w.t + float64(tokens)/w.rate
		return
	}
	w.c0 = float64(w.sumCtx) / float64(n)
	var hi float64
	w.alpha, w.slope, _, hi = w.profile.Line(n).Segment(w.c0)
	if tokens > 0 {
		w.k = 1
		w.end = w.t + w.runTime(1) + float64(tokens)/w.rate
		return
	}
	// A run of decode steps up to the next event: a completion, the KV
	// cache full, or the mean context leaving the ITL's linear piece.
	k := w.decoders[0].finish - w.steps
	k = min(k, w.stepsUntilFull(w.capacity-w.decBlocks-w.preBlocks))
	if !math.IsInf(hi, 1) {
		k = min(k, max(int64(math.Ceil(hi-w.c0)), 1))
	}
	w.k = k
	w.end = w.t + w.runTime(k)
}

// preempt puts a running sequence back at the head of the queue, its
// blocks freed and its generated tokens kept for the recompute.
func (w *Worker) preempt(s *seq) {
	switch s.state {
	case decoding:
		heap.Remove(&w.decoders, s.heapAt)
		w.leaveDecoding(s)
	case prefilling:
		w.preBlocks -= s.blocks
		for i, x := range w.prefill {
			if x == s {
				w.prefill = append(w.prefill[:i], w.prefill[i+1:]...)
				break
			}
		}
	}
	w.unlink(s)
	s.state, s.blocks, s.computed = waiting, 0, 0
	if w.qHead > 0 {
		w.qHead--
		w.queue[w.qHead] = s
	} else {
		w.queue = append([]*seq{s}, w.queue...)
	}
	w.preemptions++
	w.emit(Event{Kind: Preempted, ID: s.id, At: w.t})
}

func (w *Worker) link(s *seq) {
	s.prev, s.next = w.tail, nil
	if w.tail != nil {
		w.tail.next = s
	} else {
		w.head = s
	}
	w.tail = s
	w.running++
}

func (w *Worker) unlink(s *seq) {
	if s.prev != nil {
		s.prev.next = s.next
	} else {
		w.head = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	} else {
		w.tail = s.prev
	}
	s.prev, s.next = nil, nil
	w.running--
}

// decoderHeap orders decoding sequences by the step after which they
// finish, the oldest first on a tie.
type decoderHeap []*seq

func (h decoderHeap) Len() int { return len(h) }
func (h decoderHeap) Less(i, j int) bool {
	if h[i].finish != h[j].finish {
		return h[i].finish < h[j].finish
	}
	return h[i].id < h[j].id
}
func (h decoderHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapAt, h[j].heapAt = i, j
}
func (h *decoderHeap) Push(x any) {
	s := x.(*seq)
	s.heapAt = len(*h)
	*h = append(*h, s)
}
func (h *decoderHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	s.heapAt = -1
	return s
}
