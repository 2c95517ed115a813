package sim

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	enginemodel "github.com/gputask/gputask-controller/pkg/replay/engine"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// Worker is one modelled GPU worker: a task and its pod.
type Worker struct {
	Name string
	// Created is when the task was created; GPU time counts from here.
	Created time.Time
	// ReadyAt is when its model is loaded and it takes requests.
	ReadyAt time.Time
	// Removed is when it was deleted; zero while it lives.
	Removed time.Time
	// Draining is set by scale-in: it takes no new requests, finishes the
	// ones in flight, and is deleted once idle.
	Draining     bool
	DrainStarted time.Time
	// Terminating is set when its pod is deleted: it has left the
	// router, finishes what it can until ExitBy, and then exits.
	Terminating bool
	ExitBy      time.Time

	// Node is the node it runs on, when the pool models nodes (SetNodes).
	Node *Node

	// StartedBefore is how long a worker of the pool's first ones took to
	// become Ready before the replay began: the start its task shows.
	StartedBefore time.Duration

	inFlight []int // indexes of the requests it serves
	// progressed is when batched serving last drained its sequences'
	// remaining tokens.
	progressed time.Time
	// eng is its engine model, under engine serving (SetEngine), made
	// when it gets its first request.
	eng *enginemodel.Worker
}

// Ready reports whether the worker serves requests at now.
func (w *Worker) Ready(now time.Time) bool { return !now.Before(w.ReadyAt) }

// Busy reports whether a request is in flight, or, under engine serving,
// queued on the worker: the worker then carries gputask.io/busy: "true".
func (w *Worker) Busy() bool {
	if w.eng != nil {
		return w.eng.Outstanding() > 0
	}
	return len(w.inFlight) > 0
}

// InFlight is how many requests the worker serves: under engine serving,
// the sequences in its batch (vLLM's num_requests_running).
func (w *Worker) InFlight() int {
	if w.eng != nil {
		return w.eng.Running()
	}
	return len(w.inFlight)
}

// Queued is how many requests wait in the worker's own queue under engine
// serving (vLLM's num_requests_waiting); 0 otherwise.
func (w *Worker) Queued() int {
	if w.eng != nil {
		return w.eng.Waiting()
	}
	return 0
}

// completion is a request finishing on a worker.
type completion struct {
	at     time.Time
	req    int
	worker *Worker
	// gen is the request's generation when this was scheduled: batched
	// serving reschedules a request as its batch changes, and the older
	// completions no longer hold.
	gen int
}

type completions []completion

func (c completions) Len() int { return len(c) }
func (c completions) Less(i, j int) bool {
	if !c[i].at.Equal(c[j].at) {
		return c[i].at.Before(c[j].at)
	}
	return c[i].req < c[j].req
}
func (c completions) Swap(i, j int) { c[i], c[j] = c[j], c[i] }

// Push and Pop are heap.Interface's; the pool calls pushHeap and popHeap.
func (c *completions) Push(x any) { *c = append(*c, x.(completion)) }
func (c *completions) Pop() any {
	*c = (*c)[:len(*c)-1]
	return nil
}

// pushHeap and popHeap move x into heap h and its least element out, as
// heap.Push and heap.Pop would, without boxing the element in an
// interface (an allocation each); h's Pop only shortens it.
func pushHeap[T any, S ~[]T, H interface {
	*S
	heap.Interface
}](h H, x T) {
	*h = append(*h, x)
	heap.Fix(h, len(*h)-1)
}

func popHeap[T any, S ~[]T, H interface {
	*S
	heap.Interface
}](h H) T {
	x := (*h)[0]
	heap.Pop(h)
	return x
}

