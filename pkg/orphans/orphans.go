// Package orphans deletes the pods that GPUTasks leave behind. That is the
// pod of a task that was deleted, the pod of a task that is gone while the
// controller was down, and a pod whose own delete was cut off halfway. Every
// delete is conditional on what was read, so nothing that changed in
// between is deleted.
package orphans

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/generated/clientset/versioned"
	listers "github.com/gputask/gputask-controller/pkg/generated/listers/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/reschedule"
)

// Cleaner deletes the pods of GPUTasks that are gone. It reads the caches
// first and the API server before any delete.
type Cleaner struct {
	Kube    kubernetes.Interface
	GPUTask versioned.Interface
	Pods    corelisters.PodLister
	Tasks   listers.GPUTaskLister
}

// isTaskRef reports whether ref names a GPUTask.
func isTaskRef(ref *metav1.OwnerReference) bool {
	return gputaskv1.IsRefTo(ref, "GPUTask")
}

// DeletePodOf deletes the pod named key if it is controlled by the task of
// taskUID, which is gone. Garbage collection would delete it too; doing it
// here frees the GPUs without waiting for it.
func (c Cleaner) DeletePodOf(ctx context.Context, key cache.ObjectName, uid types.UID) error {
	pod, err := c.Pods.Pods(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting pod %s from the cache: %w", key, err)
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.UID != uid || !isTaskRef(ref) || Terminating(pod) {
		return nil
	}
	podUID := pod.UID
	err = c.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &podUID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting pod %s of deleted gputask: %w", klog.KObj(pod), err)
	}
	klog.FromContext(ctx).V(2).Info("Deleted pod of deleted task", "pod", klog.KObj(pod))
	return nil
}

// DeleteOrphan deletes the pod named key when it is controlled by a
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
func (c Cleaner) DeleteOrphan(ctx context.Context, key cache.ObjectName) (bool, error) {
	pod, err := c.Pods.Pods(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("getting pod %s from the cache: %w", key, err)
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || !isTaskRef(ref) || Terminating(pod) {
		// Not a task's pod, or an orphan by choice (--cascade=orphan), or
		// already going.
		return false, nil
	}
	if task, err := c.Tasks.GPUTasks(pod.Namespace).Get(ref.Name); err == nil && task.UID == ref.UID {
		return false, nil
	}

	owner, err := c.GPUTask.GputaskV1().GPUTasks(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case err == nil && owner.UID == ref.UID:
		// The cache is behind; the task's add event is on its way.
		return false, nil
	case err != nil && !apierrors.IsNotFound(err):
		return false, fmt.Errorf("reading gputask %s/%s, controller of pod %s: %w", pod.Namespace, ref.Name, klog.KObj(pod), err)
	}
	live, err := c.Kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading pod %s whose gputask is gone: %w", klog.KObj(pod), err)
	}
	liveRef := metav1.GetControllerOf(live)
	if live.UID != pod.UID || liveRef == nil || liveRef.UID != ref.UID || Terminating(live) {
		return false, nil
	}

	uid, rv := live.UID, live.ResourceVersion
	err = c.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
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

// Terminating reports whether pod is on its way out by itself: marked for
// deletion, and not a delete that was cut off halfway
// (reschedule.DeleteInterrupted), which only a second delete finishes.
func Terminating(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp != nil && !reschedule.DeleteInterrupted(pod)
}

// CompleteDelete deletes again a pod whose deletion was interrupted.
func (c Cleaner) CompleteDelete(ctx context.Context, pod *corev1.Pod) error {
	uid := pod.UID
	err := c.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("completing the interrupted delete of pod %s: %w", klog.KObj(pod), err)
	}
	klog.FromContext(ctx).V(2).Info("Completed an interrupted pod delete", "pod", klog.KObj(pod))
	return nil
}
