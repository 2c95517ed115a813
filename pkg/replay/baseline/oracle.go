package baseline

import (
	"sort"
	"time"

	enginemodel "github.com/gputask/gputask-controller/pkg/replay/engine"
	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// need is how many workers the requests in flight fill from at on, if
// every request starts on arrival: load is the sum of their shares of a
// worker, in units of unit.
type need struct {
	at      time.Duration
	load    int64
	workers int32
}

// span is one request's stay from its arrival: from to to it takes share
// units of a worker.
type span struct {
	from, to time.Duration
	share    int64
}

// neededOverTime is the step function of need over the trace on workers
// of concurrency slots, each request taking one slot for its service.
func neededOverTime(tr workload.Trace, concurrency int) []need {
	spans := make([]span, len(tr.Requests))
	for i, r := range tr.Requests {
		spans[i] = span{r.Arrival, r.Arrival + r.Service, 1}
	}
	return needOf(spans, int64(max(concurrency, 1)))
}

// needOf is the step function of need over spans, a worker holding unit.
func needOf(spans []span, unit int64) []need {
	type edge struct {
		at    time.Duration
		delta int64
	}
	edges := make([]edge, 0, 2*len(spans))
	for _, s := range spans {
		edges = append(edges, edge{s.from, +s.share}, edge{s.to, -s.share})
	}
	// Ends before starts at the same instant: a slot freed then is reused.
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at != edges[j].at {
			return edges[i].at < edges[j].at
		}
		return edges[i].delta < edges[j].delta
	})
	var out []need
	var load int64
	for i, e := range edges {
		load += e.delta
		if i+1 < len(edges) && edges[i+1].at == e.at {
			continue
		}
		workers := int32((load + unit - 1) / unit)
		if n := len(out); n > 0 && out[n-1].workers == workers {
			out[n-1].load = max(out[n-1].load, load)
			continue
		}
		out = append(out, need{at: e.at, load: load, workers: workers})
	}
	return out
}

// Oracle is the lower bound: it knows every arrival. Capacity level k (the
// k-th worker) is needed while the requests in flight, every request
// starting on arrival, fill more than k−1 workers. Each level's worker is
// created exactly one startup before it is needed and removed the moment it
// falls idle, unless it is needed again within one startup, when keeping it
// costs less than a new one. No request waits and none is lost. Requests
// are assumed to move freely between workers, which no router does, so
// no real policy that lets no request wait can beat it.
//
// On slots a request fills one of a worker's Concurrency slots for its
// service. On an engine (Engine set) a worker is sized as that engine
// serves: see engineServer.serve.
type Oracle struct {
	Concurrency int
	Startup     time.Duration
	// Nodes, when set, packs the levels on nodes (see nodeHours).
	Nodes *sim.NodeModel
	// SLO are the targets its requests are measured against.
	SLO sim.SLOTargets
	// Engine, when set, is the engine every worker runs; the trace must
	// have token counts.
	Engine *enginemodel.Config
}

// shareUnit is a whole worker in an engine oracle's shares.
const shareUnit = 1 << 20

// engineRequest is how one request is served by the engine oracle.
// rejected is set for one whose prompt and output do not fit the KV cache
// even alone, which the engine fails at once.
type engineRequest struct {
	ttft, itl, stay time.Duration
	share           int64
	rejected        bool
}

// engineServer serves a trace's requests as the engine oracle does,
// remembering the batch of each context it has sized.
type engineServer struct {
	o       Oracle
	e       enginemodel.Config
	batches map[float64]int
}

func (o Oracle) engineServer() *engineServer {
	return &engineServer{o: o, e: o.Engine.WithDefaults(), batches: map[float64]int{}}
}

// batch is the largest batch at a mean context of ctx that keeps the
// SLO's ITL (every batch if none is set) within the engine's KV cache and
// scheduler, and at least one.
func (s *engineServer) batch(ctx float64) int {
	if b, ok := s.batches[ctx]; ok {
		return b
	}
	limit := s.e.MaxNumSeqs
	if ctx > 0 {
		limit = min(limit, int(float64(s.e.CacheTokens())/ctx))
	}
	b := 1
	for b < limit && (s.o.SLO.ITL <= 0 || s.e.Profile.ITL(b+1, ctx) <= s.o.SLO.ITL) {
		b++
	}
	s.batches[ctx] = b
	return b
}