// Pool is the modelled pool of GPU workers serving a trace in virtual time:
// requests arrive, wait in one FIFO queue, and run on a free slot of the
// least loaded serving worker. Policies add and remove workers; the pool
// counts what that costs.
type Pool struct {
	start       time.Time
	now         time.Time
	trace       []workload.Served
	concurrency int
	// startup is how long a worker takes to become Ready, drawn per
	// worker from startupRNG when the model varies.
	startup    StartupModel
	startupRNG *rand.Rand
	grace      time.Duration

	// scrape is the interval of a Prometheus scrape in front of the
	// metrics; 0 reads them fresh. scraped is the last scrape's.
	// followed turns the interval's own scrapes off for those Scrape
	// takes. scrapedAt is the last scrape's time.
	scrape     time.Duration
	nextScrape time.Time
	followed   bool
	scraped    Observation
	scrapedAt  time.Time
	// counters are the scrapes' request counters within the last
	// RateWindow, oldest first: Prometheus's samples for rate().
	counters []counterSample
	// finishedAt is when each request that finished did, in order;
	// startedAt and startWaits when each request got a slot, and how
	// long it had waited.
	finishedAt []time.Time
	startedAt  []time.Time
	startWaits []time.Duration
	// finishedGone counts the finished requests that forget dropped from
	// finishedAt.
	finishedGone int

	next    int   // next arrival
	queue   []int // waiting requests, FIFO from queueHead
	qHead   int
	waits   []time.Duration
	started []bool
	failed  []bool
	// firstToken and finished are when each request's first output token
	// came and when its last did (see Outcomes), kept in 8 bytes a
	// request (instant) as a day's trace at a large pool's rate holds
	// tens of millions.
	firstToken []instant
	finished   []instant
	done       int // requests completed or failed
	pending    completions

	workers     []*Worker // live workers, in creation order
	terminating []*Worker // deleted pods still finishing their requests
	all         []*Worker // every worker ever created
	seq         int

	// drainIdle is set when a draining worker finishes its last request:
	// its busy mark is gone, and the set controller deletes it.
	drainIdle bool

	// batched is set by SetBatched: requests decode at the inter-token
	// latency of their worker's batch instead of taking Service.
	batched bool
	itl     ITL
	tokens  []workload.Tokens
	// decodeFrom is when each started request's prefill ends; remaining
	// its output tokens still to decode; gen its completion's generation.
	decodeFrom []time.Time
	remaining  []float64
	gen        []int

	// nodes places the workers on nodes (SetNodes); nil models none.
	nodes *nodes
	// nextConsolidation is the node autoscaler's next poll; candidate the
	// node it chose at candidateAt and will disrupt if still a candidate
	// a validation later (consolidation.go).
	nextConsolidation time.Time
	candidate         *Node
	candidateAt       time.Time
	// doNotDisrupt marks busy workers' pods karpenter.sh/do-not-disrupt;
	// evictions counts the workers consolidation evicted.
	doNotDisrupt bool
	evictions    int
	// deploymentVictims is the order of the Deployment rows' deletions.
	deploymentVictims DeploymentVictims

	// serving is set by SetEngine: every worker runs the engine model,
	// and requests are routed as serving.Router says.
	serving     *EngineServing
	preemptions int
	// engineNext is the earliest end of an engine's step, as nextEvent
	// found it.
	engineNext float64

	// vllm is what the TTFT, ITL, token and KV cache metrics are read
	// from (vllm.go).
	vllm vllmCounters
}

// Router is how requests reach the workers under engine serving.
type Router string

const (
	// RouterLeastOutstanding sends each request at its arrival to the
	// Ready worker that takes work with the fewest requests outstanding
	// (running and queued on it), the oldest on a tie, where it waits in
	// that worker's own queue: a Service or an inference gateway in front
	// of vLLM. With no such worker it waits in the pool's queue until one
	// is Ready.
	RouterLeastOutstanding Router = "least-outstanding"
	// RouterPooled keeps every request in one pool-wide FIFO queue and
	// hands it to the least loaded worker with fewer than Concurrency
	// requests outstanding.
	RouterPooled Router = "pooled"
)

// ParseRouter reads --router.
func ParseRouter(s string) (Router, error) {
	switch Router(s) {
	case RouterLeastOutstanding, RouterPooled:
		return Router(s), nil
	}
	return "", fmt.Errorf("unknown router %q: want least-outstanding or pooled", s)
}

// EngineServing serves requests with the engine model (SetEngine).
type EngineServing struct {
	Engine enginemodel.Config
	Router Router
}

