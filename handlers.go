package main

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/podspec"
	"github.com/gputask/gputask-controller/pkg/tombstone"
)

// enqueueTask puts a task's key on the queue.
func (c *Controller) enqueueTask(obj any) {
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
func (c *Controller) handleTaskDelete(obj any) {
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
func (c *Controller) handleTaskUpdate(_, newObj any) {
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
func (c *Controller) handlePodAdd(obj any) {
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

func (c *Controller) handlePodUpdate(oldObj, newObj any) {
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
func (c *Controller) handleObject(obj any) {
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
// sync deletes it if that task is gone (orphans.go).
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
	if ref := metav1.GetControllerOf(pod); ref != nil && isGPUTaskRef(ref) {
		// Controlled by a task the cache does not have: the sync of the
		// pod's name finds out whether it is an orphan to delete.
		k := cache.MetaObjectToName(pod)
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
	return gputaskv1.IsRefTo(ref, podspec.GPUTaskKind.Kind)
}

// handleNodeUpdate enqueues the tasks on a node whose readiness changed.
// Nodes update their status every few seconds; only a readiness change can
// change a decision.
func (c *Controller) handleNodeUpdate(oldObj, newObj any) {
	oldNode, ok1 := oldObj.(*corev1.Node)
	newNode, ok2 := newObj.(*corev1.Node)
	if !ok1 || !ok2 || nodeReadyStatus(oldNode) == nodeReadyStatus(newNode) {
		return
	}
	c.enqueueTasksOnNode(newNode.Name)
}

func (c *Controller) handleNodeDelete(obj any) {
	node, ok := tombstone.Unwrap[*corev1.Node](obj)
	if !ok {
		return
	}
	c.enqueueTasksOnNode(node.Name)
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

func (c *Controller) enqueueTasksOnNode(nodeName string) {
	objs, err := c.podsIndexer.ByIndex(podsByNode, nodeName)
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("reading the pods of node %s from the cache: %w", nodeName, err))
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

func nodeReadyStatus(node *corev1.Node) corev1.ConditionStatus {
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status
		}
	}
	return ""
}
