package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	resourceinformers "k8s.io/client-go/informers/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	nodeutil "k8s.io/component-helpers/node/util"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/claims"
	"github.com/gputask/gputask-controller/pkg/expectations"
	"github.com/gputask/gputask-controller/pkg/generated/clientset/versioned"
	gputaskscheme "github.com/gputask/gputask-controller/pkg/generated/clientset/versioned/scheme"
	informers "github.com/gputask/gputask-controller/pkg/generated/informers/externalversions/gputask/v1"
	listers "github.com/gputask/gputask-controller/pkg/generated/listers/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/kueue"
	"github.com/gputask/gputask-controller/pkg/metrics"
	"github.com/gputask/gputask-controller/pkg/orphans"
	"github.com/gputask/gputask-controller/pkg/podspec"
	"github.com/gputask/gputask-controller/pkg/reschedule"
	"github.com/gputask/gputask-controller/pkg/taskplan"
	"github.com/gputask/gputask-controller/pkg/tombstone"
)

// ControllerName is the GPUTask controller's identity: the source of its
// events, the name of its queue (and so of its workqueue metrics), the
// controller label of its reconcile metrics, its user agent and its field
// manager.
const ControllerName = "gputask-controller"

const (
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
	// worker: its task comes back at the time reserved for it (statusWriteWait).
	// StatusQPS 0 means no limit here, only the client's.
	StatusQPS   float64
	StatusBurst int
	// Workloads, when set, is Kueue's Workloads: the Scheduled condition of
	// a task whose pod waits for admission carries the queue's reason.
	Workloads *kueue.Workloads
	// GPUAllocation is how tasks that do not choose ask for GPUs; empty means
	// ExtendedResource. DeviceClass and ModelAttribute shape DRA claims
	// (podspec.DefaultDeviceClass, podspec.DefaultModelAttribute).
	GPUAllocation  gputaskv1.GPUAllocationMode
	DeviceClass    string
	ModelAttribute string
	// ClaimTemplates and Claims, where the API server serves DRA, are the
	// ResourceClaimTemplates and ResourceClaims that carry a task's label:
	// DRA tasks' templates, and the claims made from them.
	ClaimTemplates resourceinformers.ResourceClaimTemplateInformer
	Claims         resourceinformers.ResourceClaimInformer
}

// maxRetryDelay bounds the backoff of a task whose sync keeps failing, so
// that a pod create refused while an admission webhook was down is tried
// again within this long of its return (the client-go default grows to
// 1000 s).
const maxRetryDelay = time.Minute

// retryRateLimiter is client-go's DefaultTypedControllerRateLimiter with
// the per-task backoff capped at maxRetryDelay.
func retryRateLimiter() workqueue.TypedRateLimiter[cache.ObjectName] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](5*time.Millisecond, maxRetryDelay),
		&workqueue.TypedBucketRateLimiter[cache.ObjectName]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// podOptions are the settings that shape every pod.
func (o Options) podOptions() podspec.Options {
	return podspec.Options{
		GPUResourceName:    o.GPUResourceName,
		GPULabelKey:        o.GPULabelKey,
		DefaultImage:       o.DefaultImage,
		GPUTaintToleration: o.GPUTaintToleration,
		GPUAllocation:      o.GPUAllocation,
		DeviceClass:        o.DeviceClass,
		ModelAttribute:     o.ModelAttribute,
	}
}