// SetEngine serves requests as the engine model of package engine does:
// each worker batches continuously, its speeds from a GPU profile, and
// each request takes its prompt and output tokens (the trace must have
// Tokens); Service is not used.
func (p *Pool) SetEngine(s EngineServing) error {
	if len(p.trace) > 0 && len(p.tokens) != len(p.trace) {
		return fmt.Errorf("engine serving needs the requests' token counts")
	}
	if err := s.Engine.Validate(); err != nil {
		return err
	}
	if s.Router == "" {
		s.Router = RouterLeastOutstanding
	}
	if _, err := ParseRouter(string(s.Router)); err != nil {
		return err
	}
	s.Engine = s.Engine.WithDefaults()
	p.serving = &s
	return nil
}

// Preemptions counts the sequences the workers' engines preempted when
// their KV cache ran out.
func (p *Pool) Preemptions() int { return p.preemptions }

// clock is t on the engines' clock: seconds since the pool's start.
func (p *Pool) clock(t time.Time) float64 { return float64(t.Sub(p.start)) / 1e9 }

// engineOf is w's engine, made on its first request.
func (p *Pool) engineOf(w *Worker) *enginemodel.Worker {
	if w.eng == nil {
		var err error
		w.eng, err = enginemodel.New(p.serving.Engine, p.clock(p.now), func(e enginemodel.Event) { p.engineEvent(e) })
		if err != nil {
			panic(err) // SetEngine validated the configuration
		}
	}
	return w.eng
}

// engineEvent records what an engine did to a request, at the pool's time.
func (p *Pool) engineEvent(e enginemodel.Event) {
	r := e.ID
	switch e.Kind {
	case enginemodel.Admitted:
		if !p.started[r] { // a preempted request's wait ended at its first admission
			p.started[r] = true
			p.waits[r] = p.now.Sub(p.start.Add(p.trace[r].Arrival))
			p.startedAt, p.startWaits = append(p.startedAt, p.now), append(p.startWaits, p.waits[r])
		}
	case enginemodel.FirstToken:
		p.firstToken[r] = p.instant(p.now)
		p.firstTokenLater(r, p.now)
	case enginemodel.Finished:
		p.done++
		p.finishedAt = append(p.finishedAt, p.now)
		p.finished[r] = p.instant(p.now)
		p.recordFinish(r)
	case enginemodel.Preempted:
		p.preemptions++
	case enginemodel.Rejected:
		p.failed[r] = true
		p.done++
	}
}

// advanceEngines plays the engines whose step or run ends by now, and
// lets a worker that has nothing left go as complete does.
func (p *Pool) advanceEngines() {
	// Half a nanosecond over now: the engines' float clock against the
	// pool's nanoseconds; and at least the step that made this event, so
	// that rounding can never leave it due forever.
	to := math.Max((float64(p.now.Sub(p.start))+0.5)/1e9, p.engineNext)
	var exited []*Worker
	for _, ws := range [][]*Worker{p.workers, p.terminating} {
		for _, w := range ws {
			if w.eng == nil || w.eng.Next() > to {
				continue
			}
			w.eng.Advance(to)
			if w.Busy() {
				continue
			}
			if w.Terminating {
				exited = append(exited, w)
			} else if w.Draining {
				p.drainIdle = true
			}
		}
	}
	for _, w := range exited {
		p.Remove(w) // its last request done, the process exits
	}
}

// engineAt is an engine's time on the pool's clock, rounded up to the
// nanosecond so that the engine's event is due when the pool gets there.
func (p *Pool) engineAt(t float64) time.Time {
	return p.start.Add(time.Duration(math.Ceil(t * 1e9)))
}

// ITL is a batching server's inter-token latency: Base + PerSeq × the
// sequences it runs.
type ITL struct {
	Base, PerSeq time.Duration
}

// DefaultITL is the least-squares fit of the median TPOT that vLLM 0.21.0
// measured serving Llama-3.1-8B-Instruct on one H100-80GB at concurrency
// 1, 4 and 16 (6.48, 6.59 and 10.94 ms): see docs/replay.md.
var DefaultITL = ITL{Base: 5792 * time.Microsecond, PerSeq: 316 * time.Microsecond}

// At is the inter-token latency with batch sequences running.
func (l ITL) At(batch int) time.Duration { return l.Base + time.Duration(batch)*l.PerSeq }

