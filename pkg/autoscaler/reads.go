package autoscaler

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/loadindex"
	"github.com/gputask/gputask-controller/pkg/scaling"
)

// DefaultReadsPerNamespace bounds the load-index reads in flight for the sets
// of one namespace. A tenant whose endpoints never answer fills its own
// namespace's slots and no one else's.
const DefaultReadsPerNamespace = 4

// reading is one completed read of all of a set's metrics.
type reading struct {
	metrics []scaling.MetricInput
	// sources is when the sources that were read were built; a reading of
	// sources since rebuilt for a new metric spec is dropped.
	sources time.Time
	at      time.Time
	// started is when the read began: the time a step decided on it is
	// dated by (see evaluate).
	started time.Time
}

// reads runs the sets' load-index reads off the workers: a worker starts a
// set's read and moves on, and the read's end queues the set, whose next
// sync decides from it. A slow or silent endpoint so costs its own set a
// late decision, never a worker, and never another set's evaluations.
type reads struct {
	perNamespace int
	mu           sync.Mutex
	// slots holds, per namespace, a token for each read in flight.
	slots map[string]chan struct{}
	wg    sync.WaitGroup
}

func newReads(perNamespace int) *reads {
	return &reads{perNamespace: max(perNamespace, 1), slots: map[string]chan struct{}{}}
}

func (r *reads) slotsOf(namespace string) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.slots[namespace]
	if s == nil {
		s = make(chan struct{}, r.perNamespace)
		r.slots[namespace] = s
	}
	return s
}

// run runs read in a goroutine of its own once the namespace has a free
// slot; it waits for that slot in its goroutine, not in the caller's.
func (r *reads) run(ctx context.Context, namespace string, read func()) {
	slots := r.slotsOf(namespace)
	r.wg.Go(func() {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		defer func() { <-slots }()
		read()
	})
}

// wait waits for every read started so far.
func (r *reads) wait() { r.wg.Wait() }

// takeReading returns the set's completed reading that no decision has used
// yet and when that read began, or starts a read and reports false: the
// read's end queues the set. A set whose metrics all failed to build needs
// no read and is decided at once.
func (c *Controller) takeReading(ctx context.Context, key cache.ObjectName, set *gputaskv1.GPUTaskSet, state *setState, sources []loadindex.Source, configErrs []error) ([]scaling.MetricInput, time.Time, bool) {
	specs := set.Spec.Autoscaling.Metrics
	if !anySource(sources, configErrs) {
		started := c.clock.Now()
		return readAll(ctx, specs, sources, configErrs), started, true
	}
	c.mu.Lock()
	if r := state.ready; r != nil && r.sources.Equal(state.builtAt) {
		state.ready = nil
		c.mu.Unlock()
		return r.metrics, r.started, true
	}
	state.ready = nil
	if state.reading {
		c.mu.Unlock()
		return nil, time.Time{}, false
	}
	state.reading = true
	builtAt := state.builtAt
	c.mu.Unlock()
	started := c.clock.Now()

	specs = deepCopyMetrics(specs)
	c.reads.run(ctx, set.Namespace, func() {
		metrics := readAll(ctx, specs, sources, configErrs)
		c.mu.Lock()
		state.reading = false
		if ctx.Err() == nil {
			// Shutting down fails the reads because of us, not the
			// endpoints: such a reading is not kept.
			state.ready = &reading{metrics: metrics, sources: builtAt, at: c.clock.Now(), started: started}
		}
		c.mu.Unlock()
		if ctx.Err() == nil {
			c.workqueue.Add(key)
		}
	})
	return nil, time.Time{}, false
}

// anySource reports whether some metric has a source to read.
func anySource(sources []loadindex.Source, configErrs []error) bool {
	for i := range sources {
		if sources[i] != nil && configErrs[i] == nil {
			return true
		}
	}
	return false
}

// readsInFlight reports whether a read of the set is on its way.
func (c *Controller) readsInFlight(key cache.ObjectName) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sets[key]
	return s != nil && s.reading
}

// readPending reports whether a read of the set is on its way or done and
// not yet decided on.
func (c *Controller) readPending(key cache.ObjectName) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sets[key]
	return s != nil && (s.reading || s.ready != nil)
}
