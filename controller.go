package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/expectations"
	"github.com/gputask/gputask-controller/pkg/generated/clientset/versioned"
	gputaskscheme "github.com/gputask/gputask-controller/pkg/generated/clientset/versioned/scheme"
	informers "github.com/gputask/gputask-controller/pkg/generated/informers/externalversions/gputask/v1"
	listers "github.com/gputask/gputask-controller/pkg/generated/listers/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/metrics"
	"github.com/gputask/gputask-controller/pkg/podspec"
	"github.com/gputask/gputask-controller/pkg/reschedule"
	"github.com/gputask/gputask-controller/pkg/tombstone"
)

const (
	controllerAgentName = "gputask-controller"
	// metricsName is the controller label of the reconcile metrics.
	metricsName = "gputask"

	// Event reasons.
	ReasonCreated            = "Created"
	ReasonFailedCreate       = "FailedCreate"
	ReasonFailedDelete       = "FailedDelete"
	ReasonInvalidSpec        = "InvalidSpec"
	ReasonPodConflict        = "PodConflict"
	ReasonRescheduling       = "Rescheduling"
	ReasonRescheduled        = "Rescheduled"
	ReasonRestarted          = "Restarted"
	ReasonInvalidRestartedAt = "InvalidRestartedAt"
	ReasonForceDeleted       = "ForceDeleted"

	// DefaultGPUResourceName is the extended resource of the NVIDIA device plugin.
	DefaultGPUResourceName = "nvidia.com/gpu"
	// DefaultGPULabelKey is the node label that GPU Feature Discovery sets to the GPU model.
	DefaultGPULabelKey = "nvidia.com/gpu.product"
	// DefaultImage runs a task that names no image.
	DefaultImage = "busybox:1.36"
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
}

func (o Options) withDefaults() Options {
	if o.GPUResourceName == "" {
		o.GPUResourceName = DefaultGPUResourceName
	}
	if o.GPULabelKey == "" {
		o.GPULabelKey = DefaultGPULabelKey
	}
	if o.DefaultImage == "" {
		o.DefaultImage = DefaultImage
	}
	if o.MaxConcurrentReschedules <= 0 {
		o.MaxConcurrentReschedules = DefaultMaxConcurrentReschedules
	}
	return o
}

// replacement is a pod the controller is replacing: deleted, waiting until it
// is gone, then created again. It lives in memory only; after a restart of
// the controller a missing pod is simply created, without being counted.
type replacement struct {
	oldPodUID types.UID
	// reason is a reschedule reason, or reschedule.ReasonRestart.
	reason string
	// created is set once the new pod exists and only the status write that
	// counts the replacement is left.
	created bool
	// countedFrom is status.reschedules before this replacement and at the
	// time the new pod was created. Writing countedFrom+1 and at, rather
	// than adding one to whatever the status holds, keeps a retried status
	// write from counting the same replacement twice.
	countedFrom int32
	at          metav1.Time
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
	nodesLister corelisters.NodeLister
	nodesSynced cache.InformerSynced

	workqueue   workqueue.TypedRateLimitingInterface[cache.ObjectName]
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder

	opts         Options
	podOpts      podspec.Options
	rescheduling reschedule.Options
	expectations *expectations.Expectations
	now          func() time.Time

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

	// Events about GPUTasks need the GPUTask kind in the scheme the recorder uses.
	utilruntime.Must(gputaskscheme.AddToScheme(scheme.Scheme))
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartStructuredLogging(0)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kubeclientset.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: controllerAgentName})

	c := &Controller{
		kubeclientset:    kubeclientset,
		gputaskclientset: gputaskclientset,
		tasksLister:      taskInformer.Lister(),
		tasksSynced:      taskInformer.Informer().HasSynced,
		podsLister:       podInformer.Lister(),
		podsSynced:       podInformer.Informer().HasSynced,
		nodesLister:      nodeInformer.Lister(),
		nodesSynced:      nodeInformer.Informer().HasSynced,
		workqueue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "gputasks"},
		),
		broadcaster: broadcaster,
		recorder:    recorder,
		opts:        opts,
		podOpts: podspec.Options{
			GPUResourceName:    opts.GPUResourceName,
			GPULabelKey:        opts.GPULabelKey,
			DefaultImage:       opts.DefaultImage,
			GPUTaintToleration: opts.GPUTaintToleration,
		},
		rescheduling:      reschedule.Options{Interval: opts.RescheduleInterval, PendingTimeout: opts.PendingTimeout, NodeNotReadyTimeout: opts.NodeNotReadyTimeout},
		expectations:      expectations.New(clock.RealClock{}, expectations.DefaultTTL),
		now:               time.Now,
		replacements:      map[cache.ObjectName]*replacement{},
		deletedTasks:      map[cache.ObjectName]types.UID{},
		orphaning:         map[cache.ObjectName]types.UID{},
		warnedRestartedAt: map[cache.ObjectName]string{},
	}

	logger.Info("Setting up event handlers")
	handlers := []struct {
		what     string
		informer cache.SharedIndexInformer
		handler  cache.ResourceEventHandler
	}{
		{"gputask", taskInformer.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueueTask,
			UpdateFunc: c.handleTaskUpdate,
			DeleteFunc: c.handleTaskDelete,
		}},
		{"pod", podInformer.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    c.handlePodAdd,
			UpdateFunc: c.handlePodUpdate,
			DeleteFunc: c.handleObject,
		}},
		{"node", nodeInformer.Informer(), cache.ResourceEventHandlerFuncs{
			UpdateFunc: c.handleNodeUpdate,
			DeleteFunc: c.handleNodeDelete,
		}},
	}
	for _, h := range handlers {
		if _, err := h.informer.AddEventHandler(h.handler); err != nil {
			logger.Error(err, "Adding event handler", "informer", h.what)
		}
	}
	return c
}