// SetBatched serves requests as a batching server (vLLM's continuous
// batching) does: a request takes its prefill, then decodes its output
// tokens one per inter-token latency of the batch it runs in, every
// sequence in flight on its worker counting; when the batch grows or
// shrinks, every sequence on the worker decodes at the new latency from
// that moment. Without it a request holds its slot for its Service,
// whatever else runs. The trace must have Tokens.
func (p *Pool) SetBatched(itl ITL) error {
	if len(p.trace) > 0 && len(p.tokens) != len(p.trace) {
		return fmt.Errorf("batched serving needs the requests' token counts")
	}
	if itl.Base < 0 || itl.PerSeq < 0 || itl.At(1) <= 0 {
		return fmt.Errorf("inter-token latency %v + %v per sequence: want both >= 0 and their sum above 0", itl.Base, itl.PerSeq)
	}
	n := len(p.trace)
	p.batched, p.itl = true, itl
	p.decodeFrom, p.remaining, p.gen = make([]time.Time, n), make([]float64, n), make([]int, n)
	return nil
}

// NewPool models workers of concurrency slots that become Ready startup
// after they are created, serving trace from start.
func NewPool(trace workload.Trace, start time.Time, concurrency int, startup time.Duration) *Pool {
	n := len(trace.Requests)
	return &Pool{
		start: start, now: start, trace: trace.Requests,
		concurrency: max(concurrency, 1), startup: FixedStartup(startup),
		waits: make([]time.Duration, n), started: make([]bool, n), failed: make([]bool, n),
		firstToken: make([]instant, n), finished: make([]instant, n),
		tokens: trace.Tokens,
	}
}

// SetGrace sets the pods' terminationGracePeriodSeconds: how long a
// deleted worker may keep finishing its requests (see Delete).
func (p *Pool) SetGrace(grace time.Duration) { p.grace = max(grace, 0) }

// Grace is the pods' termination grace period.
func (p *Pool) Grace() time.Duration { return p.grace }

// Now is the pool's virtual time.
func (p *Pool) Now() time.Time { return p.now }

// Start is the time of the first arrival.
func (p *Pool) Start() time.Time { return p.start }

// Concurrency is the slots of one worker.
func (p *Pool) Concurrency() int { return p.concurrency }

// SetStartup draws each new worker's start-up from m, seeded, in the
// order the workers are created.
func (p *Pool) SetStartup(m StartupModel, seed uint64) {
	p.startup = m
	p.startupRNG = rand.New(rand.NewPCG(seed, 0x5747)) // a stream apart from the trace's
}

// Startup is the median time a new worker takes to become Ready. The
// replay's policies do not read it: ours learns start-ups from the tasks'
// creation and Ready times, as the controller does.
func (p *Pool) Startup() time.Duration { return p.startup.Median }

// drawStartup is the start-up of the next worker.
func (p *Pool) drawStartup() time.Duration { return p.startup.draw(p.startupRNG) }

// Workers are the live workers, oldest first. The slice is the pool's own.
func (p *Pool) Workers() []*Worker { return p.workers }

// AllWorkers are every worker created, live or removed.
func (p *Pool) AllWorkers() []*Worker { return p.all }

// Finished reports whether every request of the trace has completed or failed.
func (p *Pool) Finished() bool { return p.done == len(p.trace) }

// ArrivalsDone reports whether every request has arrived.
func (p *Pool) ArrivalsDone() bool { return p.next == len(p.trace) }

// Add creates n workers at the pool's time; each becomes Ready after its
// own start-up.
func (p *Pool) Add(n int) []*Worker {
	return p.add(n, addStarting)
}

// AddReady creates n workers that are Ready at once: the pool a policy
// starts with. Each took its own start-up before the replay began, which
// its task shows.
func (p *Pool) AddReady(n int) []*Worker {
	ws := p.add(n, addReady)
	p.dispatch()
	return ws
}

// AddPending creates n workers that become Ready only when MarkReady says
// so: the workers of a real pool, whose readiness the cluster reports.
func (p *Pool) AddPending(n int) []*Worker {
	return p.add(n, addPending)
}

// AddAhead creates n workers that are Ready now, each created its own
// start-up earlier and paid for since: what a schedule that knows the
// future (oracle-slo) does, starting a worker exactly one start-up before
// it is needed.
func (p *Pool) AddAhead(n int) []*Worker {
	ws := p.add(n, addAhead)
	p.dispatch()
	return ws
}

// addKind is how add makes a worker Ready.
type addKind int

