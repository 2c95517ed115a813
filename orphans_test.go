package main

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/taskstatus"
)

// TestOrphanPods: the pod of a task that is gone reaches the sync of its
// own name, which hands it to pkg/orphans (whose tests judge every case);
// a pod without a controller is never queued.
func TestOrphanPods(t *testing.T) {
	tests := []struct {
		name string
		// cached is the task in the cache and the API, if any.
		cached *gputaskv1.GPUTask
		// apiOnly is a task the API server has and the cache does not show yet.
		apiOnly *gputaskv1.GPUTask
		// podOwner is the UID of the pod's controller reference; empty means none.
		podOwner types.UID
		// livePodOwner is the owner the API server shows for the pod.
		livePodOwner types.UID
		// deletionGrace marks the pod terminating with this grace period.
		deletionGrace *int64
		wantGetTask   bool
		wantGetPod    bool
		wantDelete    bool
	}{
		{name: "task gone", podOwner: "uid-render", livePodOwner: "uid-render",
			wantGetTask: true, wantGetPod: true, wantDelete: true},
		{name: "task re-created under the same name", cached: newTask("render"), podOwner: "old-uid", livePodOwner: "old-uid",
			wantGetTask: true, wantGetPod: true, wantDelete: true},
		{name: "no controller (--cascade=orphan)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			if tc.cached != nil {
				f.Add(tc.cached)
			}
			if tc.apiOnly != nil {
				f.Objects = append(f.Objects, tc.apiOnly)
			}
			pod := podWith(newTask("render"), corev1.PodRunning, "gpu-1")
			pod.OwnerReferences = ownerRefs(tc.podOwner)
			if tc.deletionGrace != nil {
				pod.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
				pod.DeletionGracePeriodSeconds = tc.deletionGrace
			}
			live := pod.DeepCopy()
			live.OwnerReferences = ownerRefs(tc.livePodOwner)
			f.Cached = append(f.Cached, pod)
			f.Objects = append(f.Objects, live)
			c := f.newController(ctx)

			// At start-up the informer hands every pod over as an add.
			c.addPod(klog.Background(), pod)
			if tc.podOwner == "" {
				if n := c.workqueue.Len(); n != 0 {
					t.Errorf("a pod without a controller enqueued %d keys", n)
				}
				return
			}
			if n := c.workqueue.Len(); n != 1 {
				t.Fatalf("pod add enqueued %d keys, want 1", n)
			}
			k, _ := c.workqueue.Get()
			c.workqueue.Done(k)

			if tc.wantGetTask {
				f.Actions = append(f.Actions, core.NewGetAction(taskResource, pod.Namespace, "render"))
			}
			if tc.wantGetPod {
				f.KubeActions = append(f.KubeActions, core.NewGetAction(podsResource, pod.Namespace, pod.Name))
			}
			if tc.wantDelete {
				f.KubeActions = append(f.KubeActions, core.NewDeleteActionWithOptions(podsResource, pod.Namespace, pod.Name,
					metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(pod.UID), ResourceVersion: ptr.To(pod.ResourceVersion)}}))
			}
			if tc.cached != nil && !tc.wantDelete {
				t.Fatal("test case not covered: a cached task whose pod is kept writes its status")
			}
			f.Run(ctx, k)
		})
	}
}

func ownerRefs(uid types.UID) []metav1.OwnerReference {
	if uid == "" {
		return nil
	}
	return []metav1.OwnerReference{{
		APIVersion: "gputask.io/v1", Kind: "GPUTask", Name: "render", UID: uid,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}
}

// TestInterruptedPodDeleteCompleted: a pod deleted with a grace period of 0
// that is still stored (its deleter went away between the API server's two
// steps) is deleted again, so that its task gets a new pod; a pod within its
// grace period is left to terminate, and so is one that another
// controller's finalizer holds (Kueue's, while it records the eviction).
func TestInterruptedPodDeleteCompleted(t *testing.T) {
	for _, tc := range []struct {
		grace      int64
		finalizers []string
	}{{0, nil}, {30, nil}, {0, []string{"kueue.x-k8s.io/managed"}}} {
		grace := tc.grace
		t.Run(fmt.Sprintf("grace %d, finalizers %v", grace, tc.finalizers), func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			task := newTask("render")
			pod := podWith(task, corev1.PodPending, "")
			pod.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
			pod.DeletionGracePeriodSeconds = ptr.To(grace)
			pod.Finalizers = tc.finalizers
			f.Add(task)
			f.Add(pod)
			c := f.newController(ctx)
			task = task.DeepCopy()
			task.Status = c.status(task, taskstatus.View{Pod: pod}, c.nodeOf(pod))
			f.Update(task)

			if grace == 0 && len(tc.finalizers) == 0 {
				f.expectDeletePod(pod)
			}
			f.Run(ctx, key(task))
		})
	}
}