// Run waits for the caches, then runs workers until ctx is cancelled. It
// returns once every worker has finished the item it was working on.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.broadcaster.Shutdown()
	logger := klog.FromContext(ctx)

	logger.Info("Starting GPUTask controller")
	logger.Info("Waiting for informer caches to sync")
	if ok := cache.WaitForCacheSync(ctx.Done(), c.tasksSynced, c.podsSynced, c.nodesSynced); !ok {
		c.workqueue.ShutDown()
		if ctx.Err() != nil {
			// Asked to stop before the caches synced: a clean shutdown.
			return nil
		}
		return errors.New("failed to wait for caches to sync")
	}

	var wg sync.WaitGroup
	logger.Info("Starting workers", "count", workers)
	for range workers {
		wg.Go(func() { wait.UntilWithContext(ctx, c.runWorker, time.Second) })
	}
	if period := c.resyncPeriod(); period > 0 {
		// Time alone can make a pod due for rescheduling (unschedulable for
		// too long, too old); each sync also schedules its own next look, and
		// this sweep is the net under it.
		wg.Go(func() { wait.UntilWithContext(ctx, c.enqueueAllTasks, period) })
	}

	logger.Info("Started workers")
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

	start := time.Now()
	err := c.syncHandler(ctx, key)
	metrics.ReconcileDuration.WithLabelValues(metricsName).Observe(time.Since(start).Seconds())
	if err == nil {
		metrics.ReconcileTotal.WithLabelValues(metricsName, "success").Inc()
		c.workqueue.Forget(key)
		return true
	}
	metrics.ReconcileTotal.WithLabelValues(metricsName, "error").Inc()
	if apierrors.IsConflict(err) {
		// The cache is behind a write (often our own status write); the
		// retry reads the newer object. Routine, so not logged as an error.
		klog.FromContext(ctx).V(2).Info("Conflict syncing; requeuing", "gputask", key, "err", err)
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
		return c.syncConflict(ctx, task, pod)
	default:
		return c.syncOwnedPod(ctx, key, task, pod)
	}
}

// syncMissingPod creates the task's pod, unless the spec is invalid or a
// creation is already on its way.
func (c *Controller) syncMissingPod(ctx context.Context, key cache.ObjectName, task *gputaskv1.GPUTask) error {
	logger := klog.FromContext(ctx)
	desired, specErr := podspec.Build(task, c.podOpts)
	if specErr != nil {
		c.dropReplacement(key)
		c.warnOnTransition(task, gputaskv1.ConditionSpecValid, ReasonInvalidSpec, specErr.Error(), ReasonInvalidSpec)
		// An invalid spec does not heal by retrying; the update that fixes it
		// enqueues the task again.
		return c.updateStatus(ctx, task, c.computeStatus(task, statusView{specErr: specErr}))
	}
	if !c.expectations.Satisfied(key.String()) {
		// The pod was created and the informer has not delivered it yet; a
		// create now would fail or, worse, race. Look again when it expires.
		logger.V(4).Info("Waiting for the pod creation to be observed")
		c.workqueue.AddAfter(key, expectations.DefaultTTL)
		return nil
	}

	c.expectations.ExpectCreations(key.String(), 1)
	created, err := c.kubeclientset.CoreV1().Pods(task.Namespace).Create(ctx, desired, metav1.CreateOptions{})
	if err != nil {
		// No pod is coming from this call, so nothing is to be observed.
		c.expectations.CreationObserved(key.String())
		if apierrors.IsAlreadyExists(err) {
			return c.handleCreateConflict(ctx, key, task)
		}
		c.recorder.Eventf(task, corev1.EventTypeWarning, ReasonFailedCreate, "Error creating pod %s: %v", desired.Name, err)
		return fmt.Errorf("creating pod for gputask %s: %w", key, err)
	}
	logger.V(2).Info("Created pod", "pod", klog.KObj(created))
	c.recorder.Eventf(task, corev1.EventTypeNormal, ReasonCreated, "Created pod %s", created.Name)

	view := statusView{pod: created}
	if r := c.markReplacementCreated(key, task); r != nil {
		c.recordReplacement(task, r, created)
		view.replaced = r
	}
	if err := c.updateStatus(ctx, task, c.computeStatus(task, view)); err != nil {
		return err
	}
	c.finishReplacement(key)
	return nil
}

