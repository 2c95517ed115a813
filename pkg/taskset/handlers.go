package taskset

import (
	"maps"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/tombstone"
)

// enqueue adds the set's key to the queue.
func (c *Controller) enqueue(set *gputaskv1.GPUTaskSet) {
	c.workqueue.Add(cache.MetaObjectToName(set))
}

func (c *Controller) addSet(logger klog.Logger, obj any) {
	set, ok := obj.(*gputaskv1.GPUTaskSet)
	if !ok {
		return
	}
	logger.V(4).Info("GPUTaskSet added", "gputaskset", klog.KObj(set))
	c.enqueue(set)
}

// updateSet enqueues on every update, resyncs included (when
// --informer-resync turns them on): syncs read only the caches, so they are
// cheap. Failed creates and deletes are retried by the queue's backoff, not
// by a resync, which is off by default.
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
// changed, and records observed deletions and the annotations this
// controller patched (restart, draining).
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
	c.expectations.AnnotationObserved(key, curTask.Name, curTask.Annotations)
	if statusOnly(oldTask, curTask) {
		// A task's progress only changes the set's counts, which are
		// written at most once per statusInterval: one sync per interval
		// sees them all, however many tasks moved.
		c.workqueue.AddAfter(cache.MetaObjectToName(set), statusInterval)
		return
	}
	c.enqueue(set)
}

// statusOnly reports whether an update changed nothing of the task but its
// status: no spec (generation), label, annotation or owner.
func statusOnly(old, cur *gputaskv1.GPUTask) bool {
	return old.Generation == cur.Generation &&
		maps.Equal(old.Labels, cur.Labels) && maps.Equal(old.Annotations, cur.Annotations) &&
		equality.Semantic.DeepEqual(old.OwnerReferences, cur.OwnerReferences)
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
	if !gputaskv1.IsRefTo(ref, setKind.Kind) {
		return nil
	}
	set, err := c.setsLister.GPUTaskSets(namespace).Get(ref.Name)
	if err != nil || set.UID != ref.UID {
		return nil
	}
	return set
}