func (o Options) withDefaults() Options {
	if o.GPUResourceName == "" {
		o.GPUResourceName = podspec.DefaultGPUResourceName
	}
	if o.GPULabelKey == "" {
		o.GPULabelKey = podspec.DefaultGPULabelKey
	}
	if o.DefaultImage == "" {
		o.DefaultImage = podspec.DefaultImage
	}
	if o.MaxConcurrentReschedules <= 0 {
		o.MaxConcurrentReschedules = reschedule.DefaultMaxConcurrent
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
	// workloads is Kueue's Workloads, nil without Kueue.
	workloads       *kueue.Workloads
	workloadsSynced cache.InformerSynced
	// templates and claimsLister are nil where the API server serves no
	// DRA.
	templates    *claims.Templates
	claimsLister resourcelisters.ResourceClaimLister
	claimsSynced cache.InformerSynced

	workqueue workqueue.TypedRateLimitingInterface[cache.ObjectName]
	// broadcaster is nil when Options.Recorder was given.
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	clock       clock.WithTicker

	opts         Options
	podOpts      podspec.Options
	rescheduling reschedule.Options
	expectations *expectations.Expectations
	// orphans deletes the pods of tasks that are gone.
	orphans orphans.Cleaner

	mu sync.Mutex
	// state is what the controller remembers of a task between syncs
	// (taskState), by task; a task with nothing to remember has no entry.
	state map[cache.ObjectName]*taskState
	// statusLimiter paces the status writes at the status client's rate, so
	// that no worker blocks in that client's own limiter. It is nil when
	// Options.StatusQPS is 0.
	statusLimiter *rate.Limiter
}

// taskState is what the controller remembers of one task between syncs,
// in memory only: after a restart each field starts empty, and the sync
// falls back to what the caches and the API server show. A sync works on a
// copy and stores it once (store); the event handlers note deletions in
// place (update).
type taskState struct {
	// deletedUID is the UID of a deleted task, kept until its pod is
	// deleted, so that only the pod this very task controlled is deleted.
	deletedUID types.UID
	// orphaningUID is the UID of a task being deleted with its pod orphaned.
	orphaningUID types.UID
	// memory is what the planner remembers (taskplan.Memory).
	memory taskplan.Memory
	// statusWrittenFrom is, once this controller wrote the task's status and
	// until the cache shows the write, the resourceVersion it replaced.
	statusWrittenFrom *string
	// statusWriteAt is the time reserved for a deferred status write.
	statusWriteAt time.Time
}

// update runs fn on the task's state under the lock, and forgets the task
// once nothing is left to remember.
func (c *Controller) update(key cache.ObjectName, fn func(*taskState)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.state[key]
	if s == nil {
		s = &taskState{}
	}
	fn(s)
	if *s == (taskState{}) {
		delete(c.state, key)
		return
	}
	c.state[key] = s
}

// load returns a copy of what the controller remembers of the task.
func (c *Controller) load(key cache.ObjectName) taskState {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.state[key]; s != nil {
		return *s
	}
	return taskState{}
}

// store keeps what a sync remembers of the task. What the event handlers
// noted meanwhile stays, except the deleted task's UID the sync dealt with.
func (c *Controller) store(key cache.ObjectName, next taskState, dealtWith types.UID) {
	c.update(key, func(s *taskState) {
		deleted, orphaning := s.deletedUID, s.orphaningUID
		*s = next
		s.deletedUID, s.orphaningUID = deleted, orphaning
		if deleted == dealtWith {
			s.deletedUID = ""
		}
	})
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
		recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: ControllerName})
	}

	c := &Controller{
		kubeclientset:    kubeclientset,
		gputaskclientset: gputaskclientset,
		tasksLister:      taskInformer.Lister(),
		podsLister:       podInformer.Lister(),
		podsIndexer:      podInformer.Informer().GetIndexer(),
		nodesLister:      nodeInformer.Lister(),
		workqueue: workqueue.NewTypedRateLimitingQueueWithConfig(
			retryRateLimiter(),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: ControllerName, Clock: opts.Clock},
		),
		broadcaster:  broadcaster,
		recorder:     recorder,
		clock:        opts.Clock,
		opts:         opts,
		podOpts:      opts.podOptions(),
		rescheduling: reschedule.Options{Interval: opts.RescheduleInterval, PendingTimeout: opts.PendingTimeout, NodeNotReadyTimeout: opts.NodeNotReadyTimeout},
		expectations: expectations.New(opts.Clock, expectations.DefaultTTL),
		state:        map[cache.ObjectName]*taskState{},
	}
	c.orphans = orphans.Cleaner{Kube: kubeclientset, GPUTask: gputaskclientset, Pods: c.podsLister, Tasks: c.tasksLister}
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
		AddFunc:    func(obj any) { c.addTask(logger, obj) },
		UpdateFunc: func(old, cur any) { c.updateTask(logger, old, cur) },
		DeleteFunc: func(obj any) { c.deleteTask(logger, obj) },
	})
	utilruntime.Must(err)
	podsReg, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.addPod(logger, obj) },
		UpdateFunc: func(old, cur any) { c.updatePod(logger, old, cur) },
		DeleteFunc: func(obj any) { c.deletePod(logger, obj) },
	})
	utilruntime.Must(err)
	nodesReg, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) { c.updateNode(logger, old, cur) },
		DeleteFunc: func(obj any) { c.deleteNode(logger, obj) },
	})
	utilruntime.Must(err)
	c.tasksSynced, c.podsSynced, c.nodesSynced = tasksReg.HasSynced, podsReg.HasSynced, nodesReg.HasSynced
	c.workloadsSynced = func() bool { return true }
	if opts.Workloads != nil {
		c.workloads = opts.Workloads
		workloadsReg, err := opts.Workloads.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.addWorkload(logger, obj) },
			UpdateFunc: func(_, cur any) { c.addWorkload(logger, cur) },
			DeleteFunc: func(obj any) { c.addWorkload(logger, obj) },
		})
		utilruntime.Must(err)
		c.workloadsSynced = workloadsReg.HasSynced
	}
	c.claimsSynced = func() bool { return true }
	if opts.ClaimTemplates != nil && opts.Claims != nil {
		c.templates = &claims.Templates{Client: kubeclientset, Lister: opts.ClaimTemplates.Lister(), PodOpts: c.podOpts}
		c.claimsLister = opts.Claims.Lister()
		handler := cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.enqueueTaskOfClaim(logger, obj) },
			UpdateFunc: func(_, cur any) { c.enqueueTaskOfClaim(logger, cur) },
			DeleteFunc: func(obj any) { c.enqueueTaskOfClaim(logger, obj) },
		}
		templatesReg, err := opts.ClaimTemplates.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: handler.DeleteFunc})
		utilruntime.Must(err)
		claimsReg, err := opts.Claims.Informer().AddEventHandler(handler)
		utilruntime.Must(err)
		c.claimsSynced = func() bool { return templatesReg.HasSynced() && claimsReg.HasSynced() }
	}
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
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.tasksSynced, c.podsSynced, c.nodesSynced, c.workloadsSynced, c.claimsSynced) {
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

// syncHandler makes the task's pod match the task and the task's status match
// the pod. It reads the task, its pod and what the controller remembers of
// the task; plans (pkg/taskplan); carries the plan out; writes the status
// from the outcomes; stores what to remember; and requeues once. It reads
// only from listers and writes only what differs.
func (c *Controller) syncHandler(ctx context.Context, key cache.ObjectName) error {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "gputask", key)
	ctx = klog.NewContext(ctx, logger)

	s, err := c.read(key)
	if err != nil {
		return err
	}
	s.plan = taskplan.Make(s.input)
	out, err := c.act(ctx, s)
	if err == nil {
		err = c.syncStatus(ctx, s, &out)
	}
	s.state.memory = out.memory
	c.store(key, s.state, s.dealtWith)
	if out.after > 0 {
		c.workqueue.AddAfter(key, out.after)
	}
	return err
}

