// Package expectations remembers the pod creations a controller has asked for
// but not yet seen in its informer, in the way the ReplicaSet controller does.
// Without it a sync that runs before the informer delivers the new pod reads a
// stale cache and creates the pod a second time.
package expectations

import (
	"sync"
	"time"
)

// DefaultTTL is how long an unmet expectation blocks new creations. A watch
// event that never arrives (a dropped watch, a pod deleted before it was
// observed) must not block a task forever.
const DefaultTTL = 5 * time.Minute

type entry struct {
	adds int
	at   time.Time
}

// Expectations counts the creations still expected per key. It is safe for
// concurrent use.
type Expectations struct {
	mu  sync.Mutex
	ttl time.Duration
	now func() time.Time
	m   map[string]entry
}

// New returns an empty set of expectations that expire after ttl.
func New(ttl time.Duration) *Expectations {
	return NewWithClock(ttl, time.Now)
}

// NewWithClock is New with a clock that tests control.
func NewWithClock(ttl time.Duration, now func() time.Time) *Expectations {
	return &Expectations{ttl: ttl, now: now, m: map[string]entry{}}
}

// ExpectCreations records that n creations are about to be requested for key.
func (e *Expectations) ExpectCreations(key string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.m[key] = entry{adds: n, at: e.now()}
}

// CreationObserved lowers the count for key by one: the informer saw the
// pod, or the create call failed and no pod will come.
func (e *Expectations) CreationObserved(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ent, ok := e.m[key]
	if !ok {
		return
	}
	ent.adds--
	if ent.adds <= 0 {
		delete(e.m, key)
		return
	}
	e.m[key] = ent
}

// Satisfied reports whether key may create again: nothing is expected, or the
// expectation has expired.
func (e *Expectations) Satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	ent, ok := e.m[key]
	if !ok || ent.adds <= 0 {
		return true
	}
	if e.now().Sub(ent.at) >= e.ttl {
		delete(e.m, key)
		return true
	}
	return false
}

// Delete forgets key, for a task that is gone.
func (e *Expectations) Delete(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, key)
}
