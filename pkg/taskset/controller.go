// Package taskset is the GPUTaskSet controller: it keeps exactly the desired
// number of GPUTasks for each set, removes the cheapest ones first on
// scale-in (victims.go), honours the stop annotation and minTaskAge, and rolls
// a restart through the set's tasks one at a time (restart.go).
//
// It follows the shape of k8s.io/sample-controller (Run → runWorker →
// processNextWorkItem → syncHandler) and the safety habits of the ReplicaSet
// controller: expectations, slow-start batches and status writes only when
// something changed. The autoscaler writes spec.replicas; this controller only
// makes the world match it.
package taskset

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	"github.com/gputask/gputask-controller/pkg/tombstone"
)

const (
	// ControllerName labels this controller's metrics and logs.
	ControllerName = "gputaskset"
	// ComponentName is the source of the Events this controller records.
	ComponentName = "gputaskset-controller"
	// queueName names the workqueue, and so its Prometheus metrics.
	queueName = "gputasksets"

	// DefaultBurstReplicas caps the tasks created or deleted in one sync, as
	// the ReplicaSet controller's burstReplicas does, so that one huge scale
	// step cannot flood the API server; the next sync does the rest.
	DefaultBurstReplicas = 500
)

// Event reasons.
const (
	ReasonSuccessfulCreate = "SuccessfulCreate"
	ReasonFailedCreate     = "FailedCreate"
	ReasonSuccessfulDelete = "SuccessfulDelete"
	ReasonFailedDelete     = "FailedDelete"
	ReasonRestartingTask   = "RestartingTask"
	ReasonFailedRestart    = "FailedRestart"
	ReasonInvalidRestartAt = "InvalidRestartedAt"
)

// setKind is the kind written into the tasks' controller references.
var setKind = gputaskv1.SchemeGroupVersion.WithKind("GPUTaskSet")

// Options tunes the controller. The zero value is what production wants.
type Options struct {
	// Recorder records Events. Nil builds one that writes through kubeClient
	// and stops when the context given to NewController ends.
	Recorder record.EventRecorder
	// Clock tells the time for minTaskAge, restarts and expectations. Nil
	// means the real clock; tests pass a fake one.
	Clock clock.Clock
	// BurstReplicas caps creations or deletions per sync. Zero means
	// DefaultBurstReplicas.
	BurstReplicas int
	// ExpectationsTimeout is how long to wait for the cache to show this
	// controller's writes. Zero means expectations.DefaultTTL.
	ExpectationsTimeout time.Duration
	// PodInformer, when set, lets scale-in see gputask.io/busy on the tasks'
	// pods and wakes a set when one of its pods turns idle. It should list
	// the pods labelled gputask.io/task. Nil reads busy from tasks only.
	PodInformer coreinformers.PodInformer
}

// Controller keeps each GPUTaskSet's tasks at the desired count.
type Controller struct {
	kubeClient kubernetes.Interface
	client     versioned.Interface

	setLister   listers.GPUTaskSetLister
	taskLister  listers.GPUTaskLister
	podLister   corelisters.PodLister
	cacheSynced []cache.InformerSynced

	queue        workqueue.TypedRateLimitingInterface[cache.ObjectName]
	recorder     record.EventRecorder
	clock        clock.Clock
	expectations *expectations.Expectations
	burst        int
}

// NewController wires the controller to the informers. It makes no API call
// and starts nothing but the Event broadcaster; Run starts the work.
func NewController(ctx context.Context, kubeClient kubernetes.Interface, client versioned.Interface,
	setInformer informers.GPUTaskSetInformer, taskInformer informers.GPUTaskInformer, opts Options) *Controller {
	logger := klog.FromContext(ctx)
	opts = withDefaults(opts)

	c := &Controller{
		kubeClient: kubeClient,
		client:     client,
		setLister:  setInformer.Lister(),
		taskLister: taskInformer.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: queueName},
		),
		recorder:     opts.Recorder,
		clock:        opts.Clock,
		expectations: expectations.New(opts.Clock, opts.ExpectationsTimeout),
		burst:        opts.BurstReplicas,
	}
	if c.recorder == nil {
		c.recorder = newRecorder(ctx, kubeClient)
	}

	setReg, err := setInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.addSet(logger, obj) },
		UpdateFunc: func(old, cur any) { c.updateSet(logger, old, cur) },
		DeleteFunc: func(obj any) { c.deleteSet(logger, obj) },
	})
	c.trackSynced(logger, setInformer.Informer(), setReg, err)
	taskReg, err := taskInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.addTask(logger, obj) },
		UpdateFunc: func(old, cur any) { c.updateTask(logger, old, cur) },
		DeleteFunc: func(obj any) { c.deleteTask(logger, obj) },
	})
	c.trackSynced(logger, taskInformer.Informer(), taskReg, err)
	if opts.PodInformer != nil {
		c.podLister = opts.PodInformer.Lister()
		podReg, err := opts.PodInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			UpdateFunc: c.updatePod,
		})
		c.trackSynced(logger, opts.PodInformer.Informer(), podReg, err)
	}
	return c
}

