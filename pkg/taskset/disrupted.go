package taskset

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/setplan"
	"github.com/gputask/gputask-controller/pkg/tombstone"
)

// This file holds what the set controller does when a node autoscaler
// takes a node away under its tasks (pkg/setplan's disrupted.go says what
// the plan does): it reads the nodes of its tasks from the node cache, wakes
// the sets of a node whose disruption starts or ends, and carries the plan's
// Disruption out.

// tasksByNode names the index of the task cache by status.nodeName, so that
// a node's change wakes the sets of the tasks on it without a scan of every
// task.
const tasksByNode = "gputask.io/node-name"

// maxEventMessage caps an event's message, as the events API caps a note.
const maxEventMessage = 1024

// taskNodeName is the index function: the node the task's pod is bound to,
// none before it is placed.
func taskNodeName(obj any) ([]string, error) {
	task, ok := obj.(*gputaskv1.GPUTask)
	if !ok || task.Status.NodeName == "" {
		return nil, nil
	}
	return []string{task.Status.NodeName}, nil
}

// addTasksByNode adds the index to the task informer, once however many
// controllers are built on it. It must be called before the informer starts.
func addTasksByNode(informer cache.SharedIndexInformer) error {
	if _, ok := informer.GetIndexer().GetIndexers()[tasksByNode]; ok {
		return nil
	}
	if err := informer.AddIndexers(cache.Indexers{tasksByNode: taskNodeName}); err != nil {
		return fmt.Errorf("adding the %s index to the gputask informer: %w", tasksByNode, err)
	}
	return nil
}

// addNode wakes the sets on a node that is already being taken away when
// the cache first shows it, as after a restart of the informer.
func (c *Controller) addNode(logger klog.Logger, obj any) {
	node, ok := obj.(*corev1.Node)
	if ok && setplan.NodeDisrupted(node) {
		c.enqueueSetsOnNode(logger, node.Name)
	}
}

// updateNode wakes the sets on a node whose disruption starts or ends. Every
// other node update (the kubelet's status, labels, other taints) changes
// nothing for a set, and nodes update often.
func (c *Controller) updateNode(logger klog.Logger, old, cur any) {
	oldNode, ok1 := old.(*corev1.Node)
	curNode, ok2 := cur.(*corev1.Node)
	if !ok1 || !ok2 || setplan.NodeDisrupted(oldNode) == setplan.NodeDisrupted(curNode) {
		return
	}
	c.enqueueSetsOnNode(logger, curNode.Name)
}

// deleteNode wakes the sets on a node that is gone: a node the cache no
// longer holds is not disrupted any more, and the plan changes with it.
// Replacing the pods the node took is the GPUTask controller's.
func (c *Controller) deleteNode(logger klog.Logger, obj any) {
	if node, ok := tombstone.Unwrap[*corev1.Node](obj); ok {
		c.enqueueSetsOnNode(logger, node.Name)
	}
}

// enqueueSetsOnNode enqueues the sets that control a task bound to node.
func (c *Controller) enqueueSetsOnNode(logger klog.Logger, node string) {
	objs, err := c.tasksIndexer.ByIndex(tasksByNode, node)
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("reading the %s index: %w", tasksByNode, err))
		return
	}
	for _, obj := range objs {
		task, ok := obj.(*gputaskv1.GPUTask)
		if !ok {
			continue
		}
		if set := c.resolveControllerRef(task.Namespace, metav1.GetControllerOf(task)); set != nil {
			logger.V(4).Info("Node's disruption changed", "node", node, "gputaskset", klog.KObj(set))
			c.enqueue(set)
		}
	}
}

// disruptedNodes are the nodes of the tasks that the node cache shows
// being taken away. A node the cache does not hold is not known to be
// leaving: one that is gone took its pods with it, and replacing them is
// the GPUTask controller's.
func (c *Controller) disruptedNodes(active []*gputaskv1.GPUTask) setplan.DisruptedNodes {
	var disrupted setplan.DisruptedNodes
	for _, t := range active {
		name := t.Status.NodeName
		if name == "" || disrupted[name] {
			continue
		}
		if node, err := c.nodesLister.Get(name); err == nil && setplan.NodeDisrupted(node) {
			if disrupted == nil {
				disrupted = setplan.DisruptedNodes{}
			}
			disrupted[name] = true
		}
	}
	return disrupted
}

// leaveDisruptedNodes carries out the plan's Disruption: the busy tasks are
// marked draining, the others deleted, and one event on the set counts
// both; the replacements are the plan's creations.
func (c *Controller) leaveDisruptedNodes(ctx context.Context, set *gputaskv1.GPUTaskSet, d setplan.Disruption) error {
	marked, markErr := c.markDraining(ctx, set, d.Drain, true)
	deleted, deleteErr := c.removeTasks(ctx, set, d.Delete)
	if len(marked)+deleted > 0 {
		c.recorder.Event(set, corev1.EventTypeNormal, gputaskv1.ReasonNodeDisrupted, disruptionMessage(d.Nodes(), len(marked), deleted))
	}
	return errors.Join(markErr, deleteErr)
}

// disruptionMessage says what one sync did about the tasks on nodes being
// disrupted, such as "Draining 1 busy task, deleted 2 tasks, on nodes being
// disrupted: gpu-node-1, gpu-node-2".
func disruptionMessage(nodes []string, drained, deleted int) string {
	var done []string
	if drained > 0 {
		done = append(done, fmt.Sprintf("draining %d busy %s", drained, tasksNoun(drained)))
	}
	if deleted > 0 {
		done = append(done, fmt.Sprintf("deleted %d %s", deleted, tasksNoun(deleted)))
	}
	msg := strings.Join(done, ", ") + ", on nodes being disrupted: " + strings.Join(nodes, ", ")
	return gputaskv1.TruncateMessage(strings.ToUpper(msg[:1])+msg[1:], maxEventMessage)
}
