package sim

import (
	"iter"
	"time"
)

// Outcome is what one request of the trace saw: what a user of LLM
// serving measures (time to first token, inter-token latency, end to end)
// beside the wait for a worker.
type Outcome struct {
	// Started is set once a worker admitted the request; Failed when it
	// was lost with its worker or never served.
	Started, Failed bool
	// Wait is from arrival to admission on a worker.
	Wait time.Duration
	// TTFT is from arrival to the first output token.
	TTFT time.Duration
	// ITL is the mean gap between its output tokens (0 with one token or
	// none).
	ITL time.Duration
	// E2E is from arrival to the last token.
	E2E time.Duration
}

// Outcomes is every request's outcome, by index in the trace. A request
// still in flight has Started set and zero E2E; one that got no token
// has zero TTFT too.
func (p *Pool) Outcomes() []Outcome {
	out := make([]Outcome, 0, len(p.trace))
	for o := range p.outcomes() {
		out = append(out, o)
	}
	return out
}

// Measure is sim.Measure of p's outcomes, made one at a time rather than
// held all at once.
func (p *Pool) Measure(slo SLOTargets) Result {
	return measure(len(p.trace), p.outcomes(), slo)
}

// outcomes yields each request's outcome (see Outcomes) in trace order.
func (p *Pool) outcomes() iter.Seq[Outcome] {
	return func(yield func(Outcome) bool) {
		for r := range p.trace {
			if !yield(p.outcome(r)) {
				return
			}
		}
	}
}

func (p *Pool) outcome(r int) Outcome {
	o := Outcome{Started: p.started[r], Failed: p.failed[r]}
	if !o.Started {
		return o
	}
	arrival := p.trace[r].Arrival
	o.Wait = p.waits[r]
	if p.firstToken[r] == 0 {
		return o // admitted, and lost or given up before its first token
	}
	o.TTFT = p.firstToken[r].since(arrival)
	if p.finished[r] == 0 {
		return o
	}
	o.E2E = p.finished[r].since(arrival)
	if p.tokens != nil && p.tokens[r].OutputTokens > 1 {
		o.ITL = time.Duration(float64(p.finished[r]-p.firstToken[r]) / (p.tokens[r].OutputTokens - 1))
	}
	return o
}

// instant is a time of the replay in 8 bytes: one nanosecond past its
// offset from the pool's start, so that zero is "not yet".
type instant time.Duration

// instant is t as an instant of p.
func (p *Pool) instant(t time.Time) instant { return instant(t.Sub(p.start) + 1) }

// timeOf is the time of i, which is not zero.
func (p *Pool) timeOf(i instant) time.Time { return p.start.Add(time.Duration(i) - 1) }

// since is the time from offset (from the pool's start) to i.
func (i instant) since(offset time.Duration) time.Duration { return time.Duration(i) - 1 - offset }