// handleCreateConflict runs when the create said a pod of that name exists
// but the cache has none: either the cache lags behind a pod we made, or the
// pod lacks the gputask.io/task label and so is invisible to our informer.
// One live read tells which.
func (c *Controller) handleCreateConflict(ctx context.Context, key cache.ObjectName, task *gputaskv1.GPUTask) error {
	pod, err := c.kubeclientset.CoreV1().Pods(task.Namespace).Get(ctx, task.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading pod %s/%s after a create conflict: %w", task.Namespace, task.Name, err)
	}
	if isControlledBy(pod, task) {
		// Ours, and the informer will deliver it.
		c.workqueue.AddAfter(key, replacementPoll)
		return nil
	}
	// A pod outside our informer sends us no events, so look again later.
	c.workqueue.AddAfter(key, conflictRecheck)
	return c.syncConflict(ctx, task, pod)
}

// syncConflict reports a pod that has the task's name but is not controlled
// by this task. It is never adopted, changed or deleted: it may be someone
// else's work.
func (c *Controller) syncConflict(ctx context.Context, task *gputaskv1.GPUTask, pod *corev1.Pod) error {
	msg := fmt.Sprintf("pod %s exists and is not controlled by this GPUTask", klog.KObj(pod))
	c.warnOnTransition(task, gputaskv1.ConditionPodOwned, ReasonPodConflict, msg, ReasonPodConflict)
	_, specErr := podspec.Build(task, c.podOpts)
	return c.updateStatus(ctx, task, c.computeStatus(task, statusView{conflict: msg, specErr: specErr}))
}

// syncOwnedPod mirrors the pod and replaces it when it must be placed again.
func (c *Controller) syncOwnedPod(ctx context.Context, key cache.ObjectName, task *gputaskv1.GPUTask, pod *corev1.Pod) error {
	desired, specErr := podspec.Build(task, c.podOpts)
	view := statusView{pod: pod, specErr: specErr}
	if specErr != nil {
		c.warnOnTransition(task, gputaskv1.ConditionSpecValid, ReasonInvalidSpec, specErr.Error(), ReasonInvalidSpec)
	} else {
		// A spec change is shown, never applied to the running pod: the
		// pod is replaced only when gputask.io/restartedAt asks for it.
		view.stale = podspec.FirstDifference(desired, pod)
	}

	if r := c.replacementFor(key); r != nil {
		if !r.created && pod.UID == r.oldPodUID {
			// Our delete is under way: the pod terminates or the cache has
			// not caught up yet. Never create in the same sync.
			c.workqueue.AddAfter(key, replacementPoll)
			if err := c.forceDeleteIfUnreachable(ctx, task, pod, r.reason); err != nil {
				return err
			}
			return c.updateStatus(ctx, task, c.computeStatus(task, view))
		}
		// The replacement exists; what is left is to count it.
		if !r.created {
			r = c.markReplacementCreated(key, task)
		}
		view.replaced = r
		if err := c.updateStatus(ctx, task, c.computeStatus(task, view)); err != nil {
			return err
		}
		c.finishReplacement(key)
		return nil
	}

	if pod.DeletionTimestamp != nil {
		// Someone else deletes the pod; it is created again once it is gone.
		c.workqueue.AddAfter(key, replacementPoll)
		return c.updateStatus(ctx, task, c.computeStatus(task, view))
	}

	// A pod whose replacement cannot be built is kept, whatever its state.
	if specErr == nil {
		if reason, ok := c.replacementReason(ctx, key, task, pod); ok {
			return c.startReplacement(ctx, key, task, pod, reason, view)
		}
	}
	return c.updateStatus(ctx, task, c.computeStatus(task, view))
}

