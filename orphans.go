package main

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// deleteOrphanPod deletes the pod named key when it is controlled by a
// GPUTask that no longer exists: deleted while this controller was down, or
// replaced by a new task of the same name, with no garbage collector to
// remove its pod. Such a pod would hold its GPUs for good. It reports
// whether it deleted the pod.
//
// The cache alone does not decide. Lists and watches of two resources are
// not taken at one instant, so a task may be missing from the cache while
// its pod is there. The owner is therefore read from the API server, and so
// is the pod afterwards: when a task is deleted with
// propagationPolicy=Orphan, its owner references are removed from the pods
// before the task goes, so a pod read after the task was found gone and
// still controlled by it is a true orphan. The delete is conditional on
// that read (UID and resourceVersion), so nothing that changed in between
// is deleted.
func (c *Controller) deleteOrphanPod(ctx context.Context, key cache.ObjectName) (bool, error) {
	pod, err := c.podsLister.Pods(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("getting pod %s from the cache: %w", key, err)
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || !isGPUTaskRef(ref) || pod.DeletionTimestamp != nil {
		// Not a task's pod, or an orphan by choice (--cascade=orphan), or
		// already going.
		return false, nil
	}
	if task, err := c.tasksLister.GPUTasks(pod.Namespace).Get(ref.Name); err == nil && task.UID == ref.UID {
		return false, nil
	}

	owner, err := c.gputaskclientset.GputaskV1().GPUTasks(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case err == nil && owner.UID == ref.UID:
		// The cache is behind; the task's add event is on its way.
		return false, nil
	case err != nil && !apierrors.IsNotFound(err):
		return false, fmt.Errorf("reading gputask %s/%s, controller of pod %s: %w", pod.Namespace, ref.Name, klog.KObj(pod), err)
	}
	live, err := c.kubeclientset.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading pod %s whose gputask is gone: %w", klog.KObj(pod), err)
	}
	liveRef := metav1.GetControllerOf(live)
	if live.UID != pod.UID || liveRef == nil || liveRef.UID != ref.UID || live.DeletionTimestamp != nil {
		return false, nil
	}

	uid, rv := live.UID, live.ResourceVersion
	err = c.kubeclientset.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv},
	})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		// A conflict means the pod changed since it was read: judge again.
		return false, fmt.Errorf("deleting pod %s whose gputask is gone: %w", klog.KObj(pod), err)
	}
	klog.FromContext(ctx).Info("Deleted pod whose gputask is gone", "pod", klog.KObj(pod), "gputask", ref.Name, "gputaskUID", ref.UID)
	return true, nil
}
