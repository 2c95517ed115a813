package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/generated/clientset/versioned"
	gputaskscheme "github.com/gputask/gputask-controller/pkg/generated/clientset/versioned/scheme"
	gputaskinformers "github.com/gputask/gputask-controller/pkg/generated/informers/externalversions/gputask/v1"
	gputasklisters "github.com/gputask/gputask-controller/pkg/generated/listers/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/gpuprofile"
	"github.com/gputask/gputask-controller/pkg/kueue"
	"github.com/gputask/gputask-controller/pkg/loadindex"
	"github.com/gputask/gputask-controller/pkg/metrics"
	"github.com/gputask/gputask-controller/pkg/podspec"
	"github.com/gputask/gputask-controller/pkg/scaling"
	"github.com/gputask/gputask-controller/pkg/taskindex"
)

const (
	// ControllerName is the controller's identity: the source of its
	// events, the name of its queue (and so of its workqueue metrics), the
	// controller label of its reconcile metrics, its user agent and its
	// field manager.
	ControllerName = "gputask-autoscaler"

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
	// NewSource builds a metric's source. Default: loadindex.New, reading
	// Secrets with the kube client.
	NewSource NewSourceFunc
	// Recorder records Events. Nil builds one that writes through
	// kubeclientset; Run shuts it down when it returns.
	Recorder record.EventRecorder
	// Clock stamps decisions and drives the queue's delays. Nil means the
	// real clock; tests pass a fake one.
	Clock clock.WithTicker
	// GPUAllocation, DeviceClass and ModelAttribute are the GPUTask
	// controller's: they tell whether a set's tasks ask for GPUs by DRA, and
	// for which devices.
	GPUAllocation  gputaskv1.GPUAllocationMode
	DeviceClass    string
	ModelAttribute string
	// Devices is the DRA device cache, nil where the API server serves no
	// DRA: capacity-aware DRA sets count the free devices it holds.
	Devices DeviceCache
	// Quotas is Kueue's queues, nil where Kueue is not installed: a
	// capacity-aware set whose tasks name a LocalQueue is capped at what
	// its ClusterQueue can still admit.
	Quotas *kueue.Quotas
	// ReadsPerNamespace bounds the load-index reads in flight for one
	// namespace's sets. Zero means DefaultReadsPerNamespace.
	ReadsPerNamespace int
	// EngineProfiles are the ConfigMaps labelled
	// gputask.io/engine-profile=true, which slo.engine.configMapRef
	// reads; nil when the controller reads none, and such a set holds
	// its count with reason EngineProfileUnavailable.
	EngineProfiles coreinformers.ConfigMapInformer
}