// replacementReason tells whether pod must be replaced now: first a restart
// the user asked for, then the rescheduling cases. It schedules the next look
// for the time-based cases that are not due yet.
func (c *Controller) replacementReason(ctx context.Context, key cache.ObjectName, task *gputaskv1.GPUTask, pod *corev1.Pod) (string, bool) {
	now := c.now()
	verdict, err := reschedule.Restart(task, pod, now)
	if err != nil {
		c.warnBadRestartedAt(ctx, key, task, err)
	} else {
		c.mu.Lock()
		delete(c.warnedRestartedAt, key)
		c.mu.Unlock()
	}
	if verdict.Replace {
		return reschedule.ReasonRestart, true
	}
	if verdict.Wait > 0 {
		c.workqueue.AddAfter(key, verdict.Wait+time.Second)
	}

	node := c.nodeOf(pod)
	if ok, reason := reschedule.Decide(task, pod, node, now, c.rescheduling); ok {
		klog.FromContext(ctx).V(4).Info("Pod must be placed again", "pod", klog.KObj(pod), "podUID", pod.UID,
			"phase", pod.Status.Phase, "node", pod.Spec.NodeName, "nodeKnown", node != nil, "reason", reason)
		return reason, true
	}
	if next := reschedule.NextCheck(task, pod, node, now, c.rescheduling); next > 0 {
		c.workqueue.AddAfter(key, next+time.Second)
	}
	return "", false
}

// withUntoleratedTaints adds to the scheduler's message, which only says
// that nodes "had untolerated taint(s)", which taints of the task's GPU nodes
// the pod does not tolerate, such as a GPU taint with --gpu-taint-toleration
// turned off.
func (c *Controller) withUntoleratedTaints(task *gputaskv1.GPUTask, pod *corev1.Pod, msg string) string {
	nodes, err := c.nodesLister.List(labels.Everything())
	if err != nil {
		return msg
	}
	taints := podspec.UntoleratedTaints(pod, nodes, c.opts.GPULabelKey, podspec.Models(&task.Spec), c.opts.GPUResourceName)
	if len(taints) == 0 {
		return msg
	}
	return fmt.Sprintf("%s Untolerated taints on the task's GPU nodes: %s.", msg, strings.Join(taints, ", "))
}

// gpuModelOf is the GPU model label of the pod's node, so that a task with
// gpuAlternatives shows which model it got.
func (c *Controller) gpuModelOf(pod *corev1.Pod) string {
	if node := c.nodeOf(pod); node != nil {
		return node.Labels[c.opts.GPULabelKey]
	}
	return ""
}

func (c *Controller) nodeOf(pod *corev1.Pod) *corev1.Node {
	if pod.Spec.NodeName == "" {
		return nil
	}
	node, err := c.nodesLister.Get(pod.Spec.NodeName)
	if err != nil {
		return nil
	}
	return node
}

// startReplacement deletes the pod and leaves the creation of the new one to
// a later sync, after the old one is gone: the name is reused, and a pod
// that still holds its GPUs must not be doubled.
func (c *Controller) startReplacement(ctx context.Context, key cache.ObjectName, task *gputaskv1.GPUTask, pod *corev1.Pod, reason string, view statusView) error {
	logger := klog.FromContext(ctx)
	if !c.reserveReplacement(key, pod.UID, reason) {
		logger.V(2).Info("Too many pods being replaced; waiting", "pod", klog.KObj(pod), "reason", reason, "limit", c.opts.MaxConcurrentReschedules)
		c.workqueue.AddAfter(key, replacementPoll)
		return c.updateStatus(ctx, task, c.computeStatus(task, view))
	}

	uid := pod.UID
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
	if reason == reschedule.ReasonNodeLost {
		// The node object is gone, so no kubelet will ever confirm the
		// pod's end and it would stay terminating until the pod garbage
		// collector notices. Removing it at once is what that collector
		// does too.
		opts.GracePeriodSeconds = ptr.To[int64](0)
	}
	err := c.kubeclientset.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, opts)
	switch {
	case err == nil, apierrors.IsNotFound(err):
	case apierrors.IsConflict(err):
		// The pod of that name is not the one we judged; judge again.
		c.dropReplacement(key)
		c.workqueue.AddAfter(key, replacementPoll)
		return nil
	default:
		c.dropReplacement(key)
		c.recorder.Eventf(task, corev1.EventTypeWarning, ReasonFailedDelete, "Error deleting pod %s to replace it (%s): %v", pod.Name, reason, err)
		return fmt.Errorf("deleting pod %s to replace it: %w", klog.KObj(pod), err)
	}
	logger.Info("Deleted pod to replace it", "pod", klog.KObj(pod), "reason", reason)
	c.recorder.Eventf(task, corev1.EventTypeNormal, ReasonRescheduling, "Deleted pod %s to replace it: %s", pod.Name, reason)
	c.workqueue.AddAfter(key, replacementPoll)
	return c.updateStatus(ctx, task, c.computeStatus(task, view))
}

