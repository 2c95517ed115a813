package taskset

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/clock"
)

// DefaultExpectationsTimeout is how long a set waits for its informer to
// report writes it made before it acts again anyway. It matches the
// ReplicaSet controller's: a watch that lost an event must not block a set
// forever, and five minutes is far beyond any healthy watch delay.
const DefaultExpectationsTimeout = 5 * time.Minute

// expectations remembers, per set key, the writes the controller made whose
// effect the task informer has not shown yet: tasks created, tasks deleted and
// restart annotations patched. A sync acts on the world only when every write
// it made before is visible in the cache, because acting on a stale cache is
// how a controller creates duplicate tasks or restarts two tasks at once.
//
// Creations are counted, because generated names are unknown until the API
// server answers. Deletions and annotations are tracked by task name, so an
// event that is seen twice (the deletion timestamp, then the delete) never
// counts twice.
type expectations struct {
	mu      sync.Mutex
	clock   clock.PassiveClock
	timeout time.Duration
	bySet   map[string]*setExpectations
}

// setExpectations are the pending writes of one set.
type setExpectations struct {
	creations int
	deletions sets.Set[string]
	// annotations maps a task name to the restartedAt value patched onto it.
	annotations map[string]string
	// since is when the latest write was recorded; expiry counts from it.
	since time.Time
}

func newExpectations(c clock.PassiveClock, timeout time.Duration) *expectations {
	return &expectations{clock: c, timeout: timeout, bySet: map[string]*setExpectations{}}
}

// entry returns the set's record, creating it and restarting its expiry clock.
// The caller holds mu.
func (e *expectations) entry(key string) *setExpectations {
	exp, ok := e.bySet[key]
	if !ok {
		exp = &setExpectations{deletions: sets.New[string](), annotations: map[string]string{}}
		e.bySet[key] = exp
	}
	exp.since = e.clock.Now()
	return exp
}

// ExpectCreations records that n tasks are about to be created for the set.
func (e *expectations) ExpectCreations(key string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.entry(key).creations += n
}

// CreationObserved counts down one expected creation: the informer saw it, or
// the create was never made or failed.
func (e *expectations) CreationObserved(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if exp, ok := e.bySet[key]; ok && exp.creations > 0 {
		exp.creations--
	}
}

// ExpectDeletions records that the named tasks are about to be deleted.
func (e *expectations) ExpectDeletions(key string, taskNames ...string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.entry(key).deletions.Insert(taskNames...)
}

// DeletionObserved forgets every expectation on the named task: it is gone or
// going, so neither its deletion nor its annotation will be seen later.
func (e *expectations) DeletionObserved(key, taskName string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if exp, ok := e.bySet[key]; ok {
		exp.deletions.Delete(taskName)
		delete(exp.annotations, taskName)
	}
}

// ExpectAnnotation records that value was patched into the task's restartedAt
// annotation.
func (e *expectations) ExpectAnnotation(key, taskName, value string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.entry(key).annotations[taskName] = value
}

// AnnotationObserved forgets the annotation expectation on the task once the
// informer shows the value that was patched.
func (e *expectations) AnnotationObserved(key, taskName, value string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if exp, ok := e.bySet[key]; ok && exp.annotations[taskName] == value {
		delete(exp.annotations, taskName)
	}
}

// ForgetAnnotation drops an annotation expectation whose patch failed.
func (e *expectations) ForgetAnnotation(key, taskName string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if exp, ok := e.bySet[key]; ok {
		delete(exp.annotations, taskName)
	}
}

// Satisfied reports whether the set may act: nothing is pending, or what is
// pending has waited longer than the timeout. A record that is fulfilled or
// expired is dropped here, so the writes of the next sync are counted from
// zero and a late event about an old write cannot count them down.
func (e *expectations) Satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	exp, ok := e.bySet[key]
	if !ok {
		return true
	}
	fulfilled := exp.creations <= 0 && exp.deletions.Len() == 0 && len(exp.annotations) == 0
	if fulfilled || e.clock.Since(exp.since) > e.timeout {
		delete(e.bySet, key)
		return true
	}
	return false
}

// Delete drops the set's record, so a set re-created with the same name starts
// clean, and an expired record does not linger.
func (e *expectations) Delete(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.bySet, key)
}
