package lazycache

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func pod(name string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: "gpu-1", Containers: []corev1.Container{{Name: "main", Image: "vllm:1",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}},
		Status: corev1.PodStatus{Phase: phase},
	}
}

// TestPodsStartOnUseAndStopWhenIdle: the cluster-wide pod cache runs only
// from the first capacity-aware read until IdleStop after the last one,
// and starts again on the next read.
func TestPodsStartOnUseAndStopWhenIdle(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clock := testingclock.NewFakeClock(t0)
	client := kubefake.NewClientset(pod("p1", corev1.PodRunning), pod("p2", corev1.PodPending))
	pods := NewPods(client, 0, clock)
	t.Cleanup(pods.Stop)
	if pods.running() {
		t.Fatal("the cache runs before any read")
	}

	read := func() {
		t.Helper()
		lister, err := pods.Lister(ctx)
		if err != nil {
			t.Fatal(err)
		}
		list, err := lister.List(labels.Everything())
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 2 {
			t.Fatalf("%d pods in the cache, want 2", len(list))
		}
		for _, pod := range list {
			if image := pod.Spec.Containers[0].Image; image != "" {
				t.Errorf("cached pod %s keeps its image %q, want it trimmed", pod.Name, image)
			}
		}
	}
	read()
	if !pods.running() {
		t.Fatal("the cache does not run after a read")
	}

	// Read again before the idle time is up: the timer moves on.
	clock.Step(IdleStop / 2)
	read()
	clock.Step(IdleStop / 2)
	if !pods.running() {
		t.Fatal("the cache stopped less than IdleStop after the last read")
	}
	clock.Step(IdleStop / 2)
	if pods.running() {
		t.Fatal("the cache still runs IdleStop after the last read")
	}

	read()
	if !pods.running() {
		t.Fatal("the cache did not start again")
	}
}

// TestDRAStartsOnUseAndStopsWhenIdle: the DRA caches run from the first
// read of a capacity-aware DRA set until IdleStop after the last, and hold
// the objects trimmed.
func TestDRAStartsOnUseAndStopsWhenIdle(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clock := testingclock.NewFakeClock(t0)
	class := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.nvidia.com",
		Annotations: map[string]string{"big": "annotation"}}}
	slice := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "a-1", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "driver"}}},
		Spec: resourcev1.ResourceSliceSpec{Driver: "gpu.nvidia.com", NodeName: ptr.To("a"),
			Pool:    resourcev1.ResourcePool{Name: "a", Generation: 1, ResourceSliceCount: 1},
			Devices: []resourcev1.Device{{Name: "gpu-0"}}},
	}
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpus"}}}}}
	d := NewDRA(kubefake.NewClientset(class, slice, claim), 0, clock)
	t.Cleanup(d.Stop)
	if d.classes.running() || d.slices.running() || d.claims.running() {
		t.Fatal("the caches run before any read")
	}
	devices, err := d.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gotClass, err := devices.Classes.Get(class.Name)
	if err != nil || gotClass.Annotations != nil {
		t.Errorf("cached DeviceClass = %+v, %v; want it trimmed", gotClass, err)
	}
	gotSlice, err := devices.Slices.Get(slice.Name)
	if err != nil || gotSlice.ManagedFields != nil || len(gotSlice.Spec.Devices) != 1 {
		t.Errorf("cached ResourceSlice = %+v, %v; want it trimmed, with its device", gotSlice, err)
	}
	gotClaim, err := devices.Claims.ResourceClaims(claim.Namespace).Get(claim.Name)
	if err != nil || gotClaim.Spec.Devices.Requests != nil {
		t.Errorf("cached ResourceClaim = %+v, %v; want it trimmed", gotClaim, err)
	}
	clock.Step(IdleStop)
	if d.classes.running() || d.slices.running() || d.claims.running() {
		t.Error("the caches still run IdleStop after the last read")
	}
}