// forceDeleteIfUnreachable removes a pod that was deleted because its node
// was lost or NotReady and that outlived its grace period there: no kubelet
// will confirm its end, and the task would otherwise wait for the node.
func (c *Controller) forceDeleteIfUnreachable(ctx context.Context, task *gputaskv1.GPUTask, pod *corev1.Pod, reason string) error {
	if !reschedule.ForceDelete(pod, c.nodeOf(pod), reason, c.now()) {
		return nil
	}
	uid := pod.UID
	err := c.kubeclientset.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		Preconditions:      &metav1.Preconditions{UID: &uid},
		GracePeriodSeconds: ptr.To[int64](0),
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("force deleting pod %s on unreachable node %s: %w", klog.KObj(pod), pod.Spec.NodeName, err)
	}
	klog.FromContext(ctx).Info("Force deleted pod on unreachable node", "pod", klog.KObj(pod), "node", pod.Spec.NodeName)
	c.recorder.Eventf(task, corev1.EventTypeWarning, ReasonForceDeleted,
		"Pod %s on unreachable node %s outlived its grace period; deleted it without waiting for the kubelet", pod.Name, pod.Spec.NodeName)
	return nil
}

func (c *Controller) recordReplacement(task *gputaskv1.GPUTask, r *replacement, pod *corev1.Pod) {
	metrics.Reschedules.WithLabelValues(r.reason).Inc()
	if r.reason == reschedule.ReasonRestart {
		c.recorder.Eventf(task, corev1.EventTypeNormal, ReasonRestarted, "Restarted: replaced the pod with %s", pod.Name)
		return
	}
	c.recorder.Eventf(task, corev1.EventTypeNormal, ReasonRescheduled, "Rescheduled (%s): replaced the pod with %s", r.reason, pod.Name)
}

// reserveReplacement records a replacement of pod for key, unless
// MaxConcurrentReschedules tasks are already waiting for their new pod.
func (c *Controller) reserveReplacement(key cache.ObjectName, podUID types.UID, reason string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	inFlight := 0
	for _, r := range c.replacements {
		if !r.created {
			inFlight++
		}
	}
	if inFlight >= c.opts.MaxConcurrentReschedules {
		return false
	}
	c.replacements[key] = &replacement{oldPodUID: podUID, reason: reason}
	return true
}

func (c *Controller) replacementFor(key cache.ObjectName) *replacement {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.replacements[key]; ok {
		cp := *r
		return &cp
	}
	return nil
}

// markReplacementCreated flags the replacement of key as created and returns
// it, or nil when the pod was not being replaced.
func (c *Controller) markReplacementCreated(key cache.ObjectName, task *gputaskv1.GPUTask) *replacement {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.replacements[key]
	if !ok {
		return nil
	}
	if !r.created {
		r.created = true
		r.countedFrom = task.Status.Reschedules
		r.at = metav1.NewTime(c.now())
	}
	cp := *r
	return &cp
}

// finishReplacement forgets the replacement of key once the status counts it.
func (c *Controller) finishReplacement(key cache.ObjectName) {
	c.dropReplacement(key)
}

func (c *Controller) dropReplacement(key cache.ObjectName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.replacements, key)
}

func (c *Controller) warnBadRestartedAt(ctx context.Context, key cache.ObjectName, task *gputaskv1.GPUTask, err error) {
	value := task.Annotations[gputaskv1.AnnotationRestartedAt]
	c.mu.Lock()
	seen := c.warnedRestartedAt[key] == value
	c.warnedRestartedAt[key] = value
	c.mu.Unlock()
	if seen {
		return
	}
	klog.FromContext(ctx).Info("Ignoring restart request", "err", err)
	c.recorder.Eventf(task, corev1.EventTypeWarning, ReasonInvalidRestartedAt, "Ignoring the restart request: %v", err)
}

// warnOnTransition records a Warning event when the condition is not already
// False with this reason and message, so that a standing problem costs one
// event rather than one per sync.
func (c *Controller) warnOnTransition(task *gputaskv1.GPUTask, condType, condReason, msg, eventReason string) {
	if cond := meta.FindStatusCondition(task.Status.Conditions, condType); cond != nil &&
		cond.Status == metav1.ConditionFalse && cond.Reason == condReason && cond.Message == msg {
		return
	}
	c.recorder.Event(task, corev1.EventTypeWarning, eventReason, msg)
}

// updateStatus writes status through the status subresource when it differs
// from what the task has.
func (c *Controller) updateStatus(ctx context.Context, task *gputaskv1.GPUTask, status gputaskv1.GPUTaskStatus) error {
	if equality.Semantic.DeepEqual(task.Status, status) {
		return nil
	}
	updated := task.DeepCopy()
	updated.Status = status
	if _, err := c.gputaskclientset.GputaskV1().GPUTasks(task.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating status of gputask %s: %w", klog.KObj(task), err)
	}
	return nil
}

