package autoscaler

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// PodCache gives the capacity count the non-terminal pods of the cluster.
type PodCache interface {
	// Lister returns a lister of those pods once their cache has synced.
	Lister(ctx context.Context) (corelisters.PodLister, error)
	// Stop stops the cache, if it runs.
	Stop()
}

// PodCacheIdleStop is how long the cluster-wide pod cache runs after the last
// capacity-aware evaluation.
const PodCacheIdleStop = 10 * time.Minute

// podCacheSyncTimeout bounds how long one evaluation waits for the cache to
// fill; a later evaluation waits again.
const podCacheSyncTimeout = time.Minute

// NonTerminalPods is the field selector of the pods that still hold
// resources: the ones the capacity count subtracts from the nodes.
var NonTerminalPods = fields.AndSelectors(
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
).String()

// LazyPods is the PodCache of a running controller. Every non-terminal pod
// of the cluster, trimmed by TrimPod, costs memory in proportion to the
// whole cluster, and only sets with capacityAware read it: it starts with
// the first capacity-aware evaluation and stops once none has happened for
// PodCacheIdleStop.
type LazyPods struct {
	lazyInformer
}

// NewLazyPods returns a LazyPods that lists and watches through client.
func NewLazyPods(client kubernetes.Interface, resync time.Duration, clk clock.WithDelayedExecution) *LazyPods {
	return &LazyPods{lazyInformer{what: "cluster-wide pod cache", clock: clk, newInformer: func() cache.SharedIndexInformer {
		informer := coreinformers.NewFilteredPodInformer(client, metav1.NamespaceAll, resync, cache.Indexers{},
			func(o *metav1.ListOptions) { o.FieldSelector = NonTerminalPods })
		// The informer has not started, so the transform is always accepted.
		_ = informer.SetTransform(TrimPod)
		return informer
	}}}
}

// Lister starts the cache if it does not run, and waits until it has synced.
func (p *LazyPods) Lister(ctx context.Context) (corelisters.PodLister, error) {
	indexer, err := p.indexer(ctx)
	if err != nil {
		return nil, err
	}
	return corelisters.NewPodLister(indexer), nil
}

// lazyInformer runs an informer only while it is read: it starts with the
// first read and stops once none has come for PodCacheIdleStop.
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
	p.timer = p.clock.AfterFunc(PodCacheIdleStop, func() { p.stopIfIdle(uses) })
	informer := p.informer
	p.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, podCacheSyncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return nil, fmt.Errorf("waiting for the %s to sync: %w", p.what, ctx.Err())
	}
	return informer.GetIndexer(), nil
}

// stopIfIdle stops the cache PodCacheIdleStop after read number uses, unless
// a later read came.
func (p *lazyInformer) stopIfIdle(uses int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.informer == nil || p.uses != uses {
		return
	}
	klog.Background().Info("Stopping the "+p.what+": no capacity-aware set used it", "idle", PodCacheIdleStop)
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
