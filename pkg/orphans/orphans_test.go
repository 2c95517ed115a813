package orphans

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
)

var (
	testNow      = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	podKey       = cache.ObjectName{Namespace: metav1.NamespaceDefault, Name: "render"}
)

// newCleaner builds a Cleaner over the fixture's clients and caches, and
// makes SyncHandler call sync with it.
func newCleaner(f *controllertest.Fixture, sync func(context.Context, Cleaner, cache.ObjectName) error) Cleaner {
	f.Start()
	c := Cleaner{
		Kube: f.KubeClient, GPUTask: f.Client,
		Pods: f.KubeInformers.Core().V1().Pods().Lister(), Tasks: f.Informers.Gputask().V1().GPUTasks().Lister(),
	}
	f.SyncHandler = func(ctx context.Context, key cache.ObjectName) error { return sync(ctx, c, key) }
	f.Preload()
	return c
}

func deleteOrphan(ctx context.Context, c Cleaner, key cache.ObjectName) error {
	_, err := c.DeleteOrphan(ctx, key)
	return err
}

// taskPod is the pod render, controlled by the task of uid (none when
// empty).
func taskPod(uid types.UID) *corev1.Pod {
	pod := controllertest.GPUPod("render", "gpu-1", 1, corev1.PodRunning)
	pod.UID, pod.ResourceVersion = "pod-uid", "7"
	if uid != "" {
		pod.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "gputask.io/v1", Kind: "GPUTask", Name: "render", UID: uid,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}}
	}
	return pod
}

// TestDeleteOrphan: a pod whose controlling task is gone (deleted while the
// controller was down, or replaced by a new task of the same name) is
// deleted, conditional on the UID and resourceVersion the API server showed;
// any other pod is left alone.
func TestDeleteOrphan(t *testing.T) {
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
		{name: "task re-created under the same name", cached: controllertest.Task("render"), podOwner: "old-uid", livePodOwner: "old-uid",
			wantGetTask: true, wantGetPod: true, wantDelete: true},
		{name: "task in the cache", cached: controllertest.Task("render"), podOwner: "uid-render"},
		{name: "task not in the cache yet", apiOnly: controllertest.Task("render"), podOwner: "uid-render",
			wantGetTask: true},
		{name: "owner reference removed since (--cascade=orphan)", podOwner: "uid-render",
			wantGetTask: true, wantGetPod: true},
		{name: "no controller (--cascade=orphan)"},
		{name: "task gone, pod terminating", podOwner: "uid-render", livePodOwner: "uid-render", deletionGrace: ptr.To[int64](30)},
		{name: "task gone, delete interrupted between its two steps", podOwner: "uid-render", livePodOwner: "uid-render", deletionGrace: ptr.To[int64](0),
			wantGetTask: true, wantGetPod: true, wantDelete: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := controllertest.NewFixture(t, testNow)
			if tc.cached != nil {
				f.Add(tc.cached)
			}
			if tc.apiOnly != nil {
				f.Objects = append(f.Objects, tc.apiOnly)
			}
			pod := taskPod(tc.podOwner)
			if tc.deletionGrace != nil {
				pod.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
				pod.DeletionGracePeriodSeconds = tc.deletionGrace
			}
			live := pod.DeepCopy()
			live.OwnerReferences = taskPod(tc.livePodOwner).OwnerReferences
			f.Cached = append(f.Cached, pod)
			f.Objects = append(f.Objects, live)
			newCleaner(f, deleteOrphan)

			if tc.wantGetTask {
				f.Actions = append(f.Actions, core.NewGetAction(controllertest.TasksResource, pod.Namespace, "render"))
			}
			if tc.wantGetPod {
				f.KubeActions = append(f.KubeActions, core.NewGetAction(podsResource, pod.Namespace, pod.Name))
			}
			if tc.wantDelete {
				f.KubeActions = append(f.KubeActions, core.NewDeleteActionWithOptions(podsResource, pod.Namespace, pod.Name,
					metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(pod.UID), ResourceVersion: ptr.To(pod.ResourceVersion)}}))
			}
			f.Run(ctx, podKey)
		})
	}
}

