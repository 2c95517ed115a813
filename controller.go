package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
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

	"github.com/gputask/gputask-controller/pkg/expectations"
	"github.com/gputask/gputask-controller/pkg/generated/clientset/versioned"
	gputaskscheme "github.com/gputask/gputask-controller/pkg/generated/clientset/versioned/scheme"
	informers "github.com/gputask/gputask-controller/pkg/generated/informers/externalversions/gputask/v1"
	listers "github.com/gputask/gputask-controller/pkg/generated/listers/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/metrics"
	"github.com/gputask/gputask-controller/pkg/podspec"
	"github.com/gputask/gputask-controller/pkg/reschedule"
)

const (
	controllerAgentName = "gputask-controller"
	// metricsName is the controller label of the reconcile metrics.
	metricsName = "gputask"
	// queueName names the workqueue, and so its Prometheus metrics.
	queueName = "gputasks"

	// Event reasons.
	ReasonFailedCreate = "FailedCreate"
	ReasonFailedDelete = "FailedDelete"
	ReasonInvalidSpec  = "InvalidSpec"
	ReasonPodConflict  = "PodConflict"
	ReasonRescheduling = "Rescheduling"
	ReasonRescheduled  = "Rescheduled"
	ReasonRestarted    = "Restarted"
	ReasonForceDeleted = "ForceDeleted"

	// DefaultImage runs a task that names no image.
	DefaultImage = "busybox:1.36"
	// DefaultTaskWorkers is how many tasks are synced at once. A task's sync
	// is mostly one API call, so the pod creates of a large set go as fast
	// as the client's rate limit allows only with many calls in flight, as
	// the ReplicaSet controller's parallel creates have.
	DefaultTaskWorkers = 64
	// DefaultMaxConcurrentReschedules bounds how many tasks may be without a
	// pod at once because the controller replaces it.
	DefaultMaxConcurrentReschedules = 5

	// replacementPoll is how soon a task whose old pod is terminating is looked
	// at again; the pod's delete event usually comes first.
	replacementPoll = 2 * time.Second
	// conflictRecheck is how soon a task blocked by a pod outside the
	// controller's informer (no gputask.io/task label, so no events) is
	// looked at again.
	conflictRecheck = 30 * time.Second
	// minResync keeps the time-based enqueue-all from spinning on tiny intervals.
	minResync = 10 * time.Second
)

// Options are the controller's settings; zero values take the defaults
// documented on each field.
type Options struct {
	// GPUResourceName is the resource the pod's limit asks for (nvidia.com/gpu).
	GPUResourceName corev1.ResourceName
	// GPULabelKey is the node label matched against spec.gpu (nvidia.com/gpu.product).
	GPULabelKey string
	// DefaultImage runs a task that names no image (busybox:1.36).
	DefaultImage string
	// GPUTaintToleration gives each pod a toleration for the GPU taint.
	GPUTaintToleration bool
	// RescheduleInterval turns rescheduling on when > 0, and is the pod age
	// after which a Periodic task is placed again. 0 turns rescheduling off;
	// a restart asked for with gputask.io/restartedAt is always honoured.
	RescheduleInterval time.Duration
	// PendingTimeout is how long a pod may stay unschedulable before it is
	// placed again; 0 turns that case off.
	PendingTimeout time.Duration
	// NodeNotReadyTimeout is how long a pod's node may be NotReady before the
	// pod is placed again; 0 acts at once.
	NodeNotReadyTimeout time.Duration
	// MaxConcurrentReschedules bounds the tasks between the deletion of their
	// old pod and the creation of the new one (5).
	MaxConcurrentReschedules int
	// Recorder records Events. Nil builds one that writes through
	// kubeclientset; Run shuts it down when it returns.
	Recorder record.EventRecorder
	// Clock tells the time for rescheduling, restarts and expectations, and
	// drives the queue's delays. Nil means the real clock; tests pass a fake one.
	Clock clock.WithTicker
	// StatusQPS and StatusBurst are the rate limit of the client that writes
	// task status. A write that would wait for it is not made to wait in a
	// worker: its task comes back at the time reserved for it (status.go).
	// StatusQPS 0 means no limit here, only the client's.
	StatusQPS   float64
	StatusBurst int
}

