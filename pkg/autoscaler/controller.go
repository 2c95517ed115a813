package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	componentmetrics "k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/generated/clientset/versioned"
	gputaskscheme "github.com/gputask/gputask-controller/pkg/generated/clientset/versioned/scheme"
	gputaskinformers "github.com/gputask/gputask-controller/pkg/generated/informers/externalversions/gputask/v1"
	gputasklisters "github.com/gputask/gputask-controller/pkg/generated/listers/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/loadindex"
	"github.com/gputask/gputask-controller/pkg/metrics"
	"github.com/gputask/gputask-controller/pkg/scaling"
	"github.com/gputask/gputask-controller/pkg/tombstone"
)

const (
	// ControllerName names the queue, the metrics and the event source.
	ControllerName = "gputask-autoscaler"
	// metricsController is the "controller" label of pkg/metrics' reconcile metrics.
	metricsController = "autoscaler"

	// DefaultGPUResourceName and DefaultGPULabelKey mirror the NVIDIA device
	// plugin and GPU Feature Discovery.
	DefaultGPUResourceName corev1.ResourceName = "nvidia.com/gpu"
	DefaultGPULabelKey                         = "nvidia.com/gpu.product"

	// minInterval keeps a tiny spec.autoscaling.interval from turning the
	// loop into a busy loop against the load-index endpoint.
	minInterval = time.Second
	// sourceTTL rebuilds cached sources now and then, so that a rotated
	// token or CA Secret is picked up without a spec change.
	sourceTTL = 10 * time.Minute
)

// NewSourceFunc builds the load-index source of one metric of a set in namespace.
type NewSourceFunc func(ctx context.Context, spec gputaskv1.MetricSpec, namespace string) (loadindex.Source, error)

// Options tune the controller. The zero value is usable.
type Options struct {
	// GPUResourceName is the extended resource that GPUs are requested as.
	// Default nvidia.com/gpu.
	GPUResourceName corev1.ResourceName
	// GPULabelKey is the node label holding the GPU model. Default nvidia.com/gpu.product.
	GPULabelKey string
	// Clock stamps decisions and drives the queue's delays. Default: the real clock.
	Clock clock.WithTicker
	// NewSource builds a metric's source. Default: loadindex.New, reading
	// Secrets with the kube client.
	NewSource NewSourceFunc
	// Recorder receives events. Default: a broadcaster writing Events
	// through the kube client, started by Run.
	Recorder record.EventRecorder
}

// Controller is the autoscaler: one evaluation loop for each GPUTaskSet with
// spec.autoscaling, driven by a delaying workqueue.
type Controller struct {
	kubeClient kubernetes.Interface
	client     versioned.Interface

	setLister  gputasklisters.GPUTaskSetLister
	taskLister gputasklisters.GPUTaskLister
	nodeLister corelisters.NodeLister
	podLister  corelisters.PodLister
	synced     []cache.InformerSynced

	queue       workqueue.TypedRateLimitingInterface[cache.ObjectName]
	recorder    record.EventRecorder
	broadcaster record.EventBroadcaster
	opts        Options

	// mu guards sets. Workers never process one key at the same time, but
	// different keys share the map.
	mu   sync.Mutex
	sets map[cache.ObjectName]*setState
}

// setState is what the loop keeps in memory for one set between evaluations.
type setState struct {
	uid        string
	generation int64
	metrics    []gputaskv1.MetricSpec
	builtAt    time.Time
	// sources is nil until every metric's source was built.
	sources []loadindex.Source
	// recommendations hold exact times. Status only gets a copy when the
	// counts change, so that a steady set causes no writes; see status.go.
	recommendations []gputaskv1.Recommendation
	// lastStep is the exact time of this process's last scale write; status
	// keeps it to the second only.
	lastStep time.Time
	// retryAfter is when the last decision said a held step may happen.
	retryAfter time.Duration
	// warned names the tasks already reported as past their startup timeout.
	warned map[string]bool
}

