// Package taskset is the GPUTaskSet controller: it keeps exactly the desired
// number of GPUTasks for each set, carrying out the scale plan that
// pkg/setplan makes (the cheapest tasks first on scale-in, busy ones drained,
// the stop annotation and minTaskAge honoured, the tasks on nodes being
// disrupted replaced early: disrupted.go), and rolls a restart through the
// set's tasks one at a time (restart.go).
//
// It follows the shape of k8s.io/sample-controller (Run → runWorker →
// processNextWorkItem → syncHandler) and the safety habits of the ReplicaSet
// controller: expectations, slow-start batches and status writes only when
// something changed. The autoscaler writes spec.replicas; this controller only
// makes the world match it.
package taskset

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gputask/gputask-controller/pkg/metrics"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	corev1 "k8s.io/api/core/v1"
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
	"github.com/gputask/gputask-controller/pkg/expectations"
	"github.com/gputask/gputask-controller/pkg/generated/clientset/versioned"
	gputaskscheme "github.com/gputask/gputask-controller/pkg/generated/clientset/versioned/scheme"
	informers "github.com/gputask/gputask-controller/pkg/generated/informers/externalversions/gputask/v1"
	listers "github.com/gputask/gputask-controller/pkg/generated/listers/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/setplan"
	"github.com/gputask/gputask-controller/pkg/taskindex"
)

const (
	// ControllerName is the controller's identity: the source of its
	// events, the name of its queue (and so of its workqueue metrics), the
	// controller label of its reconcile metrics, its user agent and its
	// field manager.
	ControllerName = "gputaskset-controller"
)

// setKind is the kind written into the tasks' controller references.
var setKind = gputaskv1.SchemeGroupVersion.WithKind("GPUTaskSet")

// Options tunes the controller. The zero value is what production wants.
type Options struct {
	// Recorder records Events. Nil builds one that writes through
	// kubeclientset; Run shuts it down when it returns.
	Recorder record.EventRecorder
	// Clock tells the time for minTaskAge, restarts and expectations, and
	// drives the queue's delays. Nil means the real clock; tests pass a fake one.
	Clock clock.WithTicker
	// BurstReplicas caps creations or deletions per sync. Zero means
	// setplan.DefaultBurstReplicas.
	BurstReplicas int
	// ExpectationsTimeout is how long to wait for the cache to show this
	// controller's writes. Zero means expectations.DefaultTTL.
	ExpectationsTimeout time.Duration
	// StatusClient, when set, writes the sets' status, so that those
	// writes never take from the rate limit of the task creates and
	// deletes. Nil writes it through gputaskclientset.
	StatusClient versioned.Interface
}

func (o Options) withDefaults() Options {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.BurstReplicas <= 0 {
		o.BurstReplicas = setplan.DefaultBurstReplicas
	}
	if o.ExpectationsTimeout <= 0 {
		o.ExpectationsTimeout = expectations.DefaultTTL
	}
	return o
}

// Controller keeps each GPUTaskSet's tasks at the desired count.
type Controller struct {
	kubeclientset    kubernetes.Interface
	gputaskclientset versioned.Interface
	// statusclientset writes the sets' status (Options.StatusClient).
	statusclientset versioned.Interface

	setsLister  listers.GPUTaskSetLister
	setsSynced  cache.InformerSynced
	tasksLister listers.GPUTaskLister
	tasksSynced cache.InformerSynced
	// tasksIndexer finds a set's tasks by its UID (pkg/taskindex), and a
	// node's tasks by its name (tasksByNode).
	tasksIndexer cache.Indexer
	// nodesLister tells which nodes a node autoscaler is taking away
	// (disrupted.go).
	nodesLister corelisters.NodeLister
	nodesSynced cache.InformerSynced

	workqueue workqueue.TypedRateLimitingInterface[cache.ObjectName]
	// broadcaster is nil when Options.Recorder was given.
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	clock       clock.WithTicker

	expectations *expectations.Expectations
	burst        int
	// statusPacer spaces each set's status writes by statusInterval.
	statusPacer *statusPacer
}

// Events about GPUTaskSets need the GPUTaskSet kind in the scheme the recorder
// uses. It is added once, before anything runs: adding it in NewController,
// as sample-controller does, writes the shared scheme while the informers of
// a controller built earlier in the process read it.
func init() {
	utilruntime.Must(gputaskscheme.AddToScheme(scheme.Scheme))
}

