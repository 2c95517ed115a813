package baseline

import (
	"time"

	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// Seed is the step script that the project grew from: every interval,
// above 0.8 it adds one worker, below 0.5 it removes one, within [min,
// max]. It knows nothing of startup, age or work in flight: it scales a
// Deployment, whose ReplicaSet deletes pods whatever they are doing.
type Seed struct {
	Min, Max int32
	// Initial is the count it starts with; 0 means Min.
	Initial  int32
	Interval time.Duration
	Load     sim.LoadKind
	replicas int32
}

// The seed's fixed thresholds.
const (
	seedUp   = 0.8
	seedDown = 0.5
)

// Name implements sim.Policy.
func (s *Seed) Name() string { return PolicySeed }

// Start begins with Min Ready workers.
func (s *Seed) Start(p *sim.Pool) {
	s.replicas = min(max(s.Initial, s.Min, 1), s.Max)
	p.AddReady(int(s.replicas))
}

// Period implements sim.Policy.
func (s *Seed) Period() time.Duration { return s.Interval }

// Replicas implements sim.Policy.
func (s *Seed) Replicas() int32 { return s.replicas }

// Wake implements sim.Policy.
func (s *Seed) Wake() time.Time { return time.Time{} }

// Sync implements sim.Policy.
func (s *Seed) Sync(p *sim.Pool) { scaleDeployment(p, s.replicas) }

// Step implements sim.Policy.
func (s *Seed) Step(p *sim.Pool) {
	s.replicas = seedStep(s.replicas, p.Metrics().LoadIndex(s.Load), s.Min, s.Max)
	scaleDeployment(p, s.replicas)
}

// seedStep is the seed's rule.
func seedStep(current int32, load float64, minReplicas, maxReplicas int32) int32 {
	switch {
	case load > seedUp:
		return min(current+1, maxReplicas)
	case load < seedDown:
		return max(current-1, minReplicas)
	}
	return current
}

// Static is a fixed pool sized for the trace's peak, Ready from the start.
type Static struct {
	Size int32
}

// Name implements sim.Policy.
func (s *Static) Name() string { return PolicyStatic }

// Start implements sim.Policy.
func (s *Static) Start(p *sim.Pool) { p.AddReady(int(s.Size)) }

// Period implements sim.Policy.
func (s *Static) Period() time.Duration { return time.Hour }

// Replicas implements sim.Policy.
func (s *Static) Replicas() int32 { return s.Size }

// Wake implements sim.Policy.
func (s *Static) Wake() time.Time { return time.Time{} }

// Sync implements sim.Policy.
func (s *Static) Sync(*sim.Pool) {}

// Step implements sim.Policy.
func (s *Static) Step(*sim.Pool) {}

// PeakWorkers is the most workers the trace keeps busy at once if every
// request starts on arrival: the peak of requests in flight over the
// slots of a worker, rounded up.
func PeakWorkers(tr workload.Trace, concurrency int) int32 {
	inFlight := neededOverTime(tr, concurrency)
	var peak int32
	for _, s := range inFlight {
		peak = max(peak, s.workers)
	}
	return peak
}
