package podspec

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// withTemplate gives the task a template whose only container is c.
func withTemplate(tk *gputaskv1.GPUTask, containers ...corev1.Container) *gputaskv1.PodTemplate {
	tk.Spec.Template = &gputaskv1.PodTemplate{Spec: corev1.PodSpec{Containers: containers}}
	return tk.Spec.Template
}

var gpuToleration = corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}

func TestBuildTemplate(t *testing.T) {
	tests := []struct {
		name    string
		opts    func(*Options)
		mutate  func(*gputaskv1.GPUTask)
		want    func(*corev1.Pod)
		wantErr string
	}{
		{
			name: "template fields pass through",
			mutate: func(tk *gputaskv1.GPUTask) {
				tp := withTemplate(tk, corev1.Container{
					Name: "task", Image: "vllm/vllm-openai:v0.6",
					Ports:        []corev1.ContainerPort{{Name: "http", ContainerPort: 8000}},
					VolumeMounts: []corev1.VolumeMount{{Name: "shm", MountPath: "/dev/shm"}},
				})
				tp.Metadata.Labels = map[string]string{"kueue.x-k8s.io/queue-name": "gpu"}
				tp.Metadata.Annotations = map[string]string{"prometheus.io/scrape": "true"}
				tp.Spec.ServiceAccountName = "worker"
				tp.Spec.RuntimeClassName = ptr.To("nvidia")
				tp.Spec.SchedulerName = "kai-scheduler"
				tp.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "oci-secret"}}
				tp.Spec.Volumes = []corev1.Volume{{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}
			},
			want: func(p *corev1.Pod) {
				p.Labels["kueue.x-k8s.io/queue-name"] = "gpu"
				p.Annotations = map[string]string{"prometheus.io/scrape": "true"}
				p.Spec.ServiceAccountName = "worker"
				p.Spec.RuntimeClassName = ptr.To("nvidia")
				p.Spec.SchedulerName = "kai-scheduler"
				p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "oci-secret"}}
				p.Spec.Volumes = []corev1.Volume{{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}
				c := &p.Spec.Containers[0]
				c.Image = "vllm/vllm-openai:v0.6"
				c.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8000}}
				c.VolumeMounts = []corev1.VolumeMount{{Name: "shm", MountPath: "/dev/shm"}}
			},
		},
		{
			name: "template without containers gets the main container",
			mutate: func(tk *gputaskv1.GPUTask) {
				withTemplate(tk).Spec.NodeName = ""
				tk.Spec.Template.Spec.ServiceAccountName = "worker"
			},
			want: func(p *corev1.Pod) { p.Spec.ServiceAccountName = "worker" },
		},
		{
			name: "short fields apply to the container named task",
			mutate: func(tk *gputaskv1.GPUTask) {
				tk.Spec.Image, tk.Spec.Command, tk.Spec.CPU = "trainer:1", []string{"python"}, ioi(2)
				withTemplate(tk, corev1.Container{Name: "proxy", Image: "envoy:1"}, corev1.Container{Name: "task"})
			},
			want: func(p *corev1.Pod) {
				main := p.Spec.Containers[0]
				main.Image, main.Command = "trainer:1", []string{"python"}
				main.Resources.Limits[corev1.ResourceCPU] = resource.MustParse("2")
				main.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
				p.Spec.Containers = []corev1.Container{{Name: "proxy", Image: "envoy:1"}, main}
			},
		},
		{
			name: "else to the only container",
			mutate: func(tk *gputaskv1.GPUTask) {
				tk.Spec.Args = []string{"--epochs=3"}
				withTemplate(tk, corev1.Container{Name: "trainer", Image: "trainer:1"})
			},
			want: func(p *corev1.Pod) {
				c := &p.Spec.Containers[0]
				c.Name, c.Image, c.Args = "trainer", "trainer:1", []string{"--epochs=3"}
			},
		},
		{
			name: "else to the first container",
			mutate: func(tk *gputaskv1.GPUTask) {
				withTemplate(tk, corev1.Container{Name: "worker", Image: "w:1"}, corev1.Container{Name: "sidecar", Image: "s:1"})
			},
			want: func(p *corev1.Pod) {
				gpu := p.Spec.Containers[0].Resources
				p.Spec.Containers = []corev1.Container{{Name: "worker", Image: "w:1", Resources: gpu}, {Name: "sidecar", Image: "s:1"}}
			},
		},
		{
			name: "same value in both places is no conflict",
			mutate: func(tk *gputaskv1.GPUTask) {
				tk.Spec.Image, tk.Spec.Priority, tk.Spec.GPUAmount, tk.Spec.Memory = "x:1", "high", ioi(2), ios("16Gi")
				tk.Spec.Env = []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}}
				tp := withTemplate(tk, corev1.Container{
					Name: "task", Image: "x:1", Env: []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "C", Value: "3"}},
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("16384Mi")}},
				})
				tp.Spec.PriorityClassName = "high"
			},
			want: func(p *corev1.Pod) {
				p.Spec.PriorityClassName = "high"
				c := &p.Spec.Containers[0]
				c.Image = "x:1"
				c.Env = []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "C", Value: "3"}, {Name: "B", Value: "2"}}
				c.Resources = corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("16Gi")},
					Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("16Gi")},
				}
			},
		},
		{
			name: "template image used when spec.image is empty",
			mutate: func(tk *gputaskv1.GPUTask) {
				withTemplate(tk, corev1.Container{Name: "task", Image: "mine:2"})
			},
			want: func(p *corev1.Pod) { p.Spec.Containers[0].Image = "mine:2" },
		},
		{
			name:   "restartPolicy OnFailure allowed",
			mutate: func(tk *gputaskv1.GPUTask) { withTemplate(tk).Spec.RestartPolicy = corev1.RestartPolicyOnFailure },
			want:   func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyOnFailure },
		},
		{
			name:    "restartPolicy Always rejected",
			mutate:  func(tk *gputaskv1.GPUTask) { withTemplate(tk).Spec.RestartPolicy = corev1.RestartPolicyAlways },
			wantErr: "spec.template.spec.restartPolicy: Always is not supported",
		},
		{
			name: "conflict: image",
			mutate: func(tk *gputaskv1.GPUTask) {
				tk.Spec.Image = "a:1"
				withTemplate(tk, corev1.Container{Name: "task", Image: "b:1"})
			},
			wantErr: `spec.image (a:1) and spec.template.spec.containers[0].image (b:1) differ`,
		},
		{
			name: "conflict: command",
			mutate: func(tk *gputaskv1.GPUTask) {
				tk.Spec.Command = []string{"python"}
				withTemplate(tk, corev1.Container{Name: "task", Command: []string{"bash"}})
			},
			wantErr: `spec.command (["python"]) and spec.template.spec.containers[0].command (["bash"]) differ`,
		},
		{
			name: "conflict: args",
			mutate: func(tk *gputaskv1.GPUTask) {
				tk.Spec.Args = []string{"a"}
				withTemplate(tk, corev1.Container{Name: "task", Args: []string{"b"}})
			},
			wantErr: `spec.args (["a"]) and spec.template.spec.containers[0].args (["b"]) differ`,
		},
		{
			name: "conflict: env",
			mutate: func(tk *gputaskv1.GPUTask) {
				tk.Spec.Env = []corev1.EnvVar{{Name: "A", Value: "1"}}
				withTemplate(tk, corev1.Container{Name: "task", Env: []corev1.EnvVar{{Name: "A", Value: "2"}}})
			},
			wantErr: `spec.env[A] and spec.template.spec.containers[0].env[A] differ`,
		},
		{
			name: "conflict: GPU limit",
			mutate: func(tk *gputaskv1.GPUTask) {
				tk.Spec.GPUAmount = ioi(2)
				withTemplate(tk, corev1.Container{Name: "task", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")}}})
			},
			wantErr: `spec.gpu-amount (2) and spec.template.spec.containers[0].resources.limits[nvidia.com/gpu] (4) differ`,
		},
		{
			name: "conflict: GPU request",
			mutate: func(tk *gputaskv1.GPUTask) {
				withTemplate(tk, corev1.Container{Name: "task", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")}}})
			},
			wantErr: `spec.gpu-amount (1) and spec.template.spec.containers[0].resources.requests[nvidia.com/gpu] (4) differ`,
		},
		{
			name: "conflict: cpu",
			mutate: func(tk *gputaskv1.GPUTask) {
				tk.Spec.CPU = ioi(2)
				withTemplate(tk, corev1.Container{Name: "task", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}})
			},
			wantErr: `spec.cpu (2) and spec.template.spec.containers[0].resources.requests[cpu] (500m) differ`,
		},
		{
			name: "conflict: memory",
			mutate: func(tk *gputaskv1.GPUTask) {
				tk.Spec.Memory = ios("8Gi")
				withTemplate(tk, corev1.Container{Name: "task", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("16Gi")}}})
			},
			wantErr: `spec.memory (8Gi) and spec.template.spec.containers[0].resources.limits[memory] (16Gi) differ`,
		},
		{
			name: "conflict: priority",
			mutate: func(tk *gputaskv1.GPUTask) {
				tk.Spec.Priority = "high"
				withTemplate(tk).Spec.PriorityClassName = "low"
			},
			wantErr: `spec.priority (high) and spec.template.spec.priorityClassName (low) differ`,
		},
		{
			name: "conflict: task label",
			mutate: func(tk *gputaskv1.GPUTask) {
				withTemplate(tk).Metadata.Labels = map[string]string{"team": "nlp"}
			},
			wantErr: `metadata.labels[team] (vision) and spec.template.metadata.labels[team] (nlp) differ`,
		},
		{
			name: "owned label",
			mutate: func(tk *gputaskv1.GPUTask) {
				withTemplate(tk).Metadata.Labels = map[string]string{gputaskv1.LabelTask: "x"}
			},
			wantErr: "spec.template.metadata.labels[gputask.io/task]: set by the controller",
		},
		{
			name: "GPUs on a sidecar",
			mutate: func(tk *gputaskv1.GPUTask) {
				withTemplate(tk, corev1.Container{Name: "task"}, corev1.Container{Name: "s", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}})
			},
			wantErr: "spec.template.spec.containers[1].resources: asks for nvidia.com/gpu",
		},
		{
			name: "GPUs on an init container",
			mutate: func(tk *gputaskv1.GPUTask) {
				withTemplate(tk).Spec.InitContainers = []corev1.Container{{Name: "i", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}
			},
			wantErr: "spec.template.spec.initContainers[0].resources: asks for nvidia.com/gpu",
		},
		{
			name: "conflict: GPU model node selector",
			mutate: func(tk *gputaskv1.GPUTask) {
				tk.Spec.GPU = "A100"
				withTemplate(tk).Spec.NodeSelector = map[string]string{"nvidia.com/gpu.product": "H100"}
			},
			wantErr: `spec.template.spec.nodeSelector[nvidia.com/gpu.product] ("H100"): the GPU model is placed by spec.gpu`,
		},
		{
			name: "same GPU model node selector",
			mutate: func(tk *gputaskv1.GPUTask) {
				tk.Spec.GPU = "A100"
				withTemplate(tk).Spec.NodeSelector = map[string]string{"nvidia.com/gpu.product": "A100", "zone": "a"}
			},
			want: func(p *corev1.Pod) {
				p.Spec.NodeSelector = map[string]string{"nvidia.com/gpu.product": "A100", "zone": "a"}
			},
		},
		{
			name: "GPU model in template affinity",
			mutate: func(tk *gputaskv1.GPUTask) {
				withTemplate(tk).Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
					PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 1, Preference: corev1.NodeSelectorTerm{
						MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "nvidia.com/gpu.product", Operator: corev1.NodeSelectorOpExists}},
					}}},
				}}
			},
			wantErr: "spec.template.spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]: uses the GPU model label",
		},
		{
			name: "gpu alternatives: required In, preferred in order",
			mutate: func(tk *gputaskv1.GPUTask) {
				tk.Spec.GPU, tk.Spec.GPUAlternatives = "A100", []string{"H100", "L40S"}
			},
			want: func(p *corev1.Pod) {
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "nvidia.com/gpu.product", Operator: corev1.NodeSelectorOpIn, Values: []string{"A100", "H100", "L40S"}}},
					}}},
					PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
						{Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "nvidia.com/gpu.product", Operator: corev1.NodeSelectorOpIn, Values: []string{"A100"}}}}},
						{Weight: 66, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "nvidia.com/gpu.product", Operator: corev1.NodeSelectorOpIn, Values: []string{"H100"}}}}},
						{Weight: 33, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "nvidia.com/gpu.product", Operator: corev1.NodeSelectorOpIn, Values: []string{"L40S"}}}}},
					},
				}}
			},
		},
		{
			name: "gpu alternatives join every required term of the template",
			mutate: func(tk *gputaskv1.GPUTask) {
				tk.Spec.GPU, tk.Spec.GPUAlternatives = "A100", []string{"H100"}
				withTemplate(tk).Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
						{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}},
						{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}},
					}},
				}}
			},
			want: func(p *corev1.Pod) {
				model := corev1.NodeSelectorRequirement{Key: "nvidia.com/gpu.product", Operator: corev1.NodeSelectorOpIn, Values: []string{"A100", "H100"}}
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
						{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}, model}},
						{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}, model}},
					}},
					PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
						{Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "nvidia.com/gpu.product", Operator: corev1.NodeSelectorOpIn, Values: []string{"A100"}}}}},
						{Weight: 50, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "nvidia.com/gpu.product", Operator: corev1.NodeSelectorOpIn, Values: []string{"H100"}}}}},
					},
				}}
			},
		},
		{
			name:   "GPU taint toleration added",
			opts:   func(o *Options) { o.GPUTaintToleration = true },
			mutate: func(tk *gputaskv1.GPUTask) {},
			want:   func(p *corev1.Pod) { p.Spec.Tolerations = []corev1.Toleration{gpuToleration} },
		},
		{
			name: "template tolerations kept, GPU one added once",
			opts: func(o *Options) { o.GPUTaintToleration = true },
			mutate: func(tk *gputaskv1.GPUTask) {
				withTemplate(tk).Spec.Tolerations = []corev1.Toleration{{Key: "spot", Operator: corev1.TolerationOpExists}, gpuToleration}
			},
			want: func(p *corev1.Pod) {
				p.Spec.Tolerations = []corev1.Toleration{{Key: "spot", Operator: corev1.TolerationOpExists}, gpuToleration}
			},
		},
		{
			name: "template tolerations kept with the flag off",
			mutate: func(tk *gputaskv1.GPUTask) {
				withTemplate(tk).Spec.Tolerations = []corev1.Toleration{{Key: "spot", Operator: corev1.TolerationOpExists}}
			},
			want: func(p *corev1.Pod) {
				p.Spec.Tolerations = []corev1.Toleration{{Key: "spot", Operator: corev1.TolerationOpExists}}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := opts
			if tc.opts != nil {
				tc.opts(&o)
			}
			tk := baseTask()
			tc.mutate(tk)
			before := tk.DeepCopy()
			got, err := Build(tk, o)
			if !equality.Semantic.DeepEqual(before, tk) {
				t.Fatalf("Build() changed the task:\n%s", diff.Diff(before, tk))
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Build() error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Build() unexpected error: %v", err)
			}
			want := basePod()
			if tc.want != nil {
				tc.want(want)
			}
			if !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("Build() mismatch (-want +got):\n%s", diff.Diff(want, got))
			}
		})
	}
}

