package autoscaler

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
	"github.com/gputask/gputask-controller/pkg/podspec"
	"github.com/gputask/gputask-controller/pkg/scaling"
)

func gpuNode(name, model string, gpus int64, unschedulable bool) *corev1.Node {
	n := controllertest.GPUNode(name, model, gpus)
	n.Spec.Unschedulable = unschedulable
	return n
}

func gpuPod(name, node string, gpus int64, phase corev1.PodPhase) *corev1.Pod {
	return controllertest.GPUPod(name, node, gpus, phase)
}

func task(name string, owner *gputaskv1.GPUTaskSet, node string) *gputaskv1.GPUTask {
	t := controllertest.OwnedTask(owner, name)
	t.Status.NodeName = node
	return t
}

func TestCapacityAwareCapsScaleUp(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("web", 2)
	set.Spec.Autoscaling.CapacityAware = true
	set.Spec.Autoscaling.Policy.StepUp = ptr.To[int32](8)
	impostor := set.DeepCopy()
	impostor.UID = "someone-else"
	f.Add(
		gpuNode("a100-1", "A100", 4, false),
		gpuNode("a100-2", "A100", 4, false),
		gpuNode("a100-cordoned", "A100", 8, true),
		gpuNode("h100", "H100", 8, false),
	)
	f.Add(
		gpuPod("web-0", "a100-1", 1, corev1.PodRunning),
		gpuPod("web-1", "a100-1", 1, corev1.PodRunning),
		gpuPod("other", "a100-1", 1, corev1.PodRunning),
		gpuPod("done", "a100-2", 4, corev1.PodSucceeded),
		gpuPod("pending", "", 1, corev1.PodPending),
	)
	f.Add(
		task("web-0", set, "a100-1"), task("web-1", set, "a100-1"),
		task("web-2", set, ""),               // not bound yet
		task("stranger", impostor, "a100-2"), // same label, other owner
	)
	c := f.autoscale(ctx, set, fakeSource{value: 0.95})

	f.syncOK(ctx, c, "web")
	// a100-1: 4 − 3 used = 1; a100-2: 4 free; plus 2 bound tasks = 7.
	if f.scaleReplicas != 7 {
		t.Errorf("scale replicas = %d, want capacity 7", f.scaleReplicas)
	}
	got := f.lastStatus()
	if ptr.Deref(got.Status.CapacityReplicas, -1) != 7 {
		t.Errorf("status.capacityReplicas = %v, want 7", got.Status.CapacityReplicas)
	}
	assertCondition(t, got, gputaskv1.ConditionScalingLimited, metav1.ConditionTrue, scaling.ReasonCapacityLimited)
}

func TestCapacityCountsGPUAmountAndAnyModel(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("web", 1)
	set.Spec.Template.Spec.GPU = ""
	set.Spec.Template.Spec.GPUAmount = ptr.To(intstr.FromString("2"))
	f.Add(set)
	f.Add(gpuNode("a", "A100", 5, false), gpuNode("b", "H100", 4, false), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu"}})
	c := f.newController(ctx)
	n, err := c.capacity(ctx, set)
	if err != nil {
		t.Fatalf("capacity: %v", err)
	}
	if n.Tasks != 4 { // floor(5/2) + floor(4/2)
		t.Errorf("capacity = %d, want 4", n.Tasks)
	}

	// An amount the tasks cannot be built with has no capacity to compute.
	set.Spec.Template.Spec.GPUAmount = ptr.To(intstr.FromString("abc"))
	if _, err := c.capacity(ctx, set); err == nil || !strings.Contains(err.Error(), "spec.gpu-amount") {
		t.Errorf("capacity with gpu-amount abc: err = %v, want one naming spec.gpu-amount", err)
	}
}

// TestCapacityCountsEveryAcceptedModel: a template with gpuAlternatives fits
// on the nodes of each accepted model, and on no other.
func TestCapacityCountsEveryAcceptedModel(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("web", 1)
	set.Spec.Template.Spec.GPU = "A100"
	set.Spec.Template.Spec.GPUAlternatives = []string{"H100"}
	f.Add(set)
	f.Add(gpuNode("a", "A100", 2, false), gpuNode("h", "H100", 3, false), gpuNode("l", "L40S", 8, false))
	c := f.newController(ctx)
	n, err := c.capacity(ctx, set)
	if err != nil {
		t.Fatalf("capacity: %v", err)
	}
	if n.Tasks != 5 { // 2 A100 + 3 H100, never the L40S
		t.Errorf("capacity = %d, want 5", n.Tasks)
	}
}

// BenchmarkCapacity measures the capacity sum over a large cluster: 1,000
// GPU nodes and 8,000 pods. Target: under 10ms per evaluation, so that
// capacityAware sets can be evaluated every few seconds.
func BenchmarkCapacity(b *testing.B) {
	_, ctx := ktesting.NewTestContext(b)
	f := newFixture(b)
	set := newSet("web", 1)
	f.Add(set)
	for i := range 1000 {
		node := fmt.Sprintf("node-%d", i)
		f.Add(gpuNode(node, "A100", 8, false))
		for j := range 8 {
			f.Add(gpuPod(fmt.Sprintf("pod-%d-%d", i, j), node, int64(j%2), corev1.PodRunning))
		}
	}
	c := f.newController(ctx)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.capacity(ctx, set); err != nil {
			b.Fatal(err)
		}
	}
}

func TestPodGPUs(t *testing.T) {
	gpu := func(n int64) corev1.ResourceList {
		return corev1.ResourceList{podspec.DefaultGPUResourceName: *resource.NewQuantity(n, resource.DecimalSI)}
	}
	// Requests as the API server defaults them from the limits.
	res := func(n int64) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: gpu(n), Limits: gpu(n)}
	}
	sidecar := corev1.ContainerRestartPolicyAlways
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
		want int64
	}{
		{"largest init container", corev1.PodSpec{
			InitContainers: []corev1.Container{{Resources: res(3)}},
			Containers:     []corev1.Container{{Resources: res(1)}, {Resources: res(1)}, {}},
		}, 3},
		{"containers summed", corev1.PodSpec{
			Containers: []corev1.Container{{Resources: res(1)}, {Resources: res(1)}, {}},
		}, 2},
		{"sidecar init container adds to the containers", corev1.PodSpec{
			InitContainers: []corev1.Container{{Resources: res(1), RestartPolicy: &sidecar}},
			Containers:     []corev1.Container{{Resources: res(1)}},
		}, 2},
		{"overhead counts", corev1.PodSpec{
			Containers: []corev1.Container{{Resources: res(1)}},
			Overhead:   gpu(1),
		}, 2},
	} {
		if got := podGPUs(&corev1.Pod{Spec: tc.spec}, podspec.DefaultGPUResourceName); got != tc.want {
			t.Errorf("%s: podGPUs = %d, want %d", tc.name, got, tc.want)
		}
	}
}