// NewController wires the controller to the informers. It makes no API call
// and starts nothing but the Event broadcaster; Run starts the work.
func NewController(
	ctx context.Context,
	kubeclientset kubernetes.Interface,
	gputaskclientset versioned.Interface,
	setInformer informers.GPUTaskSetInformer,
	taskInformer informers.GPUTaskInformer,
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
		recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: ControllerName})
	}

	// Sets look their tasks up by UID rather than scan their namespace.
	utilruntime.Must(taskindex.Add(taskInformer.Informer()))
	utilruntime.Must(addTasksByNode(taskInformer.Informer()))
	c := &Controller{
		kubeclientset:    kubeclientset,
		gputaskclientset: gputaskclientset,
		statusclientset:  cmp.Or(opts.StatusClient, gputaskclientset),
		setsLister:       setInformer.Lister(),
		tasksLister:      taskInformer.Lister(),
		tasksIndexer:     taskInformer.Informer().GetIndexer(),
		nodesLister:      nodeInformer.Lister(),
		workqueue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: ControllerName, Clock: opts.Clock},
		),
		broadcaster:  broadcaster,
		recorder:     recorder,
		clock:        opts.Clock,
		expectations: expectations.New(opts.Clock, opts.ExpectationsTimeout),
		burst:        opts.BurstReplicas,
		statusPacer:  newStatusPacer(opts.Clock),
	}

	logger.Info("Setting up event handlers")
	// Run waits for the handler registrations rather than the informers:
	// they have synced once the handlers saw the initial list, so the
	// expectations and the queue start from the full picture.
	setsReg, err := setInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.addSet(logger, obj) },
		UpdateFunc: func(old, cur any) { c.updateSet(logger, old, cur) },
		DeleteFunc: func(obj any) { c.deleteSet(logger, obj) },
	})
	utilruntime.Must(err)
	tasksReg, err := taskInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.addTask(logger, obj) },
		UpdateFunc: func(old, cur any) { c.updateTask(logger, old, cur) },
		DeleteFunc: func(obj any) { c.deleteTask(logger, obj) },
	})
	utilruntime.Must(err)
	nodesReg, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.addNode(logger, obj) },
		UpdateFunc: func(old, cur any) { c.updateNode(logger, old, cur) },
		DeleteFunc: func(obj any) { c.deleteNode(logger, obj) },
	})
	utilruntime.Must(err)
	c.setsSynced, c.tasksSynced, c.nodesSynced = setsReg.HasSynced, tasksReg.HasSynced, nodesReg.HasSynced
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

	logger.Info("Starting GPUTaskSet controller")
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.setsSynced, c.tasksSynced, c.nodesSynced) {
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

// syncHandler makes the set's tasks match its desired count, moves a restart
// one task further, and writes the set's status. It reads only from the
// caches, and it makes no API write when the set is in sync.
func (c *Controller) syncHandler(ctx context.Context, key cache.ObjectName) error {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "gputaskset", key.String())
	ctx = klog.NewContext(ctx, logger)

	set, err := c.setsLister.GPUTaskSets(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		logger.V(4).Info("GPUTaskSet is gone")
		c.expectations.Delete(key.String())
		c.statusPacer.forget(key)
		metrics.CurrentReplicas.DeleteLabelValues(key.Namespace, key.Name)
		metrics.Nodes.DeleteLabelValues(key.Namespace, key.Name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting gputaskset %s from the cache: %w", key, err)
	}

	// Read the expectations before the tasks: a task the informer adds in
	// between is then in the list, never missing from both.
	canAct := c.expectations.Satisfied(key.String()) && set.DeletionTimestamp == nil
	active, err := c.activeTasks(set)
	if err != nil {
		return err
	}
	plan := setplan.ForSet(set, active, nil, c.disruptedNodes(active), c.clock.Now(), c.burst)

	var manageErr, restartErr error
	if canAct {
		manageErr = c.manageReplicas(ctx, set, plan)
		restartErr = c.rollRestart(ctx, set, plan.ServingAfter(active))
	} else {
		logger.V(4).Info("Waiting for the cache to show earlier writes before acting")
	}
	if plan.HeldBack > 0 {
		logger.V(2).Info("Scale-in held back by minTaskAge or an invalid spec", "heldBack", plan.HeldBack, "retryAfter", plan.RetryAfter)
	}
	if plan.RetryAfter > 0 {
		// Nothing else wakes the set when a young task comes of age or a
		// drain times out.
		c.workqueue.AddAfter(key, plan.RetryAfter)
	}

	metrics.CurrentReplicas.WithLabelValues(set.Namespace, set.Name).Set(float64(len(active)))
	want := calculateStatus(set, active, plan, canAct, manageErr, c.clock.Now())
	metrics.Nodes.WithLabelValues(set.Namespace, set.Name).Set(float64(want.Nodes))
	if wait := c.statusPacer.wait(key); wait > 0 && ownStatusOf(set).countsDifferOnly(want) {
		// The status was written less than statusInterval ago and only the
		// counts moved: the sync this brings writes them, with whatever
		// changed in between. A new generation or condition is written at
		// once.
		c.workqueue.AddAfter(key, wait)
		return errors.Join(manageErr, restartErr)
	}
	// Any failure requeues the set with backoff; the status is written
	// even when creates or deletes failed, so ReplicaFailure shows why.
	return errors.Join(manageErr, restartErr, c.applyStatus(ctx, set, want))
}