func withDefaults(opts Options) Options {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.BurstReplicas <= 0 {
		opts.BurstReplicas = DefaultBurstReplicas
	}
	if opts.ExpectationsTimeout <= 0 {
		opts.ExpectationsTimeout = expectations.DefaultTTL
	}
	return opts
}

// newRecorder builds an Event recorder whose broadcaster stops with ctx.
func newRecorder(ctx context.Context, kubeClient kubernetes.Interface) record.EventRecorder {
	// Events about GPUTaskSets need our types in the scheme the recorder
	// uses to build object references. Adding them twice is harmless.
	if err := gputaskscheme.AddToScheme(scheme.Scheme); err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Adding gputask.io types to the Event scheme")
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartStructuredLogging(0)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kubeClient.CoreV1().Events("")})
	return broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: ComponentName})
}

// trackSynced remembers what Run must wait for before the first sync. The
// handler registration is preferred over the informer because it is synced
// only once our handlers have seen the initial list, so expectations and the
// queue start from the full picture.
func (c *Controller) trackSynced(logger klog.Logger, inf cache.SharedIndexInformer, reg cache.ResourceEventHandlerRegistration, err error) {
	if err != nil || reg == nil {
		logger.Error(err, "Adding event handler; falling back to the informer's sync state")
		c.cacheSynced = append(c.cacheSynced, inf.HasSynced)
		return
	}
	c.cacheSynced = append(c.cacheSynced, reg.HasSynced)
}

// Run waits for the caches, then runs workers (at least one) until ctx ends.
// It returns after every worker has stopped.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx)
	workers = max(workers, 1)
	logger.Info("Starting GPUTaskSet controller", "workers", workers)

	var wg sync.WaitGroup
	defer func() {
		// Shutting the queue down is what ends the workers' loops.
		c.queue.ShutDown()
		wg.Wait()
		logger.Info("Stopped GPUTaskSet controller")
	}()

	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.cacheSynced...) {
		return fmt.Errorf("waiting for the GPUTaskSet and GPUTask caches to sync: %w", context.Cause(ctx))
	}
	for range workers {
		wg.Go(func() { wait.UntilWithContext(ctx, c.runWorker, time.Second) })
	}
	<-ctx.Done()
	return nil
}

// runWorker processes keys until the queue shuts down.
func (c *Controller) runWorker(ctx context.Context) {
	for c.processNextWorkItem(ctx) {
	}
}

// processNextWorkItem syncs one key. A failed key is retried with backoff; a
// successful one has its backoff forgotten.
func (c *Controller) processNextWorkItem(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)

	if err := c.syncHandler(ctx, key); err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Syncing GPUTaskSet; requeuing", "gputaskset", key)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// enqueue adds the set's key to the queue.
func (c *Controller) enqueue(set *gputaskv1.GPUTaskSet) {
	c.queue.Add(cache.MetaObjectToName(set))
}

func (c *Controller) addSet(logger klog.Logger, obj any) {
	set, ok := obj.(*gputaskv1.GPUTaskSet)
	if !ok {
		return
	}
	logger.V(4).Info("GPUTaskSet added", "gputaskset", klog.KObj(set))
	c.enqueue(set)
}

// updateSet enqueues on every update, resyncs included: a periodic resync is
// what retries a set whose last creates failed without an error left in the
// queue, and syncs are cheap because they read only the caches.
func (c *Controller) updateSet(logger klog.Logger, old, cur any) {
	oldSet, ok1 := old.(*gputaskv1.GPUTaskSet)
	curSet, ok2 := cur.(*gputaskv1.GPUTaskSet)
	if !ok1 || !ok2 {
		return
	}
	if oldSet.UID != curSet.UID {
		// The set was deleted and re-created between two watch events: the
		// old one's expectations must not hold up the new one.
		c.deleteSet(logger, cache.DeletedFinalStateUnknown{Key: cache.MetaObjectToName(oldSet).String(), Obj: oldSet})
	}
	c.enqueue(curSet)
}