func (o Options) withDefaults(kubeclientset kubernetes.Interface) Options {
	if o.GPUResourceName == "" {
		o.GPUResourceName = podspec.DefaultGPUResourceName
	}
	if o.GPULabelKey == "" {
		o.GPULabelKey = podspec.DefaultGPULabelKey
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.ReadsPerNamespace <= 0 {
		o.ReadsPerNamespace = DefaultReadsPerNamespace
	}
	if o.NewSource == nil {
		secrets := loadindex.KubeSecrets{Client: kubeclientset}
		o.NewSource = func(ctx context.Context, spec gputaskv1.MetricSpec, namespace string) (loadindex.Source, error) {
			return loadindex.New(ctx, spec, namespace, secrets)
		}
	}
	return o
}

// Controller is the autoscaler: one evaluation loop for each GPUTaskSet with
// spec.autoscaling, driven by a delaying workqueue.
type Controller struct {
	kubeclientset    kubernetes.Interface
	gputaskclientset versioned.Interface

	setsLister gputasklisters.GPUTaskSetLister
	setsSynced cache.InformerSynced
	// tasksIndexer finds a set's tasks by its UID (pkg/taskindex).
	tasksIndexer cache.Indexer
	tasksSynced  cache.InformerSynced
	nodesLister  corelisters.NodeLister
	nodesSynced  cache.InformerSynced
	// configMaps holds the engine profiles' ConfigMaps; nil without
	// Options.EngineProfiles.
	configMaps       corelisters.ConfigMapLister
	configMapsSynced cache.InformerSynced
	// pods is read only by capacity-aware sets.
	pods PodCache
	// podOpts tell whether a set's tasks ask for GPUs by DRA, and how.
	podOpts podspec.Options

	workqueue workqueue.TypedRateLimitingInterface[cache.ObjectName]
	// broadcaster is nil when Options.Recorder was given.
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	clock       clock.WithTicker

	opts Options

	// mu guards sets. Workers never process one key at the same time, but
	// different keys share the map.
	mu   sync.Mutex
	sets map[cache.ObjectName]*setState
	// reads runs the load-index reads off the workers.
	reads *reads
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
	// queue is what the SLO policy learned from the readings so far: the
	// smoothed service time, the recent arrival rates, the correction.
	// Lost on a restart or a change of leader, it is learned again within
	// a few intervals.
	queue scaling.QueueState
	// profile is the engine profile last parsed from a ConfigMap, and
	// profileFrom the ConfigMap's UID, version and key it came from.
	profile     *gpuprofile.Profile
	profileFrom string
	// warned names the tasks already reported as past their startup timeout.
	warned map[string]bool
	// reading is set while a read of the set is in flight, and ready holds
	// the completed reading no decision has used yet. Both are guarded by
	// the controller's mu: the read's goroutine writes them.
	reading bool
	ready   *reading
}

// Events about GPUTaskSets need the GPUTaskSet kind in the scheme the recorder
// uses. It is added once, before anything runs: adding it in NewController,
// as sample-controller does, writes the shared scheme while the informers of
// a controller built earlier in the process read it.
func init() {
	utilruntime.Must(gputaskscheme.AddToScheme(scheme.Scheme))
}

// NewController builds the autoscaler. pods gives the non-terminal pods of
// the cluster, which capacityAware subtracts from each node's GPUs; Run stops
// it when it returns.
func NewController(
	ctx context.Context,
	kubeclientset kubernetes.Interface,
	gputaskclientset versioned.Interface,
	setInformer gputaskinformers.GPUTaskSetInformer,
	taskInformer gputaskinformers.GPUTaskInformer,
	nodeInformer coreinformers.NodeInformer,
	pods PodCache,
	opts Options,
) *Controller {
	logger := klog.FromContext(ctx)
	opts = opts.withDefaults(kubeclientset)

	recorder, broadcaster := opts.Recorder, record.EventBroadcaster(nil)
	if recorder == nil {
		broadcaster = record.NewBroadcaster(record.WithContext(ctx))
		broadcaster.StartStructuredLogging(4)
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kubeclientset.CoreV1().Events("")})
		recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: ControllerName})
	}

	c := &Controller{
		kubeclientset:    kubeclientset,
		gputaskclientset: gputaskclientset,
		setsLister:       setInformer.Lister(),
		tasksIndexer:     taskInformer.Informer().GetIndexer(),
		tasksSynced:      taskInformer.Informer().HasSynced,
		nodesLister:      nodeInformer.Lister(),
		nodesSynced:      nodeInformer.Informer().HasSynced,
		pods:             pods,
		podOpts: podspec.Options{GPUResourceName: opts.GPUResourceName, GPULabelKey: opts.GPULabelKey,
			GPUAllocation: opts.GPUAllocation, DeviceClass: opts.DeviceClass, ModelAttribute: opts.ModelAttribute},
		workqueue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: ControllerName, Clock: opts.Clock},
		),
		broadcaster: broadcaster,
		recorder:    recorder,
		clock:       opts.Clock,
		opts:        opts,
		sets:        map[cache.ObjectName]*setState{},
		reads:       newReads(opts.ReadsPerNamespace),
	}

	c.configMapsSynced = func() bool { return true }
	if opts.EngineProfiles != nil {
		c.configMaps = opts.EngineProfiles.Lister()
		c.configMapsSynced = opts.EngineProfiles.Informer().HasSynced
	}
	utilruntime.Must(taskindex.Add(taskInformer.Informer()))
	logger.Info("Setting up event handlers")
	// Only set events drive the loop. Nodes, pods and tasks are read from
	// their listers at each evaluation, which happens every interval anyway.
	setsReg, err := setInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.addSet(logger, obj) },
		UpdateFunc: func(old, cur any) { c.updateSet(logger, old, cur) },
		DeleteFunc: func(obj any) { c.deleteSet(logger, obj) },
	})
	utilruntime.Must(err)
	c.setsSynced = setsReg.HasSynced
	if opts.EngineProfiles != nil {
		_, err := opts.EngineProfiles.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.profileChanged(logger, nil, obj) },
			UpdateFunc: func(old, cur any) { c.profileChanged(logger, old, cur) },
			DeleteFunc: func(obj any) { c.profileChanged(logger, nil, obj) },
		})
		utilruntime.Must(err)
	}
	return c
}

