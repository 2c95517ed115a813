// Package expectations remembers, per owner key, the writes a controller made
// whose effect its informer has not shown yet, as the ReplicaSet controller
// does. A sync acts on the world only when every earlier write is visible in
// the cache, because acting on a stale cache is how a controller creates a
// duplicate pod or task, or restarts two tasks at once.
//
// Creations are counted, because generated names are unknown until the API
// server answers. Deletions and annotations are tracked by object name, so an
// event seen twice (the deletion timestamp, then the delete) never counts
// twice. An expectation that the informer never fulfils expires after the
// timeout, so a watch that lost an event cannot block an owner forever.
package expectations

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/clock"
)

// DefaultTTL matches the ReplicaSet controller's expectation timeout: far
// beyond any healthy watch delay.
const DefaultTTL = 5 * time.Minute

// Expectations holds the pending writes of every owner key. It is safe for
// concurrent use by a controller's workers and event handlers.
type Expectations struct {
	mu      sync.Mutex
	clock   clock.PassiveClock
	timeout time.Duration
	byKey   map[string]*pending
}

// pending are the writes of one owner whose effect is not seen yet.
type pending struct {
	creations int
	deletions sets.Set[string]
	// annotations maps an annotation of a named object to the value
	// patched onto it ("" for a patch that removed it).
	annotations map[annotationRef]string
	// since is when the latest write was recorded; expiry counts from it.
	since time.Time
}

// New returns empty expectations that expire timeout after the latest write
// of an owner. A nil clock means the real one.
func New(c clock.PassiveClock, timeout time.Duration) *Expectations {
	if c == nil {
		c = clock.RealClock{}
	}
	return &Expectations{clock: c, timeout: timeout, byKey: map[string]*pending{}}
}

// entry returns the owner's record, creating it and restarting its expiry
// clock. The caller holds mu. A record's set and map are made when first
// written: most owners only ever expect a creation.
func (e *Expectations) entry(key string) *pending {
	p, ok := e.byKey[key]
	if !ok {
		p = &pending{}
		e.byKey[key] = p
	}
	p.since = e.clock.Now()
	return p
}

// fulfilled reports whether nothing of p is pending.
func (p *pending) fulfilled() bool {
	return p.creations <= 0 && p.deletions.Len() == 0 && len(p.annotations) == 0
}

// observed drops the owner's record once an observation fulfilled it: an
// owner whose writes are all seen keeps no memory here. The caller holds mu.
func (e *Expectations) observed(key string, p *pending) {
	if p.fulfilled() {
		delete(e.byKey, key)
	}
}

// ExpectCreations records that n objects are about to be created for the owner.
func (e *Expectations) ExpectCreations(key string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.entry(key).creations += n
}

// CreationObserved counts down one expected creation: the informer saw it, or
// the create was never made or failed. A late or duplicate call is harmless.
func (e *Expectations) CreationObserved(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p, ok := e.byKey[key]; ok && p.creations > 0 {
		p.creations--
		e.observed(key, p)
	}
}

// ExpectDeletions records that the named objects are about to be deleted.
func (e *Expectations) ExpectDeletions(key string, names ...string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.entry(key)
	if p.deletions == nil {
		p.deletions = sets.New[string]()
	}
	p.deletions.Insert(names...)
}

// DeletionObserved forgets every expectation on the named object: it is gone
// or going, so neither its deletion nor its annotation will be seen later.
func (e *Expectations) DeletionObserved(key, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p, ok := e.byKey[key]; ok {
		p.deletions.Delete(name)
		for ref := range p.annotations {
			if ref.name == name {
				delete(p.annotations, ref)
			}
		}
		e.observed(key, p)
	}
}

// annotationRef is one annotation of one object of the owner.
type annotationRef struct{ name, annotation string }

// ExpectAnnotation records that value was patched into the annotation of
// the named object; "" stands for a patch that removed it.
func (e *Expectations) ExpectAnnotation(key, name, annotation, value string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.entry(key)
	if p.annotations == nil {
		p.annotations = map[annotationRef]string{}
	}
	p.annotations[annotationRef{name, annotation}] = value
}

// AnnotationObserved forgets each annotation expectation on the named object
// whose patched value the informer now shows in annotations.
func (e *Expectations) AnnotationObserved(key, name string, annotations map[string]string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.byKey[key]
	if !ok {
		return
	}
	for ref, v := range p.annotations {
		if ref.name == name && annotations[ref.annotation] == v {
			delete(p.annotations, ref)
		}
	}
	e.observed(key, p)
}

// ForgetAnnotation drops an annotation expectation whose patch failed.
func (e *Expectations) ForgetAnnotation(key, name, annotation string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p, ok := e.byKey[key]; ok {
		delete(p.annotations, annotationRef{name, annotation})
		e.observed(key, p)
	}
}

// Satisfied reports whether the owner may act: nothing is pending, or what is
// pending has waited longer than the timeout. A record that is fulfilled or
// expired is dropped here, so the writes of the next sync are counted from
// zero and a late event about an old write cannot count them down.
func (e *Expectations) Satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.byKey[key]
	if !ok {
		return true
	}
	if p.fulfilled() || e.clock.Since(p.since) > e.timeout {
		delete(e.byKey, key)
		return true
	}
	return false
}

// Delete drops the owner's record, so an owner re-created with the same name
// starts clean.
func (e *Expectations) Delete(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.byKey, key)
}