func (c *Controller) deleteSet(logger klog.Logger, obj any) {
	set, ok := tombstone.Unwrap[*gputaskv1.GPUTaskSet](obj)
	if !ok {
		return
	}
	logger.V(4).Info("GPUTaskSet deleted", "gputaskset", klog.KObj(set))
	c.expectations.Delete(cache.MetaObjectToName(set).String())
	c.enqueue(set)
}

// addTask counts a creation this controller expected, and wakes the owner.
func (c *Controller) addTask(logger klog.Logger, obj any) {
	task, ok := obj.(*gputaskv1.GPUTask)
	if !ok {
		return
	}
	if task.DeletionTimestamp != nil {
		// After a controller restart a task can first appear already being
		// deleted; it must count as a deletion, not a creation.
		c.deleteTask(logger, task)
		return
	}
	set := c.resolveControllerRef(task.Namespace, metav1.GetControllerOf(task))
	if set == nil {
		// Orphans are not adopted, and tasks of other controllers are none of our business.
		return
	}
	key := cache.MetaObjectToName(set).String()
	logger.V(4).Info("GPUTask added", "gputask", klog.KObj(task), "gputaskset", klog.KObj(set))
	c.expectations.CreationObserved(key)
	c.enqueue(set)
}

// updateTask wakes the owner of a task whose status, annotations or owner
// changed, and records observed deletions and restart annotations.
func (c *Controller) updateTask(logger klog.Logger, old, cur any) {
	oldTask, ok1 := old.(*gputaskv1.GPUTask)
	curTask, ok2 := cur.(*gputaskv1.GPUTask)
	if !ok1 || !ok2 || oldTask.ResourceVersion == curTask.ResourceVersion {
		// A resync of an unchanged task: the sets' own resync covers it.
		return
	}
	if curTask.DeletionTimestamp != nil {
		// A task with finalizers stays visible while it is deleted; seeing
		// the deletion timestamp is enough to count the deletion.
		c.deleteTask(logger, curTask)
		return
	}
	oldRef, curRef := metav1.GetControllerOf(oldTask), metav1.GetControllerOf(curTask)
	if oldRef != nil && (curRef == nil || oldRef.UID != curRef.UID) {
		if oldSet := c.resolveControllerRef(oldTask.Namespace, oldRef); oldSet != nil {
			c.enqueue(oldSet)
		}
	}
	set := c.resolveControllerRef(curTask.Namespace, curRef)
	if set == nil {
		return
	}
	key := cache.MetaObjectToName(set).String()
	c.expectations.AnnotationObserved(key, curTask.Name, curTask.Annotations[gputaskv1.AnnotationRestartedAt])
	c.enqueue(set)
}

// deleteTask counts a deletion and wakes the owner. obj may be a tombstone.
func (c *Controller) deleteTask(logger klog.Logger, obj any) {
	// A tombstone's object may be stale, but its owner reference does not
	// change over a task's life, which is all we read from it.
	task, ok := tombstone.Unwrap[*gputaskv1.GPUTask](obj)
	if !ok {
		return
	}
	set := c.resolveControllerRef(task.Namespace, metav1.GetControllerOf(task))
	if set == nil {
		return
	}
	logger.V(4).Info("GPUTask deleted", "gputask", klog.KObj(task), "gputaskset", klog.KObj(set))
	c.expectations.DeletionObserved(cache.MetaObjectToName(set).String(), task.Name)
	c.enqueue(set)
}

// resolveControllerRef returns the set a controller reference points to, or
// nil. Kind and name are not enough: a set deleted and re-created with the
// same name must not inherit the old one's tasks, so the UID must match too.
func (c *Controller) resolveControllerRef(namespace string, ref *metav1.OwnerReference) *gputaskv1.GPUTaskSet {
	if ref == nil || ref.Kind != setKind.Kind || !sameGroup(ref.APIVersion) {
		return nil
	}
	set, err := c.setLister.GPUTaskSets(namespace).Get(ref.Name)
	if err != nil || set.UID != ref.UID {
		return nil
	}
	return set
}

// sameGroup reports whether apiVersion is in the gputask.io group, at any
// version, so a reference written by a later API version still resolves.
func sameGroup(apiVersion string) bool {
	gv, err := schema.ParseGroupVersion(apiVersion)
	return err == nil && gv.Group == setKind.Group
}
