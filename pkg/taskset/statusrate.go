package taskset

import (
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// statusInterval is the least time between two status writes of one set.
// While a large set's tasks churn, every task's progress wakes the set, and
// each sync would write new counts: one write per second shows the same
// progress at a bounded cost, whatever the set's size.
const statusInterval = time.Second

// statusPacer remembers when each set's status was last written.
type statusPacer struct {
	clock   clock.Clock
	mu      sync.Mutex
	written map[cache.ObjectName]time.Time
}

func newStatusPacer(clk clock.Clock) *statusPacer {
	return &statusPacer{clock: clk, written: map[cache.ObjectName]time.Time{}}
}

// wait returns how long the set's next status write must wait, 0 if it may
// happen now.
func (p *statusPacer) wait(key cache.ObjectName) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	last, ok := p.written[key]
	if !ok {
		return 0
	}
	return max(last.Add(statusInterval).Sub(p.clock.Now()), 0)
}

// wrote records a status write of the set.
func (p *statusPacer) wrote(key cache.ObjectName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.written[key] = p.clock.Now()
}

// forget drops a deleted set.
func (p *statusPacer) forget(key cache.ObjectName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.written, key)
}