// read gathers, from the caches, what the plan of a sync of key needs.
func (c *Controller) read(key cache.ObjectName) (*taskSync, error) {
	task, err := c.tasksLister.GPUTasks(key.Namespace).Get(key.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("getting gputask %s from the cache: %w", key, err)
	}
	s := &taskSync{key: key, state: c.load(key)}
	s.input = taskplan.Input{
		PodOptions: c.podOpts, Rescheduling: c.rescheduling,
		DeletedUID: s.state.deletedUID, Memory: s.state.memory, Now: c.clock.Now(),
	}
	if apierrors.IsNotFound(err) {
		return s, nil
	}
	// The task is here: a deletion noted earlier was of another task.
	s.task, s.input.Task, s.dealtWith = task, task, s.state.deletedUID
	if task.DeletionTimestamp != nil {
		return s, nil
	}
	pod, err := c.podsLister.Pods(task.Namespace).Get(task.Name)
	switch {
	case apierrors.IsNotFound(err):
		s.input.ExpectationsMet = c.expectations.Satisfied(key.String())
	case err != nil:
		return nil, fmt.Errorf("getting pod %s/%s from the cache: %w", task.Namespace, task.Name, err)
	default:
		s.pod, s.input.Pod, s.input.Node = pod, pod, c.nodeOf(pod)
	}
	return s, nil
}