const (
	addStarting addKind = iota // after a start-up drawn now
	addReady                   // at once, its start-up drawn for before
	addPending                 // when MarkReady says so
	addAhead                   // at once, created a drawn start-up before
)

// MarkReady makes w Ready now, if it is not yet, and hands it work.
func (p *Pool) MarkReady(w *Worker) {
	if w.ReadyAt.After(p.now) {
		w.ReadyAt = p.now
		p.dispatch()
	}
}

// never is the ReadyAt of a worker whose readiness is not known yet.
var never = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// add creates n workers of kind: Ready after their start-up (or later
// when their node is still launching), at once on nodes up already, or
// pending.
func (p *Pool) add(n int, kind addKind) []*Worker {
	var out []*Worker
	for range n {
		p.seq++
		w := &Worker{Name: fmt.Sprintf("worker-%d", p.seq), Created: p.now, ReadyAt: never}
		startup := time.Duration(0)
		switch kind {
		case addStarting:
			startup = p.drawStartup()
			w.ReadyAt = p.now.Add(startup)
		case addReady:
			w.ReadyAt, w.StartedBefore = p.now, p.drawStartup()
		case addAhead:
			w.ReadyAt = p.now
			w.Created = p.now.Add(-p.drawStartup())
		}
		if p.nodes != nil {
			w.Node = p.nodes.place(p.now, kind == addReady || kind == addAhead)
			if kind == addStarting && w.Node.Up.After(p.now) {
				w.ReadyAt = w.Node.Up.Add(startup)
			}
		}
		p.workers = append(p.workers, w)
		p.all = append(p.all, w)
		out = append(out, w)
	}
	return out
}

// Remove kills a worker now. Requests in flight on it are lost and count
// as failed.
func (p *Pool) Remove(w *Worker) {
	if !w.Removed.IsZero() {
		return
	}
	// The first tokens that came by now count before its requests fail.
	p.flushFirstTokens()
	w.Removed = p.now
	for _, r := range w.inFlight {
		p.failed[r] = true
		p.done++
	}
	w.inFlight = nil
	if w.eng != nil {
		// Its running and queued requests die with it.
		for _, r := range w.eng.Abort() {
			p.failed[r] = true
			p.done++
		}
	}
	p.workers = without(p.workers, w)
	p.terminating = without(p.terminating, w)
	if w.Node != nil {
		p.nodes.leave(w.Node, p.now)
	}
}

// Delete deletes a worker's pod as the API server and kubelet do: the pod
// leaves the Service's endpoints at once, so the router sends it nothing
// more, and it leaves the workload's count; it gets SIGTERM and the grace
// period to finish its requests, exits as soon as it has none (a serving
// process that drains on SIGTERM), and at the grace's end is killed with
// what is still in flight. It holds its GPU until it exits.
func (p *Pool) Delete(w *Worker) {
	if !w.Removed.IsZero() || w.Terminating {
		return
	}
	if !w.Busy() || p.grace <= 0 {
		p.Remove(w)
		return
	}
	w.Terminating, w.ExitBy = true, p.now.Add(p.grace)
	p.workers = without(p.workers, w)
	p.terminating = append(p.terminating, w)
}

// Terminating are the deleted workers that still finish their requests.
func (p *Pool) Terminating() []*Worker { return p.terminating }

func without(ws []*Worker, w *Worker) []*Worker {
	for i, x := range ws {
		if x == w {
			return append(ws[:i], ws[i+1:]...)
		}
	}
	return ws
}

// Drain marks a worker draining: it takes no new requests.
func (p *Pool) Drain(w *Worker) {
	if !w.Draining {
		w.Draining, w.DrainStarted = true, p.now
	}
}

// Undrain takes a drain back: the worker takes requests again.
func (p *Pool) Undrain(w *Worker) {
	w.Draining, w.DrainStarted = false, time.Time{}
	p.dispatch()
}