// deletePodOfDeletedTask deletes the pod of a task that is gone, if that pod
// is controlled by the very task that was deleted. Garbage collection would
// delete it too; doing it here frees the GPUs without waiting for it.
func (c *Controller) deletePodOfDeletedTask(ctx context.Context, key cache.ObjectName) error {
	c.expectations.Delete(key.String())
	c.dropReplacement(key)
	c.mu.Lock()
	uid, ok := c.deletedTasks[key]
	delete(c.warnedRestartedAt, key)
	c.mu.Unlock()
	if !ok {
		return nil
	}
	pod, err := c.podsLister.Pods(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		c.forgetDeletedTask(key)
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting pod %s from the cache: %w", key, err)
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.UID != uid || !isGPUTaskRef(ref) || pod.DeletionTimestamp != nil {
		c.forgetDeletedTask(key)
		return nil
	}
	podUID := pod.UID
	err = c.kubeclientset.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &podUID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting pod %s of deleted gputask: %w", klog.KObj(pod), err)
	}
	klog.FromContext(ctx).V(2).Info("Deleted pod of deleted task", "pod", klog.KObj(pod))
	c.forgetDeletedTask(key)
	return nil
}

func (c *Controller) forgetDeletedTask(key cache.ObjectName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.deletedTasks, key)
}

// enqueueTask puts a task's key on the queue.
func (c *Controller) enqueueTask(obj interface{}) {
	key, err := cache.ObjectToName(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.workqueue.Add(key)
}

// handleTaskDelete remembers the deleted task's UID, taken from the last
// state the informer knew (a tombstone if the delete was missed), so the
// sync deletes only the pod that this task controlled.
func (c *Controller) handleTaskDelete(obj interface{}) {
	task, ok := tombstone.Unwrap[*gputaskv1.GPUTask](obj)
	if !ok {
		return
	}
	key := cache.MetaObjectToName(task)
	c.mu.Lock()
	if c.orphaning[key] != task.UID {
		c.deletedTasks[key] = task.UID
	}
	delete(c.orphaning, key)
	c.mu.Unlock()
	c.workqueue.Add(key)
}

// handleTaskUpdate enqueues the task, and notes a task deleted with
// propagationPolicy=Orphan: its final state no longer shows the orphan
// finalizer, and its pod must then be left running.
func (c *Controller) handleTaskUpdate(_, newObj interface{}) {
	if task, ok := newObj.(*gputaskv1.GPUTask); ok && task.DeletionTimestamp != nil &&
		slices.Contains(task.Finalizers, metav1.FinalizerOrphanDependents) {
		c.mu.Lock()
		c.orphaning[cache.MetaObjectToName(task)] = task.UID
		c.mu.Unlock()
	}
	c.enqueueTask(newObj)
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

// handlePodAdd counts the expected creation down before the task is synced,
// so the sync sees the expectation met.
func (c *Controller) handlePodAdd(obj interface{}) {
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

func (c *Controller) handlePodUpdate(oldObj, newObj interface{}) {
	oldPod, ok1 := oldObj.(*corev1.Pod)
	newPod, ok2 := newObj.(*corev1.Pod)
	if ok1 && ok2 && oldPod.ResourceVersion == newPod.ResourceVersion {
		// A periodic resync: nothing changed, and the time-based cases have
		// their own timers.
		return
	}
	c.handleObject(newObj)
}

// handleObject enqueues the task a pod event concerns. A tombstone from a
// missed delete is unwrapped, since a pod that is gone is exactly what makes
// its task create a new one.
func (c *Controller) handleObject(obj interface{}) {
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
// concerns the task of the same name, which it blocks (PodConflict).
func (c *Controller) taskOfPod(pod *corev1.Pod) (key *cache.ObjectName, owned bool) {
	if ref := metav1.GetControllerOf(pod); ref != nil && isGPUTaskRef(ref) {
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
	return nil, false
}

// isControlledBy checks the controller reference's kind and group as well as
// its UID: metav1.IsControlledBy checks the UID alone.
func isControlledBy(pod *corev1.Pod, task *gputaskv1.GPUTask) bool {
	ref := metav1.GetControllerOf(pod)
	return ref != nil && ref.UID == task.UID && isGPUTaskRef(ref)
}

func isGPUTaskRef(ref *metav1.OwnerReference) bool {
	return ref.Kind == podspec.GPUTaskKind.Kind && refGroup(ref) == gputaskv1.SchemeGroupVersion.Group
}

func refGroup(ref *metav1.OwnerReference) string {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return ""
	}
	return gv.Group
}

// handleNodeUpdate enqueues the tasks on a node whose readiness changed.
// Nodes update their status every few seconds; only a readiness change can
// change a decision.
func (c *Controller) handleNodeUpdate(oldObj, newObj interface{}) {
	oldNode, ok1 := oldObj.(*corev1.Node)
	newNode, ok2 := newObj.(*corev1.Node)
	if !ok1 || !ok2 || nodeReadyStatus(oldNode) == nodeReadyStatus(newNode) {
		return
	}
	c.enqueueTasksOnNode(newNode.Name)
}

func (c *Controller) handleNodeDelete(obj interface{}) {
	node, ok := tombstone.Unwrap[*corev1.Node](obj)
	if !ok {
		return
	}
	c.enqueueTasksOnNode(node.Name)
}

func (c *Controller) enqueueTasksOnNode(nodeName string) {
	// The pod cache holds only task pods, so a scan is cheap.
	pods, err := c.podsLister.List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("listing pods from the cache: %w", err))
		return
	}
	for _, pod := range pods {
		if pod.Spec.NodeName != nodeName {
			continue
		}
		if key, owned := c.taskOfPod(pod); key != nil && owned {
			c.workqueue.Add(*key)
		}
	}
}

func nodeReadyStatus(node *corev1.Node) corev1.ConditionStatus {
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status
		}
	}
	return ""
}

