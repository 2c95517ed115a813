package sim

import (
	"time"
)

// Policy scales a modelled pool. The engine (Play) calls Step every
// Period, and Sync whenever the policy asked to be woken (Wake) or a
// draining worker finished its last request.
type Policy interface {
	Name() string
	// Start creates the pool the policy begins with, at the first arrival.
	Start(p *Pool)
	// Period is the time between two evaluations.
	Period() time.Duration
	// Step is one evaluation at the pool's time.
	Step(p *Pool)
	// Wake is when the policy wants Sync called before the next Step;
	// zero for never.
	Wake() time.Time
	// Sync makes the pool match the policy's count, as a workload
	// controller does between evaluations.
	Sync(p *Pool)
	// Replicas is the count the policy asks for (spec.replicas).
	Replicas() int32
}

// Sample is the pool at one moment of the replay.
type Sample struct {
	// At is the time from the first arrival, in seconds.
	At float64 `json:"t_s"`
	// Demand is the requests in flight and waiting, in workers
	// ((in flight + waiting) / concurrency).
	Demand float64 `json:"demand_workers"`
	// Replicas is the count asked for; Workers the live workers (starting
	// and draining included); Ready the Ready ones.
	Replicas int32 `json:"replicas"`
	Workers  int   `json:"workers"`
	Ready    int   `json:"ready"`
	// Queue is the requests waiting for a slot.
	Queue int `json:"queue"`
	// LoadIndex is what the backend reports.
	LoadIndex float64 `json:"load_index"`
}

// PlayOptions bound a replay.
type PlayOptions struct {
	// SampleEvery is the time between two samples of the series.
	SampleEvery time.Duration
	// Limit is how long after the last arrival the replay may run before
	// the requests still waiting count as failed.
	Limit time.Duration
	Load  LoadKind
	// SLO are the targets every request is measured against.
	SLO SLOTargets
}

// Play replays the pool's trace under a policy and measures it.
func Play(p *Pool, pol Policy, opts PlayOptions) Result {
	pol.Start(p)
	e := engine{p: p, pol: pol, opts: opts, peak: len(p.Workers())}
	e.run()
	return e.result()
}

type engine struct {
	p      *Pool
	pol    Policy
	opts   PlayOptions
	series []Sample
	events int
	peak   int
}

func (e *engine) run() {
	p, pol := e.p, e.pol
	period := max(pol.Period(), time.Millisecond)
	sampleEvery := max(e.opts.SampleEvery, time.Second)
	lastArrival := p.Start()
	if n := len(p.trace); n > 0 {
		lastArrival = p.Start().Add(p.trace[n-1].Arrival)
	}
	limit := lastArrival.Add(e.opts.Limit)
	nextTick, nextSample := p.Now(), p.Now()
	for {
		t := minTime(nextTick, nextSample)
		PlayUntil(p, pol, t, e.act)
		if !t.Before(nextSample) {
			e.sample()
			nextSample = nextSample.Add(sampleEvery)
		}
		if !t.Before(nextTick) {
			e.act(pol.Step)
			nextTick = nextTick.Add(period)
		}
		if p.Finished() {
			e.sample()
			return
		}
		if p.Now().After(limit) {
			p.Abandon()
			e.sample()
			return
		}
	}
}

// PlayUntil plays the pool up to to. On the way it runs the policy's Sync
// (through act) whenever a draining worker finishes its last request or
// the policy's wake time comes, as a workload controller reacts to events
// between evaluations.
func PlayUntil(p *Pool, pol Policy, to time.Time, act func(func(*Pool))) {
	for {
		t := to
		if w := pol.Wake(); !w.IsZero() && w.Before(t) {
			t = w
		}
		if _, drainIdle := p.Advance(t); drainIdle {
			act(pol.Sync)
			continue
		}
		if w := pol.Wake(); !w.IsZero() && !w.After(p.Now()) {
			act(pol.Sync)
			continue
		}
		if !p.Now().Before(to) {
			return
		}
	}
}

// act runs one policy action and counts what it changed.
func (e *engine) act(f func(*Pool)) {
	before := e.pol.Replicas()
	f(e.p)
	if e.pol.Replicas() != before {
		e.events++
	}
	e.peak = max(e.peak, len(e.p.Workers()))
}

func (e *engine) sample() {
	p := e.p
	o := p.Observe()
	var inFlight int
	for _, w := range p.Workers() {
		inFlight += w.InFlight()
	}
	e.series = append(e.series, Sample{
		At:        p.Now().Sub(p.Start()).Seconds(),
		Demand:    float64(inFlight+o.Waiting) / float64(p.Concurrency()),
		Replicas:  e.pol.Replicas(),
		Workers:   o.Workers(),
		Ready:     o.Ready(),
		Queue:     o.Waiting,
		LoadIndex: o.LoadIndex(e.opts.Load),
	})
}

func (e *engine) result() Result {
	p := e.p
	r := p.Measure(e.opts.SLO)
	r.Name = e.pol.Name()
	r.GPUHours = p.GPUHours(p.Now())
	r.ScaleEvents = e.events
	r.PeakReplicas = e.peak
	r.NodeHours = p.NodeHours(p.Now())
	r.PeakNodes = p.PeakNodes()
	r.Evictions = p.Evictions()
	r.Series = e.series
	return r
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