// NewController builds the autoscaler. podInformer should list the
// non-terminal pods of the cluster (status.phase!=Succeeded,status.phase!=Failed),
// which capacityAware subtracts from each node's GPUs.
func NewController(ctx context.Context, kubeClient kubernetes.Interface, client versioned.Interface,
	setInformer gputaskinformers.GPUTaskSetInformer, taskInformer gputaskinformers.GPUTaskInformer,
	nodeInformer coreinformers.NodeInformer, podInformer coreinformers.PodInformer, opts Options) (*Controller, error) {
	logger := klog.FromContext(ctx)
	opts = withDefaults(opts, kubeClient)

	c := &Controller{
		kubeClient: kubeClient,
		client:     client,
		setLister:  setInformer.Lister(),
		taskLister: taskInformer.Lister(),
		nodeLister: nodeInformer.Lister(),
		podLister:  podInformer.Lister(),
		synced: []cache.InformerSynced{
			setInformer.Informer().HasSynced, taskInformer.Informer().HasSynced,
			nodeInformer.Informer().HasSynced, podInformer.Informer().HasSynced,
		},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: ControllerName, Clock: opts.Clock},
		),
		opts: opts,
		sets: map[cache.ObjectName]*setState{},
	}
	c.recorder = opts.Recorder
	if c.recorder == nil {
		// Events name GPUTaskSets, so the recorder's scheme must know them.
		if err := gputaskscheme.AddToScheme(scheme.Scheme); err != nil {
			return nil, fmt.Errorf("adding gputask types to the event scheme: %w", err)
		}
		c.broadcaster = record.NewBroadcaster(record.WithContext(ctx))
		c.recorder = c.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: ControllerName})
	}

	// Only set events drive the loop. Nodes, pods and tasks are read from
	// their listers at each evaluation, which happens every interval anyway.
	_, err := setInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onSetAdd,
		UpdateFunc: c.onSetUpdate,
		DeleteFunc: c.onSetDelete,
	})
	if err != nil {
		return nil, fmt.Errorf("adding GPUTaskSet event handler: %w", err)
	}
	logger.V(4).Info("Autoscaler built", "gpuResource", opts.GPUResourceName, "gpuLabel", opts.GPULabelKey)
	return c, nil
}

func withDefaults(opts Options, kubeClient kubernetes.Interface) Options {
	if opts.GPUResourceName == "" {
		opts.GPUResourceName = DefaultGPUResourceName
	}
	if opts.GPULabelKey == "" {
		opts.GPULabelKey = DefaultGPULabelKey
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.NewSource == nil {
		secrets := loadindex.KubeSecrets{Client: kubeClient}
		opts.NewSource = func(ctx context.Context, spec gputaskv1.MetricSpec, namespace string) (loadindex.Source, error) {
			return loadindex.New(ctx, spec, namespace, secrets)
		}
	}
	return opts
}

func (c *Controller) onSetAdd(obj any) {
	set, ok := obj.(*gputaskv1.GPUTaskSet)
	if !ok || set.Spec.Autoscaling == nil {
		return
	}
	c.queue.Add(cache.MetaObjectToName(set))
}

// onSetUpdate evaluates at once only when the user changed what the
// autoscaler does. Replicas changes (ours included) and status writes wait
// for the next interval: re-reading a load index that has not yet reacted to
// a scale-up would only scale up again.
func (c *Controller) onSetUpdate(oldObj, newObj any) {
	oldSet, ok1 := oldObj.(*gputaskv1.GPUTaskSet)
	newSet, ok2 := newObj.(*gputaskv1.GPUTaskSet)
	if !ok1 || !ok2 || newSet.Spec.Autoscaling == nil {
		return
	}
	if oldSet.Spec.Autoscaling == nil ||
		!apiequality.Semantic.DeepEqual(oldSet.Spec.Autoscaling, newSet.Spec.Autoscaling) ||
		isPaused(oldSet) != isPaused(newSet) || isStopped(oldSet) != isStopped(newSet) {
		c.queue.Add(cache.MetaObjectToName(newSet))
	}
}

func (c *Controller) onSetDelete(obj any) {
	set, ok := tombstone.Unwrap[*gputaskv1.GPUTaskSet](obj)
	if !ok {
		return
	}
	key := cache.MetaObjectToName(set)
	c.forget(key)
	c.queue.Forget(key)
}

// forget drops a set's cached sources and its metric series.
func (c *Controller) forget(key cache.ObjectName) {
	c.mu.Lock()
	delete(c.sets, key)
	c.mu.Unlock()
	labels := map[string]string{"namespace": key.Namespace, "taskset": key.Name}
	// DeletePartialMatch comes from the embedded Prometheus vector, which
	// does not exist until the metric is registered.
	for _, vec := range []*componentmetrics.GaugeVec{metrics.LoadIndex, metrics.DesiredReplicas} {
		if vec.IsCreated() {
			vec.DeletePartialMatch(labels)
		}
	}
	for _, vec := range []*componentmetrics.CounterVec{metrics.ScalingDecisions, metrics.LoadIndexErrors} {
		if vec.IsCreated() {
			vec.DeletePartialMatch(labels)
		}
	}
}

// Run starts workers and blocks until ctx is cancelled.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)

	if c.broadcaster != nil {
		c.broadcaster.StartStructuredLogging(3)
		c.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.kubeClient.CoreV1().Events("")})
		defer c.broadcaster.Shutdown()
	}

	logger.Info("Starting autoscaler", "workers", workers)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return errors.New("autoscaler: caches did not sync")
	}
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() { wait.UntilWithContext(ctx, c.runWorker, time.Second) })
	}
	<-ctx.Done()
	logger.Info("Shutting down autoscaler")
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