// statusView is what the status is computed from.
type statusView struct {
	// pod is the task's pod, nil if there is none or it is not the task's.
	pod *corev1.Pod
	// conflict, when set, is why the pod of the task's name is not the task's.
	conflict string
	specErr  error
	// stale is the first field where the pod differs from the pod the spec
	// asks for now; empty when it is up to date.
	stale string
	// replaced, when set, is a completed replacement to count.
	replaced *replacement
}

// Condition reasons the controller sets itself; mirrored conditions keep the
// pod's reasons.
const (
	condReasonValid          = "Valid"
	condReasonPodControlled  = "PodControlled"
	condReasonPodNotCreated  = "PodNotCreated"
	condReasonPodScheduled   = "PodScheduled"
	condReasonPodUnscheduled = "PodNotScheduled"
	condReasonPodReady       = "PodReady"
	condReasonPodNotReady    = "PodNotReady"
	condReasonPodMatchesSpec = "PodMatchesSpec"
	condReasonSpecChanged    = "SpecChanged"
)

// computeStatus returns the task's status for view. It starts from the
// current status so that an unchanged status compares equal and costs no
// write; meta.SetStatusCondition keeps lastTransitionTime unless the status
// of a condition flips.
func (c *Controller) computeStatus(task *gputaskv1.GPUTask, view statusView) gputaskv1.GPUTaskStatus {
	now := metav1.NewTime(c.now())
	status := *task.Status.DeepCopy()
	status.ObservedGeneration = task.Generation
	status.Phase = taskPhase(view.pod)
	prevNode, prevModel := status.NodeName, status.GPUModel
	status.PodName, status.NodeName, status.GPUModel = "", "", ""
	if view.pod != nil {
		status.PodName = view.pod.Name
		status.NodeName = view.pod.Spec.NodeName
		status.GPUModel = c.gpuModelOf(view.pod)
		if status.GPUModel == "" && status.NodeName == prevNode {
			// The node left the cache; the pod still runs where it ran.
			status.GPUModel = prevModel
		}
	}
	if r := view.replaced; r != nil {
		status.Reschedules = max(status.Reschedules, r.countedFrom+1)
		at := r.at
		status.LastRescheduleTime = &at
	}
	acknowledgeRestart(task, view.pod, &status)

	set := func(condType string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{
			Type: condType, Status: s, Reason: reason, Message: msg,
			ObservedGeneration: task.Generation, LastTransitionTime: now,
		})
	}
	if view.specErr != nil {
		set(gputaskv1.ConditionSpecValid, metav1.ConditionFalse, ReasonInvalidSpec, view.specErr.Error())
	} else {
		set(gputaskv1.ConditionSpecValid, metav1.ConditionTrue, condReasonValid, "")
	}

	switch {
	case view.conflict != "":
		set(gputaskv1.ConditionPodOwned, metav1.ConditionFalse, ReasonPodConflict, view.conflict)
		set(gputaskv1.ConditionScheduled, metav1.ConditionFalse, ReasonPodConflict, view.conflict)
		set(gputaskv1.ConditionReady, metav1.ConditionFalse, ReasonPodConflict, view.conflict)
		meta.RemoveStatusCondition(&status.Conditions, gputaskv1.ConditionPodUpToDate)
	case view.pod == nil:
		set(gputaskv1.ConditionPodOwned, metav1.ConditionUnknown, condReasonPodNotCreated, "")
		set(gputaskv1.ConditionScheduled, metav1.ConditionFalse, condReasonPodNotCreated, "")
		set(gputaskv1.ConditionReady, metav1.ConditionFalse, condReasonPodNotCreated, "")
		meta.RemoveStatusCondition(&status.Conditions, gputaskv1.ConditionPodUpToDate)
	default:
		set(gputaskv1.ConditionPodOwned, metav1.ConditionTrue, condReasonPodControlled, "")
		s, reason, msg := mirrorPodCondition(view.pod, corev1.PodScheduled, condReasonPodScheduled, condReasonPodUnscheduled)
		if s != metav1.ConditionTrue && view.pod.Spec.NodeName != "" {
			// A pod bound without the scheduler has no PodScheduled condition.
			s, reason, msg = metav1.ConditionTrue, condReasonPodScheduled, ""
		}
		if s == metav1.ConditionFalse && strings.Contains(msg, "untolerated taint") {
			msg = c.withUntoleratedTaints(task, view.pod, msg)
		}
		set(gputaskv1.ConditionScheduled, s, reason, msg)
		s, reason, msg = mirrorPodCondition(view.pod, corev1.PodReady, condReasonPodReady, condReasonPodNotReady)
		set(gputaskv1.ConditionReady, s, reason, msg)
		switch {
		case view.specErr != nil:
			set(gputaskv1.ConditionPodUpToDate, metav1.ConditionUnknown, ReasonInvalidSpec, "the spec cannot be turned into a pod")
		case view.stale != "":
			set(gputaskv1.ConditionPodUpToDate, metav1.ConditionFalse, condReasonSpecChanged, fmt.Sprintf(
				"the running pod differs from the spec at %s; set the annotation %s to replace it", view.stale, gputaskv1.AnnotationRestartedAt))
		default:
			set(gputaskv1.ConditionPodUpToDate, metav1.ConditionTrue, condReasonPodMatchesSpec, "")
		}
	}
	return status
}

