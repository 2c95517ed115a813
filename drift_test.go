package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
	"github.com/gputask/gputask-controller/pkg/podspec"
)

// stampedPod is the running pod of task as the API server holds it, stamped
// with the hash of the pod that spec asked for when it was made, and the
// same pod as the controller's cache holds it (podspec.Trim).
func stampedPod(t *testing.T, f *fixture, task *gputaskv1.GPUTask) (live, cached *corev1.Pod) {
	t.Helper()
	built, err := podspec.Build(task, f.opts.withDefaults().podOptions())
	if err != nil {
		t.Fatal(err)
	}
	live = podWith(task, corev1.PodRunning, "gpu-1")
	live.Annotations = map[string]string{gputaskv1.AnnotationPodSpecHash: podspec.Hash(built)}
	obj, err := podspec.Trim(live.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	return live, obj.(*corev1.Pod)
}

// TestStampedPodUpToDate: a pod whose hash is the spec's is up to date from
// the cache alone: no read of the pod, no write.
func TestStampedPodUpToDate(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task := withStatus(newTask("render"), gputaskv1.GPUTaskRunning, "gpu-1")
	live, cached := stampedPod(t, f, task)
	if len(cached.Spec.Containers) != 0 {
		t.Fatalf("the cache keeps the containers of a stamped pod: %v", cached.Spec.Containers)
	}
	f.Add(task)
	f.Cached = append(f.Cached, cached)
	f.Objects = append(f.Objects, live)
	f.Add(controllertest.Node("gpu-1"))
	f.Run(ctx, key(task))
	f.ExpectEvents()
}

// TestSpecEditOfStampedPod: when the spec's hash is no longer the pod's, one
// read of the pod names the first field that differs; later syncs of the
// same pod and spec read nothing and write nothing.
func TestSpecEditOfStampedPod(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task := withStatus(newTask("render"), gputaskv1.GPUTaskRunning, "gpu-1")
	live, cached := stampedPod(t, f, task)
	task.Generation = 2
	task.Spec.Image = "render:2"
	f.Add(task)
	f.Cached = append(f.Cached, cached)
	f.Objects = append(f.Objects, live)
	f.Add(controllertest.Node("gpu-1"))

	want := imageChangedStatus(task)
	f.KubeActions = append(f.KubeActions, core.NewGetAction(podsResource, task.Namespace, task.Name))
	f.ExpectApplyStatus(want)
	f.Run(ctx, key(task))

	f.Update(want)
	f.Run(ctx, key(task))

	// The edit undone: the hashes agree again, and what was remembered goes.
	back := want.DeepCopy()
	back.Spec.Image = newTask("render").Spec.Image
	f.Update(back)
	c := f.newController(ctx)
	want = runningAtGeneration(back, 2)
	f.ExpectApplyStatus(want)
	f.Run(ctx, key(task))
	if d := stateOf(c, key(task)).memory.Drift; d != nil {
		t.Errorf("drift still remembered once the pod is up to date: %+v", d)
	}
	f.ExpectEvents()
}

// TestPodDifferingInHashOnly: a pod whose hash differs while the pod itself
// does not, as after an upgrade that builds pods differently, is read once
// and stamped with the spec's hash, so that no restart reads it again.
func TestPodDifferingInHashOnly(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task := withStatus(newTask("render"), gputaskv1.GPUTaskRunning, "gpu-1")
	live, cached := stampedPod(t, f, task)
	live.Annotations[gputaskv1.AnnotationPodSpecHash] = "older"
	cached.Annotations[gputaskv1.AnnotationPodSpecHash] = "older"
	f.Add(task)
	f.Cached = append(f.Cached, cached)
	f.Objects = append(f.Objects, live)
	f.Add(controllertest.Node("gpu-1"))

	built, err := podspec.Build(task, f.opts.withDefaults().podOptions())
	if err != nil {
		t.Fatal(err)
	}
	patch := `{"metadata":{"annotations":{"gputask.io/pod-spec-hash":"` + podspec.Hash(built) + `"}}}`
	f.KubeActions = append(f.KubeActions,
		core.NewGetAction(podsResource, task.Namespace, task.Name),
		core.NewPatchAction(podsResource, task.Namespace, task.Name, types.MergePatchType, []byte(patch)))
	f.Run(ctx, key(task))
	f.ExpectEvents()
}

// runningAtGeneration is task with the status of a Running pod on gpu-1,
// observed at generation.
func runningAtGeneration(task *gputaskv1.GPUTask, generation int64) *gputaskv1.GPUTask {
	want := withStatus(task, gputaskv1.GPUTaskRunning, "gpu-1")
	want.Status.ObservedGeneration = generation
	for i := range want.Status.Conditions {
		want.Status.Conditions[i].ObservedGeneration = generation
	}
	return want
}

// imageChangedStatus is task, at generation 2 with a new image, as the
// status shows it: PodUpToDate False at the image.
func imageChangedStatus(task *gputaskv1.GPUTask) *gputaskv1.GPUTask {
	want := runningAtGeneration(task, 2)
	meta.SetStatusCondition(&want.Status.Conditions, metav1.Condition{
		Type: gputaskv1.ConditionPodUpToDate, Status: metav1.ConditionFalse, Reason: "SpecChanged", ObservedGeneration: 2,
		Message:            "the running pod differs from the spec at spec.containers[task].image; set the annotation gputask.io/restartedAt to replace it",
		LastTransitionTime: metav1.NewTime(testNow),
	})
	return want
}
