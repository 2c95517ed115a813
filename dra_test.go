package main

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/claims"
	"github.com/gputask/gputask-controller/pkg/controllertest"
	"github.com/gputask/gputask-controller/pkg/podspec"
)

var templatesResource = schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaimtemplates"}

// newDRAFixture is a fixture whose controller asks for GPUs by DRA unless a
// task says otherwise.
func newDRAFixture(t *testing.T) *fixture {
	f := newFixture(t)
	f.dra = true
	f.opts.GPUAllocation = gputaskv1.GPUAllocationDRA
	return f
}

// expectedDRAPod is expectedPod with the GPUs from the task's claim: no GPU
// limit, no placement by the model label.
func expectedDRAPod(task *gputaskv1.GPUTask) *corev1.Pod {
	p := expectedPod(task)
	p.Spec.NodeSelector = nil
	c := &p.Spec.Containers[0]
	delete(c.Resources.Limits, "nvidia.com/gpu")
	c.Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To(task.Name + "-gpus")}}
	return p
}

// expectedTemplate is the ResourceClaimTemplate of newTask(name): two
// devices of the A100 model, written out by hand.
func expectedTemplate(task *gputaskv1.GPUTask) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{
			Name: task.Name + "-gpus", Namespace: task.Namespace,
			Labels: map[string]string{gputaskv1.LabelTask: task.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "gputask.io/v1", Kind: "GPUTask", Name: task.Name, UID: task.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: resourcev1.ResourceClaimTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{gputaskv1.LabelTask: task.Name}},
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
				Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{
					DeviceClassName: "gpu.nvidia.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 2,
					Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
						Expression: `device.attributes["gpu.nvidia.com"].productName == "NVIDIA-A100-SXM4-80GB"`}}},
				},
			}}}},
		},
	}
}

func (f *fixture) expectCreateTemplate(tmpl *resourcev1.ResourceClaimTemplate) {
	f.KubeActions = append(f.KubeActions, core.NewCreateAction(templatesResource, tmpl.Namespace, tmpl))
}

// TestDRATaskGetsItsOwnClaimTemplate: a DRA task's pod refers to a
// ResourceClaimTemplate the controller makes first, owned by the task.
func TestDRATaskGetsItsOwnClaimTemplate(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newDRAFixture(t)
	task := newTask("render")
	f.Add(task)
	f.expectCreateTemplate(expectedTemplate(task))
	f.expectCreatePod(expectedDRAPod(task))
	f.Run(ctx, key(task))
}

// TestDRATaskKeepsItsTemplate: a template already made, for the spec as it
// is, is used as it is.
func TestDRATaskKeepsItsTemplate(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newDRAFixture(t)
	task := newTask("render")
	f.Add(task, expectedTemplate(task))
	f.expectCreatePod(expectedDRAPod(task))
	f.Run(ctx, key(task))
}

// TestDRATemplateOfAnOldSpecIsMadeAnew: the spec changed since the template
// was made; the new pod gets a template of the spec as it is now.
func TestDRATemplateOfAnOldSpecIsMadeAnew(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newDRAFixture(t)
	task := newTask("render")
	old := expectedTemplate(task)
	old.UID = "old-template"
	old.Spec.Spec.Devices.Requests[0].Exactly.Count = 1
	f.Add(task, old)
	f.KubeActions = append(f.KubeActions, core.NewDeleteActionWithOptions(templatesResource, task.Namespace, old.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(old.UID)}}))
	f.expectCreateTemplate(expectedTemplate(task))
	f.expectCreatePod(expectedDRAPod(task))
	f.Run(ctx, key(task))
}

// TestDRATemplateOfSomeoneElseIsNotTouched: a template of the task's
// template name that the task does not control blocks the pod, and the
// task says why.
func TestDRATemplateOfSomeoneElseIsNotTouched(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newDRAFixture(t)
	task := newTask("render")
	theirs := expectedTemplate(task)
	theirs.OwnerReferences = nil
	f.Add(task, theirs)
	f.expectNoPod(ctx, task, "ResourceClaimTemplate default/render-gpus exists and is not controlled by this GPUTask")
}

// expectNoPod syncs task, which must fail without creating or deleting
// anything, and with PodCreateFailed True saying why.
func (f *fixture) expectNoPod(ctx context.Context, task *gputaskv1.GPUTask, why string) {
	f.T.Helper()
	f.newController(ctx)
	if err := f.Sync(ctx, key(task)); err == nil {
		f.T.Fatal("sync succeeded, want an error")
	}
	got, err := f.Client.GputaskV1().GPUTasks(task.Namespace).Get(ctx, task.Name, metav1.GetOptions{})
	if err != nil {
		f.T.Fatal(err)
	}
	c := meta.FindStatusCondition(got.Status.Conditions, gputaskv1.ConditionPodCreateFailed)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, why) {
		f.T.Errorf("PodCreateFailed = %+v, want it saying %q", c, why)
	}
	for _, a := range f.KubeClient.Actions() {
		if a.GetVerb() == "create" || a.GetVerb() == "delete" {
			f.T.Errorf("unexpected %s of %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

// TestDRAStatusNamesTheAllocatedDevices: the task's status names the
// devices of its claim's allocation and the model of the firstAvailable
// entry they came from.
func TestDRAStatusNamesTheAllocatedDevices(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newDRAFixture(t)
	task := newTask("render")
	task.Spec.GPUAlternatives = []string{"NVIDIA-H100-80GB"}
	task, pod := f.addTaskWithPod(task, corev1.PodRunning, "node-1")
	pod.Spec = expectedDRAPod(task).Spec
	podspec.Stamp(pod)
	pod.Spec.NodeName = "node-1"
	pod.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpus", ResourceClaimName: ptr.To("render-gpus-x7k2p")}}
	claim := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "render-gpus-x7k2p", Namespace: task.Namespace, Labels: map[string]string{gputaskv1.LabelTask: task.Name}},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
			Results: []resourcev1.DeviceRequestAllocationResult{
				{Request: "gpus/model-1", Driver: "gpu.nvidia.com", Pool: "node-1", Device: "gpu-3"},
				{Request: "gpus/model-1", Driver: "gpu.nvidia.com", Pool: "node-1", Device: "gpu-4"},
				{Request: "nic", Driver: "rdma.example.com", Pool: "node-1", Device: "mlx-0"},
			},
		}}},
	}
	f.Add(claim)
	want := task.DeepCopy()
	want.Status.GPUModel = "NVIDIA-H100-80GB"
	want.Status.Devices = []string{"gpu.nvidia.com/node-1/gpu-3", "gpu.nvidia.com/node-1/gpu-4"}
	f.ExpectApplyStatus(want)
	f.Run(ctx, key(task))
}

// TestDRAWithoutTheAPI: where the API server serves no DRA, a DRA task
// makes no pod and says why.
func TestDRAWithoutTheAPI(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task := newTask("render", controllertest.TaskFunc(func(tk *gputaskv1.GPUTask) { tk.Spec.GPUAllocation = gputaskv1.GPUAllocationDRA }))
	f.Add(task)
	f.expectNoPod(ctx, task, claims.ErrNotServed.Error())
}