// forget drops the times that no window reads any more: of the requests
// that got a slot, finished or had their first token before the longest
// window, all but the last, whose cumulative counts the windows subtract
// from. It moves what it keeps to the front of the slice it was in, but
// for the waits, which it copies to a new one, as a scrape's Started may
// still hold the old; and only once half of it is stale, so that each
// time is moved a bounded number of times.
func (p *Pool) forget() {
	from := p.now.Add(-max(RateWindow, WaitWindow))
	// The token buckets' window first: the head then lies past every
	// finished request dropped below.
	p.slideOutputs()
	v := &p.vllm
	if k := stale(p.finishedAt, from); k > 0 {
		p.finishedGone += k
		p.finishedAt, v.finish, v.finishBuckets = slices.Delete(p.finishedAt, 0, k), slices.Delete(v.finish, 0, k), slices.Delete(v.finishBuckets, 0, k)
		v.outputsHead -= k
	}
	if k := stale(p.startedAt, from); k > 0 {
		p.startedAt, p.startWaits = slices.Delete(p.startedAt, 0, k), slices.Clone(p.startWaits[k:])
	}
	if k := min(stale(v.firstAt, from), v.windowHead); k > 0 {
		v.firstAt, v.firstBucket, v.promptCum = slices.Delete(v.firstAt, 0, k), slices.Delete(v.firstBucket, 0, k), slices.Delete(v.promptCum, 0, k)
		v.windowHead -= k
	}
}

// stale is how many of times (in order) forget drops: those at or before
// from but the last of them, once they are at least half of times and
// more than a few.
func stale(times []time.Time, from time.Time) int {
	k := sort.Search(len(times), func(i int) bool { return times[i].After(from) }) - 1
	if k < forgetAtLeast || 2*k < len(times) {
		return 0
	}
	return k
}

// forgetAtLeast is the fewest times forget drops at once.
var forgetAtLeast = 1024

// completed is how many requests finished.
func (p *Pool) completed() int { return p.finishedGone + len(p.finishedAt) }

// Observe is what the backend knows now.
func (p *Pool) Observe() Observation {
	p.forget()
	o := Observation{Waiting: len(p.queue) - p.qHead, Concurrency: p.concurrency}
	for _, w := range p.terminating {
		o.Running += w.InFlight()
		o.Waiting += w.Queued()
	}
	for _, w := range p.workers {
		o.Running += w.InFlight()
		o.Waiting += w.Queued()
		switch {
		case w.Draining:
			o.Draining++
		case !w.Ready(p.now):
			o.Starting++
		default:
			o.Serving++
			o.InFlight += w.InFlight()
		}
	}
	from := p.now.Add(-RateWindow)
	arrived := p.next - sort.Search(p.next, func(i int) bool { return p.start.Add(p.trace[i].Arrival).After(from) })
	finished := len(p.finishedAt) - sort.Search(len(p.finishedAt), func(i int) bool { return p.finishedAt[i].After(from) })
	// Within the trace's first minute the counters have only run since its
	// start: a rate over the full minute would read the load as a fraction
	// of what it is.
	window := min(RateWindow, p.now.Sub(p.start)).Seconds()
	if window > 0 {
		o.Arrivals = float64(arrived) / window
		o.Completions = float64(finished) / window
	}
	o.Arrived, o.Completed = p.next, p.completed()
	p.observeVLLM(&o, window, len(p.finishedAt)-finished)
	o.KVCacheUsage, o.KVCacheKnown = p.kvCacheUsage()
	return o
}

// Advance plays the trace up to and including to. It stops early, right
// after a draining worker finishes its last request, and reports that, so
// that the set controller can delete the worker at that moment.
func (p *Pool) Advance(to time.Time) (stopped time.Time, drainIdle bool) {
	for {
		next, kind := p.nextEvent()
		if kind == eventNone || next.After(to) {
			p.scrapeUntil(to, true)
			if to.After(p.now) {
				p.now = to
			}
			return p.now, false
		}
		// A scrape at an event's instant sees the pool after it.
		p.scrapeUntil(next, false)
		p.now = next
		p.flushFirstTokens()
		switch kind {
		case eventCompletion:
			c := popHeap(&p.pending)
			p.complete(c)
		case eventReady:
			// Nothing to do but hand out work: Ready follows from the time.
		case eventExit:
			for _, w := range append([]*Worker(nil), p.terminating...) {
				if !w.ExitBy.After(p.now) {
					p.Remove(w) // SIGKILL at the grace's end
				}
			}
		case eventArrival:
			p.queue = append(p.queue, p.next)
			p.next++
		case eventConsolidation:
			p.consolidate()
			p.nextConsolidation = p.now.Add(ConsolidationPoll)
		case eventEngine:
			p.advanceEngines()
		}
		p.dispatch()
		if p.drainIdle {
			p.drainIdle = false
			return p.now, true
		}
	}
}