func (c *Controller) runWorker(ctx context.Context) {
	for c.processNextWorkItem(ctx) {
	}
}

func (c *Controller) processNextWorkItem(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)

	start := c.opts.Clock.Now()
	next, err := c.syncHandler(ctx, key)
	metrics.ReconcileDuration.WithLabelValues(metricsController).Observe(c.opts.Clock.Since(start).Seconds())
	if err != nil {
		metrics.ReconcileTotal.WithLabelValues(metricsController, "error").Inc()
		utilruntime.HandleErrorWithContext(ctx, err, "Evaluating GPUTaskSet failed, will retry", "gputaskset", key)
		c.queue.AddRateLimited(key)
		if next > 0 {
			// Keep the regular cadence too, in case the backoff grows long.
			c.queue.AddAfter(key, next)
		}
		return true
	}
	metrics.ReconcileTotal.WithLabelValues(metricsController, "success").Inc()
	c.queue.Forget(key)
	if next > 0 {
		// The delaying queue keeps only the earliest pending time per key,
		// so an extra evaluation (after a spec change) never doubles the cadence.
		c.queue.AddAfter(key, next)
	}
	return true
}

func isPaused(set *gputaskv1.GPUTaskSet) bool {
	return set.Annotations[gputaskv1.AnnotationPaused] == "true"
}

func isStopped(set *gputaskv1.GPUTaskSet) bool {
	return set.Annotations[gputaskv1.AnnotationStopped] == "true"
}

// syncHandler evaluates one set and returns when to evaluate it next (0 for
// never, e.g. when it has no autoscaling or is gone).
func (c *Controller) syncHandler(ctx context.Context, key cache.ObjectName) (time.Duration, error) {
	set, err := c.setLister.GPUTaskSets(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		c.forget(key)
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("getting gputaskset %s: %w", key, err)
	}
	if set.Spec.Autoscaling == nil {
		// Autoscaling was removed: drop what it left behind, so the status
		// no longer claims an autoscaler is at work.
		c.forget(key)
		if err := c.updateStatus(ctx, set, withoutAutoscalerStatus(&set.Status)); err != nil {
			return 0, fmt.Errorf("clearing autoscaler status of gputaskset %s: %w", key, err)
		}
		return 0, nil
	}
	ctx = klog.NewContext(ctx, klog.LoggerWithValues(klog.FromContext(ctx), "gputaskset", klog.KObj(set)))
	if err := c.evaluate(ctx, set); err != nil {
		return c.nextEvaluation(key, set), fmt.Errorf("evaluating gputaskset %s: %w", key, err)
	}
	return c.nextEvaluation(key, set), nil
}

// nextEvaluation is one interval from now, or sooner when the decision held
// a step only until a full interval has passed since the last one.
func (c *Controller) nextEvaluation(key cache.ObjectName, set *gputaskv1.GPUTaskSet) time.Duration {
	next := intervalOf(set.Spec.Autoscaling)
	c.mu.Lock()
	defer c.mu.Unlock()
	if state := c.sets[key]; state != nil && state.retryAfter > 0 {
		next = min(next, state.retryAfter)
	}
	return next
}

func intervalOf(spec *gputaskv1.AutoscalingSpec) time.Duration {
	if spec.Interval == nil {
		return scaling.DefaultInterval
	}
	return max(spec.Interval.Duration, minInterval)
}
