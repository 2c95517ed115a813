package sim

import "time"

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
	out := make([]Outcome, len(p.trace))
	for r := range out {
		o := &out[r]
		o.Started, o.Failed = p.started[r], p.failed[r]
		if !o.Started {
			continue
		}
		arrival := p.start.Add(p.trace[r].Arrival)
		o.Wait = p.waits[r]
		if p.firstToken[r].IsZero() {
			continue // admitted, and lost or given up before its first token
		}
		o.TTFT = p.firstToken[r].Sub(arrival)
		if p.finished[r].IsZero() {
			continue
		}
		o.E2E = p.finished[r].Sub(arrival)
		if p.tokens != nil && p.tokens[r].OutputTokens > 1 {
			o.ITL = time.Duration(float64(p.finished[r].Sub(p.firstToken[r])) / (p.tokens[r].OutputTokens - 1))
		}
	}
	return out
}