// serve is how the engine oracle serves a request of tok: it decodes in
// a batch of its own mean context (its prompt and half its output) at
// that batch's ITL; its share of a worker over its stay is its prefill, a
// whole worker's time, and its decode steps over that batch, averaged
// over the stay. Where one sequence alone is over the ITL it takes a
// worker to itself. Summed over the requests in flight the shares are the
// workers' time that keeps each step within the ITL: a step of batch b at
// ITL(b) beside f of a worker's time on prompts takes ITL(b) + f × step.
func (s *engineServer) serve(tok workload.Tokens) engineRequest {
	blocks := func(tokens int64) int64 { return (tokens + int64(s.e.BlockSize) - 1) / int64(s.e.BlockSize) }
	if tokens := int64(max(tok.InputTokens, 1) + max(tok.OutputTokens, 1)); blocks(tokens) > s.e.CacheTokens()/int64(s.e.BlockSize) {
		return engineRequest{rejected: true}
	}
	ctx := tok.InputTokens + tok.OutputTokens/2
	batch := s.batch(ctx)
	itl := s.e.Profile.ITL(batch, ctx)
	decode := time.Duration(max(tok.OutputTokens-1, 0) * float64(itl))
	stay := max(tok.Prefill+decode, time.Nanosecond)
	busy := float64(tok.Prefill) + float64(decode)/float64(batch)
	return engineRequest{
		ttft: tok.Prefill, itl: itl, stay: stay,
		share: max(int64(busy/float64(stay)*shareUnit), 1),
	}
}

// needs is the step function of the workers the trace fills.
func (o Oracle) needs(tr workload.Trace) []need {
	if o.Engine == nil {
		return neededOverTime(tr, o.Concurrency)
	}
	s := o.engineServer()
	spans := make([]span, 0, len(tr.Requests))
	for i, r := range tr.Requests {
		if e := s.serve(tr.Tokens[i]); !e.rejected {
			spans = append(spans, span{r.Arrival, r.Arrival + e.stay, e.share})
		}
	}
	return needOf(spans, shareUnit)
}

// unit is a whole worker in the oracle's need.
func (o Oracle) unit() int64 {
	if o.Engine != nil {
		return shareUnit
	}
	return int64(max(o.Concurrency, 1))
}

// outcomes are what the oracle's requests see: each starts on arrival
// and takes its fixed service (on an engine, its prefill and its decode
// steps at its batch's ITL), its first token after its prefill.
func (o Oracle) outcomes(tr workload.Trace) []sim.Outcome {
	out := make([]sim.Outcome, len(tr.Requests))
	var s *engineServer
	if o.Engine != nil {
		s = o.engineServer()
	}
	for i, r := range tr.Requests {
		if s != nil {
			e := s.serve(tr.Tokens[i])
			if e.rejected {
				out[i] = sim.Outcome{Failed: true}
				continue
			}
			out[i] = sim.Outcome{Started: true, TTFT: e.ttft, E2E: e.stay}
			if tr.Tokens[i].OutputTokens > 1 {
				out[i].ITL = e.itl
			}
			continue
		}
		out[i] = sim.Outcome{Started: true, TTFT: r.Service, E2E: r.Service}
		if tr.Tokens != nil {
			tok := tr.Tokens[i]
			out[i].TTFT = min(tok.Prefill, r.Service)
			if tok.OutputTokens > 1 {
				out[i].ITL = time.Duration(float64(r.Service-out[i].TTFT) / (tok.OutputTokens - 1))
			}
		}
	}
	return out
}

// life is one worker of the oracle, at capacity level level+1.
type life struct {
	created, removed time.Duration
	level            int
}