func TestMainContainer(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  int
	}{
		{nil, -1},
		{[]string{"x"}, 0},
		{[]string{"x", "y"}, 0},
		{[]string{"x", "task"}, 1},
	} {
		spec := &corev1.PodSpec{}
		for _, n := range tc.names {
			spec.Containers = append(spec.Containers, corev1.Container{Name: n})
		}
		if got := MainContainer(spec); got != tc.want {
			t.Errorf("MainContainer(%v) = %d, want %d", tc.names, got, tc.want)
		}
	}
}

func TestPreferenceWeight(t *testing.T) {
	for _, tc := range []struct{ i, n, want int }{{0, 1, 100}, {0, 2, 100}, {1, 2, 50}, {8, 9, 11}, {200, 201, 1}} {
		if got := PreferenceWeight(tc.i, tc.n); got != int32(tc.want) {
			t.Errorf("PreferenceWeight(%d, %d) = %d, want %d", tc.i, tc.n, got, tc.want)
		}
	}
}

func TestUntoleratedTaints(t *testing.T) {
	node := func(name, model string, gpus bool, taints ...corev1.Taint) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"nvidia.com/gpu.product": model}}, Spec: corev1.NodeSpec{Taints: taints}}
		if gpus {
			n.Status.Allocatable = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}
		}
		return n
	}
	gpuTaint := GPUTaint("nvidia.com/gpu")
	spot := corev1.Taint{Key: "spot", Effect: corev1.TaintEffectNoExecute}
	soft := corev1.Taint{Key: "soft", Effect: corev1.TaintEffectPreferNoSchedule}
	nodes := []*corev1.Node{
		node("a", "A100", true, gpuTaint, soft),
		node("h", "H100", true, gpuTaint, spot),
		node("cpu", "", false, corev1.Taint{Key: "cpu-only", Effect: corev1.TaintEffectNoSchedule}),
	}
	for _, tc := range []struct {
		name        string
		models      []string
		tolerations []corev1.Toleration
		want        []string
	}{
		{"any model", nil, nil, []string{"nvidia.com/gpu=present:NoSchedule", "spot:NoExecute"}},
		{"only A100", []string{"A100"}, nil, []string{"nvidia.com/gpu=present:NoSchedule"}},
		{"GPU taint tolerated", []string{"A100", "H100"}, []corev1.Toleration{gpuToleration}, []string{"spot:NoExecute"}},
		{"all tolerated", nil, []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, []string{}},
	} {
		pod := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: tc.tolerations}}
		got := UntoleratedTaints(pod, nodes, "nvidia.com/gpu.product", tc.models, "nvidia.com/gpu")
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: UntoleratedTaints() = %q, want %q", tc.name, got, tc.want)
		}
	}
}
