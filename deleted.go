package main

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// deletePodOfDeletedTask deletes the pod of a task that is gone, if that pod
// is controlled by the very task that was deleted. Garbage collection would
// delete it too; doing it here frees the GPUs without waiting for it.
func (c *Controller) deletePodOfDeletedTask(ctx context.Context, key cache.ObjectName) error {
	c.expectations.Delete(key.String())
	c.dropReplacement(key)
	c.mu.Lock()
	uid, ok := c.deletedTasks[key]
	delete(c.warnedRestartedAt, key)
	delete(c.statusWrittenFrom, key)
	delete(c.statusWriteAt, key)
	c.mu.Unlock()
	if !ok {
		// Not a delete this controller saw: the pod may have outlived a
		// task deleted while it was down.
		_, err := c.deleteOrphanPod(ctx, key)
		return err
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
	if ref == nil || ref.UID != uid || !isGPUTaskRef(ref) || terminating(pod) {
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