type eventKind int

const (
	eventNone eventKind = iota
	eventCompletion
	eventReady
	eventExit
	eventArrival
	eventConsolidation
	// eventEngine is a worker's engine ending a step or a run of steps.
	eventEngine
)

// nextEvent is the earliest pending event: completions (and engines'
// steps) first, then workers becoming Ready, then terminating workers
// killed at their grace's end (a request that ends exactly then is done),
// then arrivals, so that a slot freed at an instant serves a request
// arriving at that instant.
func (p *Pool) nextEvent() (time.Time, eventKind) {
	var at time.Time
	kind := eventNone
	consider := func(t time.Time, k eventKind) {
		if kind == eventNone || t.Before(at) {
			at, kind = t, k
		}
	}
	for len(p.pending) > 0 && (!p.pending[0].worker.Removed.IsZero() || p.stale(p.pending[0])) {
		popHeap(&p.pending) // lost with its worker, or rescheduled
	}
	if len(p.pending) > 0 {
		consider(p.pending[0].at, eventCompletion)
	}
	if p.serving != nil {
		next := math.Inf(1)
		for _, ws := range [][]*Worker{p.workers, p.terminating} {
			for _, w := range ws {
				if w.eng != nil {
					next = math.Min(next, w.eng.Next())
				}
			}
		}
		if !math.IsInf(next, 1) {
			p.engineNext = next
			consider(p.engineAt(next), eventEngine)
		}
	}
	for _, w := range p.workers {
		if w.ReadyAt.After(p.now) {
			consider(w.ReadyAt, eventReady)
		}
	}
	for _, w := range p.terminating {
		consider(w.ExitBy, eventExit)
	}
	if p.next < len(p.trace) {
		consider(p.start.Add(p.trace[p.next].Arrival), eventArrival)
	}
	if p.nodes != nil && p.nodes.model.consolidation() == ConsolidationWhenEmptyOrUnderutilized && kind != eventNone {
		consider(p.nextConsolidation, eventConsolidation)
	}
	return at, kind
}

// stale reports a completion that batched serving has rescheduled.
func (p *Pool) stale(c completion) bool { return p.batched && c.gen != p.gen[c.req] }

// progress drains the remaining tokens of w's sequences from their last
// progress until now, at the latency of the batch they ran in.
func (p *Pool) progress(w *Worker) {
	if !p.batched {
		return
	}
	itl := p.itl.At(len(w.inFlight)).Seconds()
	for _, r := range w.inFlight {
		from := w.progressed
		if p.decodeFrom[r].After(from) {
			from = p.decodeFrom[r]
		}
		if p.now.After(from) {
			p.remaining[r] = max(p.remaining[r]-p.now.Sub(from).Seconds()/itl, 0)
		}
	}
	w.progressed = p.now
}

// reschedule gives each of w's sequences its completion at the latency of
// the batch it runs in now.
func (p *Pool) reschedule(w *Worker) {
	if !p.batched {
		return
	}
	itl := p.itl.At(len(w.inFlight))
	for _, r := range w.inFlight {
		from := p.now
		if p.decodeFrom[r].After(from) {
			from = p.decodeFrom[r]
		}
		p.gen[r]++
		at := from.Add(time.Duration(p.remaining[r] * float64(itl)))
		pushHeap(&p.pending, completion{at: at, req: r, worker: w, gen: p.gen[r]})
	}
}

func (p *Pool) complete(c completion) {
	w := c.worker
	p.progress(w)
	for i, r := range w.inFlight {
		if r == c.req {
			w.inFlight = append(w.inFlight[:i], w.inFlight[i+1:]...)
			break
		}
	}
	p.done++
	p.finishedAt = append(p.finishedAt, p.now)
	p.finished[c.req] = p.instant(p.now)
	p.recordFinish(c.req)
	p.reschedule(w)
	if w.Terminating && len(w.inFlight) == 0 {
		p.Remove(w) // its last request done, the process exits
		return
	}
	if w.Draining && len(w.inFlight) == 0 {
		p.drainIdle = true
	}
}