// Run waits for the caches, then runs workers until ctx ends, and returns
// once every worker has finished the item it was working on. It returns nil
// on a normal shutdown, also when ctx ends before the caches synced.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.workqueue.ShutDown()
	defer c.pods.Stop()
	if c.opts.Devices != nil {
		defer c.opts.Devices.Stop()
	}
	if c.broadcaster != nil {
		defer c.broadcaster.Shutdown()
	}
	logger := klog.FromContext(ctx)

	logger.Info("Starting autoscaler")
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.setsSynced, c.tasksSynced, c.nodesSynced, c.configMapsSynced) {
		if ctx.Err() != nil {
			// Asked to stop before the caches synced: a normal shutdown.
			return nil
		}
		return errors.New("failed to wait for caches to sync")
	}

	var wg sync.WaitGroup
	logger.Info("Starting workers", "count", workers)
	for range max(workers, 1) {
		wg.Go(func() { wait.UntilWithContext(ctx, c.runWorker, time.Second) })
	}

	<-ctx.Done()
	logger.Info("Shutting down workers")
	// ShutDown makes Get return at once, so each worker ends after the item
	// it holds; items still queued are picked up by the next leader.
	c.workqueue.ShutDown()
	wg.Wait()
	c.reads.wait()
	logger.Info("Workers stopped")
	return nil
}

func (c *Controller) runWorker(ctx context.Context) {
	for c.processNextWorkItem(ctx) {
	}
}

func (c *Controller) processNextWorkItem(ctx context.Context) bool {
	key, shutdown := c.workqueue.Get()
	if shutdown {
		return false
	}
	defer c.workqueue.Done(key)

	start := c.clock.Now()
	err := c.syncHandler(ctx, key)
	metrics.ObserveReconcile(ControllerName, c.clock.Since(start), err)
	if err == nil {
		c.workqueue.Forget(key)
		return true
	}
	if apierrors.IsConflict(err) {
		// The cache is behind a write (often our own status write); the
		// retry reads the newer object. Routine, so not logged as an error.
		klog.FromContext(ctx).V(2).Info("Conflict syncing; requeuing", "objectReference", key, "err", err)
	} else {
		utilruntime.HandleErrorWithContext(ctx, err, "Error syncing; requeuing for later retry", "objectReference", key)
	}
	c.workqueue.AddRateLimited(key)
	return true
}

// syncHandler evaluates one set and queues its next evaluation, on the
// set's cadence whatever the outcome, so that a long backoff never
// stretches it. The delaying queue keeps only the earliest pending time per
// key: after an extra evaluation (a spec edit, an annotation toggle, a
// retry) the timer set before it still fires, less than an interval later.
// That evaluation, and a rate-limited retry, may not step again: Decide
// holds any change until an interval has passed since the last step.
func (c *Controller) syncHandler(ctx context.Context, key cache.ObjectName) error {
	set, err := c.setsLister.GPUTaskSets(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		c.forget(key)
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting gputaskset %s: %w", key, err)
	}
	if set.Spec.Autoscaling == nil {
		// Autoscaling was removed: drop what it left behind, so the status
		// no longer claims an autoscaler is at work.
		c.forget(key)
		if err := c.applyStatus(ctx, set, withoutAutoscalerStatus(&set.Status)); err != nil {
			return fmt.Errorf("clearing autoscaler status of gputaskset %s: %w", key, err)
		}
		return nil
	}
	ctx = klog.NewContext(ctx, klog.LoggerWithValues(klog.FromContext(ctx), "gputaskset", klog.KObj(set)))
	if invalid, err := c.reportInvalidSpec(ctx, set); invalid || err != nil {
		// Checked again at the default interval, not at one that may itself
		// be what is invalid (a fixed minTaskAge does not re-queue the set).
		c.workqueue.AddAfter(key, scaling.DefaultInterval)
		return err
	}
	err = c.evaluate(ctx, set)
	c.workqueue.AddAfter(key, c.nextEvaluation(key, set))
	if err != nil {
		return fmt.Errorf("evaluating gputaskset %s: %w", key, err)
	}
	return nil
}

// nextEvaluation is one interval from now, or sooner when the decision held
// a step only until a full interval has passed since the last one.
func (c *Controller) nextEvaluation(key cache.ObjectName, set *gputaskv1.GPUTaskSet) time.Duration {
	next := scaling.IntervalOf(set.Spec.Autoscaling)
	c.mu.Lock()
	defer c.mu.Unlock()
	if state := c.sets[key]; state != nil && state.retryAfter > 0 {
		next = min(next, state.retryAfter)
	}
	return next
}