// acknowledgeRestart marks a restart request as done when the pod is already
// at least as new as the request (created after it, or the task was created
// with the annotation): the set controller waits for lastRescheduleTime to
// reach the request, and there is no pod to replace.
func acknowledgeRestart(task *gputaskv1.GPUTask, pod *corev1.Pod, status *gputaskv1.GPUTaskStatus) {
	at, ok, err := reschedule.RestartedAt(task)
	if err != nil || !ok || pod == nil || pod.CreationTimestamp.IsZero() || pod.CreationTimestamp.Time.Before(at) {
		return
	}
	if last := status.LastRescheduleTime; last != nil && !last.Time.Before(at) {
		return
	}
	created := pod.CreationTimestamp
	status.LastRescheduleTime = &created
}

// taskPhase derives the task's phase from its pod.
func taskPhase(pod *corev1.Pod) gputaskv1.GPUTaskPhase {
	if pod == nil {
		return gputaskv1.GPUTaskPending
	}
	switch pod.Status.Phase {
	case corev1.PodRunning:
		return gputaskv1.GPUTaskRunning
	case corev1.PodSucceeded:
		return gputaskv1.GPUTaskSucceeded
	case corev1.PodFailed:
		return gputaskv1.GPUTaskFailed
	}
	if pod.Spec.NodeName != "" {
		return gputaskv1.GPUTaskScheduled
	}
	return gputaskv1.GPUTaskPending
}

// conditionReason is the pattern metav1.Condition's reason must match; a pod
// condition's reason is free text and is only copied when it fits.
var conditionReason = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// maxConditionMessage is metav1.Condition's message limit.
const maxConditionMessage = 32768

// mirrorPodCondition returns the pod condition of type t as a task condition:
// its status, its reason (or a default when empty or not CamelCase) and its
// message, such as the scheduler's "0/2 nodes are available: ...".
func mirrorPodCondition(pod *corev1.Pod, t corev1.PodConditionType, trueReason, falseReason string) (metav1.ConditionStatus, string, string) {
	for _, cond := range pod.Status.Conditions {
		if cond.Type != t {
			continue
		}
		s := metav1.ConditionStatus(cond.Status)
		reason := cond.Reason
		if !conditionReason.MatchString(reason) || len(reason) > 1024 {
			reason = falseReason
			if s == metav1.ConditionTrue {
				reason = trueReason
			}
		}
		msg := cond.Message
		if len(msg) > maxConditionMessage {
			msg = msg[:maxConditionMessage]
		}
		return s, reason, msg
	}
	return metav1.ConditionFalse, falseReason, ""
}