// Run computes the oracle's figures on tr, sampled every sampleEvery.
func (o Oracle) Run(tr workload.Trace, sampleEvery time.Duration) sim.Result {
	needs := o.needs(tr)
	lives := o.lives(needs)
	r := sim.Measure(o.outcomes(tr), o.SLO)
	r.Name = PolicyOracle
	if len(needs) == 0 { // no request, or none an engine can hold
		return r
	}
	end := needs[len(needs)-1].at
	changes := make([]workerChange, 0, 2*len(lives))
	var total time.Duration
	for _, l := range lives {
		total += l.removed - l.created
		changes = append(changes, workerChange{l.created, +1}, workerChange{l.removed, -1})
	}
	r.GPUHours = total.Hours()
	if o.Nodes != nil {
		r.NodeHours, r.PeakNodes = o.nodeHours(lives, end)
	}
	sort.Slice(changes, func(i, j int) bool {
		if changes[i].at != changes[j].at {
			return changes[i].at < changes[j].at
		}
		return changes[i].delta < changes[j].delta
	})

	// The worker count after each instant at which it changes.
	var counts []workerChange
	workers := 0
	for i, c := range changes {
		workers += c.delta
		if i+1 < len(changes) && changes[i+1].at == c.at {
			continue
		}
		if n := len(counts); n > 0 && counts[n-1].delta == workers {
			continue
		}
		counts = append(counts, workerChange{at: c.at, delta: workers})
		r.ScaleEvents++
		r.PeakReplicas = max(r.PeakReplicas, workers)
	}

	// Sample both step functions.
	sampleEvery = max(sampleEvery, time.Second)
	ni, ci := 0, 0
	var cur need
	live := 0
	for at := time.Duration(0); ; at += sampleEvery {
		if at > end {
			at = end
		}
		for ni < len(needs) && needs[ni].at <= at {
			cur = needs[ni]
			ni++
		}
		for ci < len(counts) && counts[ci].at <= at {
			live = counts[ci].delta
			ci++
		}
		r.Series = append(r.Series, o.sample(at, cur, live))
		if at == end {
			break
		}
	}
	return r
}

// workerChange is a change of the oracle's worker count by delta at at
// (or, in a list of counts, the count from at on).
type workerChange struct {
	at    time.Duration
	delta int
}

func (o Oracle) sample(at time.Duration, n need, workers int) sim.Sample {
	u := float64(o.unit())
	return sim.Sample{
		At: at.Seconds(), Demand: float64(n.load) / u,
		Replicas: int32(workers), Workers: workers, Ready: int(n.workers),
		LoadIndex: float64(n.load) / (float64(max(n.workers, 1)) * u),
	}
}

// lives turns the need into the oracle's workers: one per capacity level
// and period of use, where periods less than a startup apart are merged.
// A level needed at the very start is Ready then, as every policy's first
// workers are.
func (o Oracle) lives(needs []need) []life {
	var lives []life
	var open []int // by level − 1: index in lives of its last worker, or -1
	prev := int32(0)
	for _, n := range needs {
		for k := prev; k < n.workers; k++ { // level k+1 turns on
			if int(k) >= len(open) {
				open = append(open, -1)
			}
			if j := open[k]; j >= 0 && n.at-lives[j].removed <= o.Startup {
				lives[j].removed = -1 // kept through the gap: still alive
				continue
			}
			created := n.at - o.Startup
			if n.at == 0 {
				created = 0
			}
			lives = append(lives, life{created: created, removed: -1, level: int(k)})
			open[k] = len(lives) - 1
		}
		for k := n.workers; k < prev; k++ { // level k+1 falls idle
			lives[open[k]].removed = n.at
		}
		prev = n.workers
	}
	for k := int32(0); k < prev; k++ {
		lives[open[k]].removed = needs[len(needs)-1].at
	}
	return lives
}

// nodeHours is the node-hours and peak nodes of the lower bound: levels
// 1 to GPUsPerNode on the first node, the next ones on the second, and so
// on, which packs as tightly as any placement can, as the lowest levels
// are the most used. A node is launched its start-up before its first
// worker and removed its grace after its last, and kept through a gap
// shorter than a launch and a grace.
func (o Oracle) nodeHours(lives []life, end time.Duration) (float64, int) {
	m := *o.Nodes
	byNode := map[int][]life{}
	for _, l := range lives {
		byNode[l.level/m.GPUsPerNode] = append(byNode[l.level/m.GPUsPerNode], l)
	}
	var total time.Duration
	var changes []workerChange
	for _, ls := range byNode {
		sort.Slice(ls, func(i, j int) bool { return ls[i].created < ls[j].created })
		launch := func(l life) time.Duration {
			if l.created == 0 {
				return 0
			}
			return l.created - m.Startup
		}
		from, to := launch(ls[0]), ls[0].removed
		flush := func() {
			stop := min(to+m.Grace, end)
			total += stop - from
			changes = append(changes, workerChange{from, +1}, workerChange{stop, -1})
		}
		for _, l := range ls[1:] {
			if launch(l) <= to+m.Grace {
				to = max(to, l.removed)
				continue
			}
			flush()
			from, to = launch(l), l.removed
		}
		flush()
	}
	sort.Slice(changes, func(i, j int) bool {
		if changes[i].at != changes[j].at {
			return changes[i].at < changes[j].at
		}
		return changes[i].delta < changes[j].delta
	})
	peak, up := 0, 0
	for _, c := range changes {
		up += c.delta
		peak = max(peak, up)
	}
	return total.Hours(), peak
}