func (o Options) withDefaults() Options {
	if o.GPUResourceName == "" {
		o.GPUResourceName = podspec.DefaultGPUResourceName
	}
	if o.GPULabelKey == "" {
		o.GPULabelKey = podspec.DefaultGPULabelKey
	}
	if o.DefaultImage == "" {
		o.DefaultImage = DefaultImage
	}
	if o.MaxConcurrentReschedules <= 0 {
		o.MaxConcurrentReschedules = DefaultMaxConcurrentReschedules
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}

// Controller runs each GPUTask as exactly one Pod and mirrors the pod in the
// task's status.
type Controller struct {
	kubeclientset    kubernetes.Interface
	gputaskclientset versioned.Interface

	tasksLister listers.GPUTaskLister
	tasksSynced cache.InformerSynced
	podsLister  corelisters.PodLister
	podsSynced  cache.InformerSynced
	// podsIndexer holds the pods by node (podsByNode).
	podsIndexer cache.Indexer
	nodesLister corelisters.NodeLister
	nodesSynced cache.InformerSynced

	workqueue workqueue.TypedRateLimitingInterface[cache.ObjectName]
	// broadcaster is nil when Options.Recorder was given.
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	clock       clock.WithTicker

	opts         Options
	podOpts      podspec.Options
	rescheduling reschedule.Options
	expectations *expectations.Expectations

	mu sync.Mutex
	// replacements are the pods being replaced, by task.
	replacements map[cache.ObjectName]*replacement
	// deletedTasks keeps the UID of a deleted task until its pod is deleted,
	// so that only the pod this very task controlled is deleted.
	deletedTasks map[cache.ObjectName]types.UID
	// orphaning holds the UIDs of tasks being deleted with their pods orphaned.
	orphaning map[cache.ObjectName]types.UID
	// warnedRestartedAt remembers the bad restartedAt value already reported,
	// so a bad annotation costs one event, not one per sync.
	warnedRestartedAt map[cache.ObjectName]string
	// statusWrittenFrom holds, for a task whose status this controller has
	// written and whose cache has not shown the write yet, the
	// resourceVersion the write replaced (status.go).
	statusWrittenFrom map[cache.ObjectName]string
	// statusLimiter paces the status writes at the status client's rate, so
	// that no worker blocks in that client's own limiter; statusWriteAt
	// holds the time reserved for a task's deferred write. statusLimiter is
	// nil when Options.StatusQPS is 0.
	statusLimiter *rate.Limiter
	statusWriteAt map[cache.ObjectName]time.Time
}

// Events about GPUTasks need the GPUTask kind in the scheme the recorder
// uses. It is added once, before anything runs: adding it in NewController,
// as sample-controller does, writes the shared scheme while the informers of
// a controller built earlier in the process read it.
func init() {
	utilruntime.Must(gputaskscheme.AddToScheme(scheme.Scheme))
}

// NewController returns a GPUTask controller. podInformer must come from a
// factory filtered to pods with the gputask.io/task label; nodeInformer is
// unfiltered, for noticing lost and NotReady nodes.
func NewController(
	ctx context.Context,
	kubeclientset kubernetes.Interface,
	gputaskclientset versioned.Interface,
	taskInformer informers.GPUTaskInformer,
	podInformer coreinformers.PodInformer,
	nodeInformer coreinformers.NodeInformer,
	opts Options,
) *Controller {
	logger := klog.FromContext(ctx)
	opts = opts.withDefaults()

	recorder, broadcaster := opts.Recorder, record.EventBroadcaster(nil)
	if recorder == nil {
		broadcaster = record.NewBroadcaster(record.WithContext(ctx))
		broadcaster.StartStructuredLogging(4)
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kubeclientset.CoreV1().Events("")})
		recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: controllerAgentName})
	}

	c := &Controller{
		kubeclientset:    kubeclientset,
		gputaskclientset: gputaskclientset,
		tasksLister:      taskInformer.Lister(),
		podsLister:       podInformer.Lister(),
		podsIndexer:      podInformer.Informer().GetIndexer(),
		nodesLister:      nodeInformer.Lister(),
		workqueue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: queueName, Clock: opts.Clock},
		),
		broadcaster: broadcaster,
		recorder:    recorder,
		clock:       opts.Clock,
		opts:        opts,
		podOpts: podspec.Options{
			GPUResourceName:    opts.GPUResourceName,
			GPULabelKey:        opts.GPULabelKey,
			DefaultImage:       opts.DefaultImage,
			GPUTaintToleration: opts.GPUTaintToleration,
		},
		rescheduling:      reschedule.Options{Interval: opts.RescheduleInterval, PendingTimeout: opts.PendingTimeout, NodeNotReadyTimeout: opts.NodeNotReadyTimeout},
		expectations:      expectations.New(opts.Clock, expectations.DefaultTTL),
		replacements:      map[cache.ObjectName]*replacement{},
		deletedTasks:      map[cache.ObjectName]types.UID{},
		orphaning:         map[cache.ObjectName]types.UID{},
		warnedRestartedAt: map[cache.ObjectName]string{},
		statusWrittenFrom: map[cache.ObjectName]string{},
		statusWriteAt:     map[cache.ObjectName]time.Time{},
	}
	if opts.StatusQPS > 0 {
		c.statusLimiter = rate.NewLimiter(rate.Limit(opts.StatusQPS), max(opts.StatusBurst, 1))
	}

	// Added once, however many controllers share the informer.
	if _, ok := podInformer.Informer().GetIndexer().GetIndexers()[podsByNode]; !ok {
		utilruntime.Must(podInformer.Informer().AddIndexers(cache.Indexers{podsByNode: podNodeName}))
	}

	logger.Info("Setting up event handlers")
	// Run waits for the handler registrations rather than the informers:
	// they have synced once the handlers saw the initial list, so the
	// expectations and the queue start from the full picture.
	tasksReg, err := taskInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueTask,
		UpdateFunc: c.handleTaskUpdate,
		DeleteFunc: c.handleTaskDelete,
	})
	utilruntime.Must(err)
	podsReg, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.handlePodAdd,
		UpdateFunc: c.handlePodUpdate,
		DeleteFunc: c.handleObject,
	})
	utilruntime.Must(err)
	nodesReg, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: c.handleNodeUpdate,
		DeleteFunc: c.handleNodeDelete,
	})
	utilruntime.Must(err)
	c.tasksSynced, c.podsSynced, c.nodesSynced = tasksReg.HasSynced, podsReg.HasSynced, nodesReg.HasSynced
	return c
}