// dispatch hands waiting requests to free slots, least loaded worker first
// (a least-outstanding-requests router), the oldest on a tie.
func (p *Pool) dispatch() {
	if p.serving != nil {
		p.route()
		return
	}
	for p.qHead < len(p.queue) {
		var best *Worker
		for _, w := range p.workers {
			if w.Draining || !w.Ready(p.now) || len(w.inFlight) >= p.concurrency {
				continue
			}
			if best == nil || len(w.inFlight) < len(best.inFlight) {
				best = w
			}
		}
		if best == nil {
			break
		}
		r := p.queue[p.qHead]
		p.qHead++
		arrival := p.start.Add(p.trace[r].Arrival)
		p.waits[r] = p.now.Sub(arrival)
		p.startedAt, p.startWaits = append(p.startedAt, p.now), append(p.startWaits, p.waits[r])
		p.started[r] = true
		first := p.now
		if p.tokens != nil {
			first = p.now.Add(min(p.tokens[r].Prefill, p.trace[r].Service))
		}
		p.firstToken[r] = p.instant(first)
		if !p.batched {
			p.firstTokenLater(r, first)
			best.inFlight = append(best.inFlight, r)
			pushHeap(&p.pending, completion{at: p.now.Add(p.trace[r].Service), req: r, worker: best})
			continue
		}
		p.progress(best)
		p.decodeFrom[r], p.remaining[r] = p.now.Add(p.tokens[r].Prefill), p.tokens[r].OutputTokens
		p.firstToken[r] = p.instant(p.decodeFrom[r])
		p.firstTokenLater(r, p.decodeFrom[r])
		best.inFlight = append(best.inFlight, r)
		p.reschedule(best)
	}
	if p.qHead > 1024 && p.qHead*2 > len(p.queue) {
		p.queue = append(p.queue[:0], p.queue[p.qHead:]...)
		p.qHead = 0
	}
}

// route sends the requests of the pool's queue to the workers' engines
// as the router does: least-outstanding sends every one to a Ready worker
// that takes work, pooled only up to Concurrency outstanding per worker.
// A request queued on a worker that is draining or deleted stays there
// and is served by it: it has been sent, as a gateway cannot take back a
// request a server has accepted.
func (p *Pool) route() {
	pooled := p.serving.Router == RouterPooled
	for p.qHead < len(p.queue) {
		var best *Worker
		bestN := 0
		for _, w := range p.workers {
			if w.Draining || !w.Ready(p.now) {
				continue
			}
			n := 0
			if w.eng != nil {
				n = w.eng.Outstanding()
			}
			if pooled && n >= p.concurrency {
				continue
			}
			if best == nil || n < bestN {
				best, bestN = w, n
			}
		}
		if best == nil {
			break
		}
		r := p.queue[p.qHead]
		p.qHead++
		tok := p.tokens[r]
		p.engineOf(best).Enqueue(r, int(math.Round(tok.InputTokens)), int(math.Round(tok.OutputTokens)), p.clock(p.now))
	}
	if p.qHead > 1024 && p.qHead*2 > len(p.queue) {
		p.queue = append(p.queue[:0], p.queue[p.qHead:]...)
		p.qHead = 0
	}
}

// Abandon fails every request that has not started: the replay ends
// without serving them.
func (p *Pool) Abandon() {
	for _, ws := range [][]*Worker{p.workers, p.terminating} {
		for _, w := range ws {
			if w.eng == nil {
				continue
			}
			for _, r := range w.eng.DropWaiting() {
				p.failed[r] = true
				p.done++
			}
		}
	}
	for _, r := range p.queue[p.qHead:] {
		p.failed[r] = true
		p.done++
	}
	p.queue, p.qHead = nil, 0
	for ; p.next < len(p.trace); p.next++ {
		p.failed[p.next] = true
		p.done++
	}
}

// GPUHours is the time every worker lived, from creation to removal (or
// until, for the live ones), starting and draining included.
func (p *Pool) GPUHours(until time.Time) float64 {
	var total time.Duration
	for _, w := range p.all {
		end := w.Removed
		if end.IsZero() {
			end = until
		}
		total += end.Sub(w.Created)
	}
	return total.Hours()
}
