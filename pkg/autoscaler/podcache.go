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
	client kubernetes.Interface
	resync time.Duration
	clock  clock.WithDelayedExecution

	mu       sync.Mutex
	informer cache.SharedIndexInformer
	stop     context.CancelFunc
	// uses counts the reads; the idle timer of an earlier read stops nothing.
	uses  int
	timer clock.Timer
}

// NewLazyPods returns a LazyPods that lists and watches through client.
func NewLazyPods(client kubernetes.Interface, resync time.Duration, clk clock.WithDelayedExecution) *LazyPods {
	return &LazyPods{client: client, resync: resync, clock: clk}
}

// Lister starts the cache if it does not run, and waits until it has synced.
func (p *LazyPods) Lister(ctx context.Context) (corelisters.PodLister, error) {
	p.mu.Lock()
	if p.informer == nil {
		klog.FromContext(ctx).Info("Starting the cluster-wide pod cache for capacity-aware sets")
		p.startLocked()
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
		return nil, fmt.Errorf("waiting for the cluster-wide pod cache to sync: %w", ctx.Err())
	}
	return corelisters.NewPodLister(informer.GetIndexer()), nil
}

func (p *LazyPods) startLocked() {
	informer := coreinformers.NewFilteredPodInformer(p.client, metav1.NamespaceAll, p.resync, cache.Indexers{},
		func(o *metav1.ListOptions) { o.FieldSelector = NonTerminalPods })
	// The informer has not started, so the transform is always accepted.
	_ = informer.SetTransform(TrimPod)
	ctx, cancel := context.WithCancel(context.Background())
	go informer.RunWithContext(ctx)
	p.informer, p.stop = informer, cancel
}

// stopIfIdle stops the cache PodCacheIdleStop after read number uses, unless
// a later read came.
func (p *LazyPods) stopIfIdle(uses int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.informer == nil || p.uses != uses {
		return
	}
	klog.Background().Info("Stopping the cluster-wide pod cache: no capacity-aware set used it", "idle", PodCacheIdleStop)
	p.timer = nil // it has fired
	p.stopLocked()
}

// Stop stops the cache; a later Lister starts it again.
func (p *LazyPods) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopLocked()
}

func (p *LazyPods) stopLocked() {
	if p.timer != nil {
		p.timer.Stop()
	}
	if p.stop != nil {
		p.stop()
	}
	p.informer, p.stop, p.timer = nil, nil, nil
}

// running reports whether the cache runs, for tests.
func (p *LazyPods) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.informer != nil
}
