// Package lazycache holds the cluster-wide caches that only capacity-aware
// GPUTaskSets read, which run from their first read until they go unread.
//
// They are the cache of every non-terminal pod (Pods) and those of
// DeviceClasses, ResourceSlices and ResourceClaims (DRA), each trimmed to
// what the capacity count reads, and each stopped IdleStop after its last
// read.
//
// Such a cache costs memory in proportion to the whole cluster, while most
// clusters have no capacity-aware set at all; so, unlike the informers that
// pkg/app starts with the controllers, these start on demand. pkg/app makes
// them, and the autoscaler reads them through its own small interfaces.
package lazycache

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// IdleStop is how long a cache runs after its last read.
const IdleStop = 10 * time.Minute

// syncTimeout bounds how long one read waits for a cache to fill; a later
// read waits again.
const syncTimeout = time.Minute

// lazyInformer runs an informer only while it is read: it starts with the
// first read and stops once none has come for IdleStop.
type lazyInformer struct {
	// what names the cache in logs and errors.
	what        string
	newInformer func() cache.SharedIndexInformer
	clock       clock.WithDelayedExecution

	mu       sync.Mutex
	informer cache.SharedIndexInformer
	stop     context.CancelFunc
	// uses counts the reads; the idle timer of an earlier read stops nothing.
	uses  int
	timer clock.Timer
}

// newLazyInformer returns a lazyInformer of the informers that newInformer
// makes, each with the transform trim, which it accepts as it has not
// started.
func newLazyInformer(what string, clk clock.WithDelayedExecution, newInformer func() cache.SharedIndexInformer, trim cache.TransformFunc) lazyInformer {
	return lazyInformer{what: what, clock: clk, newInformer: func() cache.SharedIndexInformer {
		informer := newInformer()
		// The informer has not started, so the transform is always accepted.
		_ = informer.SetTransform(trim)
		return informer
	}}
}

// indexer starts the informer if it does not run, and waits until it has
// synced.
func (p *lazyInformer) indexer(ctx context.Context) (cache.Indexer, error) {
	p.mu.Lock()
	if p.informer == nil {
		klog.FromContext(ctx).Info("Starting the " + p.what + " for capacity-aware sets")
		p.informer = p.newInformer()
		var informerCtx context.Context
		informerCtx, p.stop = context.WithCancel(context.Background())
		go p.informer.RunWithContext(informerCtx)
	}
	p.uses++
	uses := p.uses
	if p.timer != nil {
		p.timer.Stop()
	}
	p.timer = p.clock.AfterFunc(IdleStop, func() { p.stopIfIdle(uses) })
	informer := p.informer
	p.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return nil, fmt.Errorf("waiting for the %s to sync: %w", p.what, ctx.Err())
	}
	return informer.GetIndexer(), nil
}

// stopIfIdle stops the cache IdleStop after read number uses, unless a
// later read came.
func (p *lazyInformer) stopIfIdle(uses int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.informer == nil || p.uses != uses {
		return
	}
	klog.Background().Info("Stopping the "+p.what+": no capacity-aware set used it", "idle", IdleStop)
	p.timer = nil // it has fired
	p.stopLocked()
}

// Stop stops the cache; a later read starts it again.
func (p *lazyInformer) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopLocked()
}

func (p *lazyInformer) stopLocked() {
	if p.timer != nil {
		p.timer.Stop()
	}
	if p.stop != nil {
		p.stop()
	}
	p.informer, p.stop, p.timer = nil, nil, nil
}

// running reports whether the cache runs, for tests.
func (p *lazyInformer) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.informer != nil
}