// addTask puts a task's key on the queue.
func (c *Controller) addTask(logger klog.Logger, obj any) {
	key, err := cache.ObjectToName(obj)
	if err != nil {
		utilruntime.HandleErrorWithLogger(logger, err, "Getting the key of a task")
		return
	}
	c.workqueue.Add(key)
}

// deleteTask remembers the deleted task's UID, taken from the last
// state the informer knew (a tombstone if the delete was missed), so the
// sync deletes only the pod that this task controlled.
func (c *Controller) deleteTask(logger klog.Logger, obj any) {
	task, ok := tombstone.Unwrap[*gputaskv1.GPUTask](obj)
	if !ok {
		return
	}
	key := cache.MetaObjectToName(task)
	c.update(key, func(s *taskState) {
		if s.orphaningUID != task.UID {
			s.deletedUID = task.UID
		}
		s.orphaningUID = ""
	})
	c.workqueue.Add(key)
}

// updateTask enqueues the task, and notes a task deleted with
// propagationPolicy=Orphan: its final state no longer shows the orphan
// finalizer, and its pod must then be left running.
func (c *Controller) updateTask(logger klog.Logger, _, newObj any) {
	if task, ok := newObj.(*gputaskv1.GPUTask); ok && task.DeletionTimestamp != nil &&
		slices.Contains(task.Finalizers, metav1.FinalizerOrphanDependents) {
		c.update(cache.MetaObjectToName(task), func(s *taskState) { s.orphaningUID = task.UID })
	}
	c.addTask(logger, newObj)
}

func (c *Controller) enqueueAllTasks(ctx context.Context) {
	tasks, err := c.tasksLister.List(labels.Everything())
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Listing gputasks from the cache")
		return
	}
	for _, t := range tasks {
		c.workqueue.Add(cache.MetaObjectToName(t))
	}
}

// addPod counts the expected creation down before the task is synced,
// so the sync sees the expectation met.
func (c *Controller) addPod(logger klog.Logger, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	key, owned := c.taskOfPod(pod)
	if key == nil {
		return
	}
	if owned {
		c.expectations.CreationObserved(key.String())
	}
	c.workqueue.Add(*key)
}

func (c *Controller) updatePod(logger klog.Logger, oldObj, newObj any) {
	oldPod, ok1 := oldObj.(*corev1.Pod)
	newPod, ok2 := newObj.(*corev1.Pod)
	if ok1 && ok2 && oldPod.ResourceVersion == newPod.ResourceVersion {
		// A periodic resync: nothing changed, and the time-based cases have
		// their own timers.
		return
	}
	c.enqueueTaskOfPod(logger, newObj)
}

// enqueueTaskOfPod enqueues the task a pod event concerns. A tombstone from a
// missed delete is unwrapped, since a pod that is gone is exactly what makes
// its task create a new one.
func (c *Controller) enqueueTaskOfPod(logger klog.Logger, obj any) {
	pod, ok := tombstone.Unwrap[*corev1.Pod](obj)
	if !ok {
		return
	}
	if key, _ := c.taskOfPod(pod); key != nil {
		c.workqueue.Add(*key)
	}
}

// taskOfPod returns the task a pod event concerns. owned is true when the
// pod's controller reference names a GPUTask in the cache with the same UID;
// checking the UID keeps a pod of a deleted task from being taken for the
// pod of a new task with the same name. A pod not controlled by a task still
// concerns the task of the same name, which it blocks (PodConflict). A pod
// controlled by a task that is not in the cache concerns its own name, whose
// sync deletes it if that task is gone (pkg/orphans).
func (c *Controller) taskOfPod(pod *corev1.Pod) (key *cache.ObjectName, owned bool) {
	if ref := metav1.GetControllerOf(pod); ref != nil && isTaskRef(ref) {
		task, err := c.tasksLister.GPUTasks(pod.Namespace).Get(ref.Name)
		if err == nil && task.UID == ref.UID {
			k := cache.MetaObjectToName(task)
			return &k, true
		}
	}
	if task, err := c.tasksLister.GPUTasks(pod.Namespace).Get(pod.Name); err == nil {
		k := cache.MetaObjectToName(task)
		return &k, false
	}
	if ref := metav1.GetControllerOf(pod); ref != nil && isTaskRef(ref) {
		// Controlled by a task the cache does not have: the sync of the
		// pod's name finds out whether it is an orphan to delete.
		k := cache.MetaObjectToName(pod)
		return &k, false
	}
	return nil, false
}