// TestDeleteOrphanConflict: a pod that changed between the read and the
// delete is not deleted, and the error sends it back to be judged again.
func TestDeleteOrphanConflict(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := controllertest.NewFixture(t, testNow)
	pod := taskPod("uid-render")
	f.Add(pod)
	newCleaner(f, deleteOrphan)
	f.KubeClient.PrependReactor("delete", "pods", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(podsResource.GroupResource(), pod.Name, nil)
	})
	f.Actions = append(f.Actions, core.NewGetAction(controllertest.TasksResource, pod.Namespace, "render"))
	f.KubeActions = append(f.KubeActions,
		core.NewGetAction(podsResource, pod.Namespace, pod.Name),
		core.NewDeleteActionWithOptions(podsResource, pod.Namespace, pod.Name,
			metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(pod.UID), ResourceVersion: ptr.To(pod.ResourceVersion)}}))
	f.RunExpectError(ctx, podKey)
}

// TestDeletePodOf: the pod of a deleted task is deleted only if that very
// task controlled it and it is not already going.
func TestDeletePodOf(t *testing.T) {
	for _, tc := range []struct {
		name       string
		pod        *corev1.Pod
		wantDelete bool
	}{
		{"controlled by the deleted task", taskPod("uid-render"), true},
		{"controlled by another task of that name", taskPod("uid-new"), false},
		{"no controller", taskPod(""), false},
		{"terminating", func() *corev1.Pod {
			p := taskPod("uid-render")
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds = ptr.To(metav1.NewTime(testNow)), ptr.To[int64](30)
			return p
		}(), false},
		{"no pod", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := controllertest.NewFixture(t, testNow)
			if tc.pod != nil {
				f.Add(tc.pod)
			}
			newCleaner(f, func(ctx context.Context, c Cleaner, key cache.ObjectName) error {
				return c.DeletePodOf(ctx, key, "uid-render")
			})
			if tc.wantDelete {
				f.KubeActions = append(f.KubeActions, core.NewDeleteActionWithOptions(podsResource, tc.pod.Namespace, tc.pod.Name,
					metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(tc.pod.UID)}}))
			}
			f.Run(ctx, podKey)
		})
	}
}

// TestDeleteInterrupted: a pod deleted with a grace period of 0 and still
// stored was cut off between the API server's two steps, unless a
// finalizer holds it, and is not terminating by itself; CompleteDelete
// deletes it again, by UID.
func TestDeleteInterrupted(t *testing.T) {
	deleted := func(grace int64, finalizers ...string) *corev1.Pod {
		p := taskPod("uid-render")
		p.DeletionTimestamp, p.DeletionGracePeriodSeconds, p.Finalizers = ptr.To(metav1.NewTime(testNow)), ptr.To(grace), finalizers
		return p
	}
	for _, tc := range []struct {
		name        string
		pod         *corev1.Pod
		terminating bool
	}{
		{"live", taskPod("uid-render"), false},
		{"grace 0, stored", deleted(0), false},
		{"grace 30", deleted(30), true},
		{"grace 0, held by a finalizer", deleted(0, "kueue.x-k8s.io/managed"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Terminating(tc.pod); got != tc.terminating {
				t.Errorf("Terminating = %v, want %v", got, tc.terminating)
			}
		})
	}

	_, ctx := ktesting.NewTestContext(t)
	f := controllertest.NewFixture(t, testNow)
	pod := deleted(0)
	f.Add(pod)
	newCleaner(f, func(ctx context.Context, c Cleaner, key cache.ObjectName) error {
		return c.CompleteDelete(ctx, pod)
	})
	f.KubeActions = append(f.KubeActions, core.NewDeleteActionWithOptions(podsResource, pod.Namespace, pod.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(pod.UID)}}))
	f.Run(ctx, podKey)
}
