package podspec

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

var draOpts = Options{GPUResourceName: "nvidia.com/gpu", GPULabelKey: "nvidia.com/gpu.product", DefaultImage: "busybox:1.36",
	GPUAllocation: gputaskv1.GPUAllocationDRA}

func TestBuildDRA(t *testing.T) {
	claimed := func(p *corev1.Pod) {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "gpus", ResourceClaimTemplateName: ptr.To("train-gpus")})
		c := &p.Spec.Containers[0]
		c.Resources = corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpus"}}}
	}
	tests := []struct {
		name    string
		opts    Options
		mutate  func(*gputaskv1.GPUTask)
		want    func(*corev1.Pod)
		wantErr string
	}{
		{name: "the controller's default: a claim, no GPU limit, no model placement", opts: draOpts,
			mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.GPU, tk.Spec.GPUAlternatives = "A100", []string{"H100"} },
			want:   claimed},
		{name: "chosen per task", opts: opts,
			mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.GPUAllocation = gputaskv1.GPUAllocationDRA },
			want:   claimed},
		{name: "a task keeps the extended resource under a DRA default", opts: draOpts,
			mutate: func(tk *gputaskv1.GPUTask) {
				tk.Spec.GPUAllocation, tk.Spec.GPU = gputaskv1.GPUAllocationExtendedResource, "A100"
			},
			want: func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"nvidia.com/gpu.product": "A100"} }},
		{name: "the template's own claims are kept", opts: draOpts,
			mutate: func(tk *gputaskv1.GPUTask) {
				tk.Spec.Template = &gputaskv1.PodTemplate{Spec: corev1.PodSpec{
					ResourceClaims: []corev1.PodResourceClaim{{Name: "nic", ResourceClaimName: ptr.To("rdma")}},
					Containers:     []corev1.Container{{Name: "task", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "nic"}}}}},
				}}
			},
			want: func(p *corev1.Pod) {
				p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "nic", ResourceClaimName: ptr.To("rdma")},
					{Name: "gpus", ResourceClaimTemplateName: ptr.To("train-gpus")}}
				p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "nic"}, {Name: "gpus"}}}
			}},
		{name: "a template claim named gpus conflicts", opts: draOpts,
			mutate: func(tk *gputaskv1.GPUTask) {
				tk.Spec.Template = &gputaskv1.PodTemplate{Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr.To("mine")}}}}
			},
			wantErr: "spec.template.spec.resourceClaims[0]"},
		{name: "a container claim named gpus conflicts", opts: draOpts,
			mutate: func(tk *gputaskv1.GPUTask) {
				tk.Spec.Template = &gputaskv1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "task",
					Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpus"}}}}}}}
			},
			wantErr: "containers[0].resources.claims[0]"},
		{name: "a GPU limit in DRA mode conflicts", opts: draOpts,
			mutate: func(tk *gputaskv1.GPUTask) {
				tk.Spec.Template = &gputaskv1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "task",
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}}}
			},
			wantErr: "in DRA mode the GPUs of spec.gpu-amount come from a ResourceClaim"},
		{name: "a selector that does not compile is the spec's error", opts: draOpts,
			mutate:  func(tk *gputaskv1.GPUTask) { tk.Spec.DeviceSelectors = []string{"device.nope("} },
			wantErr: "spec.deviceSelectors[0]"},
		{name: "a model with spaces is a DRA model", opts: draOpts,
			mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.GPU = "NVIDIA A100-SXM4-80GB" },
			want:   claimed},
		{name: "a model with spaces is no node label value", opts: opts,
			mutate: func(tk *gputaskv1.GPUTask) {
				tk.Spec.GPU, tk.Spec.GPUAlternatives = "A100", []string{"NVIDIA H100 80GB HBM3"}
			},
			wantErr: `spec.gpuAlternatives[0]: "NVIDIA H100 80GB HBM3" is not a value of the node label nvidia.com/gpu.product`},
		{name: "deviceSelectors need DRA", opts: opts,
			mutate:  func(tk *gputaskv1.GPUTask) { tk.Spec.DeviceSelectors = []string{"true"} },
			wantErr: "spec.deviceSelectors: only used with spec.gpuAllocation DRA"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			task := baseTask()
			if tt.mutate != nil {
				tt.mutate(task)
			}
			got, err := Build(task, tt.opts)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Build error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			want := basePod()
			if tt.want != nil {
				tt.want(want)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("pod (-want +got):\n%s", diff)
			}
		})
	}
}