// addWorkload queues the tasks of the pods that own a Kueue Workload, so
// that their Scheduled condition follows what the queue says.
func (c *Controller) addWorkload(logger klog.Logger, obj any) {
	ns, pods := kueue.OwnerPods(obj)
	for _, name := range pods {
		pod, err := c.podsLister.Pods(ns).Get(name)
		if err != nil {
			continue
		}
		if key, _ := c.taskOfPod(pod); key != nil {
			logger.V(4).Info("Workload of a task's pod changed", "pod", klog.KObj(pod))
			c.workqueue.Add(*key)
		}
	}
}

// enqueueTaskOfClaim queues the task whose label a ResourceClaimTemplate or
// a ResourceClaim carries: a claim's allocation is the task's status, and a
// template deleted by someone else is made again for the next pod.
func (c *Controller) enqueueTaskOfClaim(logger klog.Logger, obj any) {
	meta, ok := tombstone.Unwrap[metav1.Object](obj)
	if !ok {
		return
	}
	name := meta.GetLabels()[gputaskv1.LabelTask]
	if name == "" {
		return
	}
	logger.V(4).Info("Claim of a task changed", "object", klog.KObj(meta), "task", name)
	c.workqueue.Add(cache.ObjectName{Namespace: meta.GetNamespace(), Name: name})
}

func isTaskRef(ref *metav1.OwnerReference) bool {
	return gputaskv1.IsRefTo(ref, podspec.GPUTaskKind.Kind)
}

// updateNode enqueues the tasks on a node whose readiness changed.
// Nodes update their status every few seconds; only a readiness change can
// change a decision.
func (c *Controller) updateNode(logger klog.Logger, oldObj, newObj any) {
	oldNode, ok1 := oldObj.(*corev1.Node)
	newNode, ok2 := newObj.(*corev1.Node)
	if !ok1 || !ok2 || nodeReady(oldNode) == nodeReady(newNode) {
		return
	}
	c.enqueueTasksOnNode(logger, newNode.Name)
}

func (c *Controller) deleteNode(logger klog.Logger, obj any) {
	node, ok := tombstone.Unwrap[*corev1.Node](obj)
	if !ok {
		return
	}
	c.enqueueTasksOnNode(logger, node.Name)
}

// podsByNode names the index of the pod cache by spec.nodeName.
const podsByNode = "spec.nodeName"

// podNodeName is the index function: the node a pod is bound to, if any.
func podNodeName(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return nil, nil
	}
	return []string{pod.Spec.NodeName}, nil
}

func (c *Controller) enqueueTasksOnNode(logger klog.Logger, nodeName string) {
	objs, err := c.podsIndexer.ByIndex(podsByNode, nodeName)
	if err != nil {
		utilruntime.HandleErrorWithLogger(logger, err, "Reading the pods of a node from the cache", "node", nodeName)
		return
	}
	for _, obj := range objs {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			continue
		}
		if key, owned := c.taskOfPod(pod); key != nil && owned {
			c.workqueue.Add(*key)
		}
	}
}

// nodeReady is the status of the node's Ready condition, empty when it has
// none.
func nodeReady(node *corev1.Node) corev1.ConditionStatus {
	if _, cond := nodeutil.GetNodeCondition(&node.Status, corev1.NodeReady); cond != nil {
		return cond.Status
	}
	return ""
}

// deletePod enqueues the task of a deleted pod: a pod that is gone is exactly
// what makes its task create a new one.
func (c *Controller) deletePod(logger klog.Logger, obj any) {
	c.enqueueTaskOfPod(logger, obj)
}