// Run waits for the caches, then runs workers until ctx ends, and returns
// once every worker has finished the item it was working on. It returns nil
// on a normal shutdown, also when ctx ends before the caches synced.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.workqueue.ShutDown()
	if c.broadcaster != nil {
		defer c.broadcaster.Shutdown()
	}
	logger := klog.FromContext(ctx)

	logger.Info("Starting GPUTask controller")
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.tasksSynced, c.podsSynced, c.nodesSynced) {
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
	if period := c.resyncPeriod(); period > 0 {
		// Time alone can make a pod due for rescheduling (unschedulable for
		// too long, too old); each sync also schedules its own next look, and
		// this sweep is the net under it.
		wg.Go(func() { wait.UntilWithContext(ctx, c.enqueueAllTasks, period) })
	}

	<-ctx.Done()
	logger.Info("Shutting down workers")
	// ShutDown makes Get return at once, so each worker ends after the item
	// it holds; items still queued are picked up by the next leader.
	c.workqueue.ShutDown()
	wg.Wait()
	logger.Info("Workers stopped")
	return nil
}

func (c *Controller) resyncPeriod() time.Duration {
	period := c.opts.RescheduleInterval
	if period <= 0 {
		return 0
	}
	if t := c.opts.PendingTimeout; t > 0 && t < period {
		period = t
	}
	return max(period, minResync)
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
	if err == errStatusDeferred {
		// The key is queued again for the time its write has reserved.
		err = nil
	}
	metrics.ObserveReconcile(metricsName, c.clock.Since(start), err)
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

// syncHandler makes the task's pod match the task and the task's status match
// the pod. It reads only from listers and writes only what differs.
func (c *Controller) syncHandler(ctx context.Context, key cache.ObjectName) error {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "gputask", key)
	ctx = klog.NewContext(ctx, logger)

	task, err := c.tasksLister.GPUTasks(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return c.deletePodOfDeletedTask(ctx, key)
	}
	if err != nil {
		return fmt.Errorf("getting gputask %s from the cache: %w", key, err)
	}
	c.forgetDeletedTask(key)
	if task.DeletionTimestamp != nil {
		// The task is going away; its pod goes with it through garbage collection.
		return nil
	}

	pod, err := c.podsLister.Pods(task.Namespace).Get(task.Name)
	if apierrors.IsNotFound(err) {
		pod = nil
	} else if err != nil {
		return fmt.Errorf("getting pod %s/%s from the cache: %w", task.Namespace, task.Name, err)
	}

	switch {
	case pod == nil:
		return c.syncMissingPod(ctx, key, task)
	case !isControlledBy(pod, task):
		// The pod of an earlier task of this name is an orphan: once it is
		// deleted, its delete event brings the task back here.
		if deleted, err := c.deleteOrphanPod(ctx, key); err != nil || deleted {
			return err
		}
		return c.syncConflict(ctx, task, pod)
	default:
		return c.syncOwnedPod(ctx, key, task, pod)
	}
}