func TestClaimTemplate(t *testing.T) {
	sel := func(exprs ...string) []resourcev1.DeviceSelector {
		var out []resourcev1.DeviceSelector
		for _, e := range exprs {
			out = append(out, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: e}})
		}
		return out
	}
	const a100 = `device.attributes["gpu.nvidia.com"].productName == "A100"`
	const h100 = `device.attributes["gpu.nvidia.com"].productName == "H100"`
	const memory = `device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0`
	tests := []struct {
		name    string
		mutate  func(*gputaskv1.GPUTask)
		want    resourcev1.DeviceRequest
		wantErr string
	}{
		{name: "any GPU", want: resourcev1.DeviceRequest{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{
			DeviceClassName: "gpu.nvidia.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}},
		{name: "one model, two devices, a memory floor",
			mutate: func(tk *gputaskv1.GPUTask) {
				tk.Spec.GPU, tk.Spec.GPUAmount, tk.Spec.DeviceSelectors = "A100", ioi(2), []string{memory}
			},
			want: resourcev1.DeviceRequest{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: "gpu.nvidia.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 2, Selectors: sel(a100, memory)}}},
		{name: "alternatives in order of preference",
			mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.GPU, tk.Spec.GPUAlternatives = "A100", []string{"H100", "A100"} },
			want: resourcev1.DeviceRequest{Name: "gpus", FirstAvailable: []resourcev1.DeviceSubRequest{
				{Name: "model-0", DeviceClassName: "gpu.nvidia.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1, Selectors: sel(a100)},
				{Name: "model-1", DeviceClassName: "gpu.nvidia.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1, Selectors: sel(h100)},
			}}},
		{name: "a selector that does not compile", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.DeviceSelectors = []string{"true", "device.nope("} },
			wantErr: "spec.deviceSelectors[1]"},
		{name: "a selector too costly to evaluate", mutate: func(tk *gputaskv1.GPUTask) {
			tk.Spec.DeviceSelectors = []string{`device.attributes["gpu.nvidia.com"].all(k, device.attributes["gpu.nvidia.com"].all(j, device.attributes["gpu.nvidia.com"].all(i, device.attributes["gpu.nvidia.com"].all(h, true))))`}
		}, wantErr: "exceeds the limit"},
		{name: "a selector that is not a bool", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.DeviceSelectors = []string{`device.driver`} },
			wantErr: "spec.deviceSelectors[0]"},
		{name: "a bad amount", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.GPUAmount = ios("x") }, wantErr: "spec.gpu-amount"},
		{name: "a name too long for the template", mutate: func(tk *gputaskv1.GPUTask) { tk.Name = strings.Repeat("a", 250) }, wantErr: "metadata.name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			task := baseTask()
			if tt.mutate != nil {
				tt.mutate(task)
			}
			got, err := ClaimTemplate(task, draOpts)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ClaimTemplate error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != "train-gpus" || got.Namespace != "ml" || got.Labels[gputaskv1.LabelTask] != "train" ||
				got.Spec.Labels[gputaskv1.LabelTask] != "train" || len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != "uid-1" {
				t.Errorf("template metadata = %+v, claim metadata %+v", got.ObjectMeta, got.Spec.ObjectMeta)
			}
			if diff := cmp.Diff([]resourcev1.DeviceRequest{tt.want}, got.Spec.Spec.Devices.Requests); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAllocatedModel(t *testing.T) {
	one := &gputaskv1.GPUTaskSpec{GPU: "A100"}
	alts := &gputaskv1.GPUTaskSpec{GPU: "A100", GPUAlternatives: []string{"H100"}}
	for _, tc := range []struct {
		spec    *gputaskv1.GPUTaskSpec
		request string
		want    string
	}{
		{one, "gpus", "A100"},
		{alts, "gpus/model-0", "A100"},
		{alts, "gpus/model-1", "H100"},
		{alts, "gpus/model-2", ""},
		{alts, "gpus", ""},
		{&gputaskv1.GPUTaskSpec{}, "gpus", ""},
		{one, "nic", ""},
	} {
		if got := AllocatedModel(tc.spec, tc.request); got != tc.want {
			t.Errorf("AllocatedModel(%v, %q) = %q, want %q", Models(tc.spec), tc.request, got, tc.want)
		}
	}
}

func TestModelSelector(t *testing.T) {
	if got, want := ModelSelector("example.com/model", `A"100`), `device.attributes["example.com"].model == "A\"100"`; got != want {
		t.Errorf("ModelSelector = %s, want %s", got, want)
	}
}
