package podspec

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

var opts = Options{GPUResourceName: "nvidia.com/gpu", GPULabelKey: "nvidia.com/gpu.product", DefaultImage: "busybox:1.36"}

func baseTask() *gputaskv1.GPUTask {
	return &gputaskv1.GPUTask{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ml", UID: "uid-1", Labels: map[string]string{"team": "vision"}},
	}
}

func basePod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "train", Namespace: "ml",
			Labels: map[string]string{"team": "vision", gputaskv1.LabelTask: "train"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "gputask.io/v1", Kind: "GPUTask", Name: "train", UID: "uid-1",
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "task", Image: "busybox:1.36",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}},
			}},
		},
	}
}

func ios(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
func ioi(i int32) *intstr.IntOrString  { v := intstr.FromInt32(i); return &v }

func TestBuild(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*gputaskv1.GPUTask)
		want    func(*corev1.Pod)
		wantErr string
	}{
		{name: "defaults: one GPU, default image"},
		{
			name: "full spec",
			mutate: func(tk *gputaskv1.GPUTask) {
				tk.Spec = gputaskv1.GPUTaskSpec{
					GPU: "NVIDIA-A100-SXM4-80GB", GPUAmount: ios("2"), CPU: ioi(4), Memory: ios("16Gi"),
					Priority: "high", Image: "nvcr.io/nvidia/pytorch:24.01", Command: []string{"python"}, Args: []string{"train.py"},
					Env: []corev1.EnvVar{{Name: "EPOCHS", Value: "3"}},
				}
			},
			want: func(p *corev1.Pod) {
				p.Spec.NodeSelector = map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
				p.Spec.PriorityClassName = "high"
				c := &p.Spec.Containers[0]
				c.Image, c.Command, c.Args = "nvcr.io/nvidia/pytorch:24.01", []string{"python"}, []string{"train.py"}
				c.Env = []corev1.EnvVar{{Name: "EPOCHS", Value: "3"}}
				c.Resources = corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2"), corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")},
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")},
				}
			},
		},
		{name: "gpu-amount as int", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.GPUAmount = ioi(8) }, want: func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"] = resource.MustParse("8")
		}},
		{name: "gpu-amount max", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.GPUAmount = ios("1024") }, want: func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"] = resource.MustParse("1024")
		}},
		{name: "millicpu string", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.CPU = ios("500m") }, want: func(p *corev1.Pod) {
			r := &p.Spec.Containers[0].Resources
			r.Limits[corev1.ResourceCPU] = resource.MustParse("500m")
			r.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}
		}},
		{name: "task label cannot hijack the task label", mutate: func(tk *gputaskv1.GPUTask) { tk.Labels[gputaskv1.LabelTask] = "other" }},
		{name: "gpu-amount 0", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.GPUAmount = ioi(0) }, wantErr: "spec.gpu-amount: 0 is not an integer from 1 to 1024"},
		{name: "gpu-amount too large", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.GPUAmount = ioi(1025) }, wantErr: "spec.gpu-amount"},
		{name: "gpu-amount negative string", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.GPUAmount = ios("-1") }, wantErr: "spec.gpu-amount"},
		{name: "gpu-amount abc", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.GPUAmount = ios("abc") }, wantErr: `spec.gpu-amount: "abc" is not an integer`},
		{name: "gpu-amount fraction", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.GPUAmount = ios("1.5") }, wantErr: "spec.gpu-amount"},
		{name: "bad cpu", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.CPU = ios("two") }, wantErr: `spec.cpu: "two" is not a quantity`},
		{name: "bad memory", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.Memory = ios("16GB!") }, wantErr: `spec.memory: "16GB!" is not a quantity`},
		{name: "negative memory", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.Memory = ios("-1Gi") }, wantErr: "spec.memory: -1Gi is not a positive quantity"},
		{name: "zero cpu", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.CPU = ioi(0) }, wantErr: "spec.cpu: 0 is not a positive quantity"},
		{name: "zero memory string", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.Memory = ios("0Gi") }, wantErr: "spec.memory: 0 is not a positive quantity"},
		{name: "negative int cpu", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.CPU = ioi(-2) }, wantErr: "spec.cpu: -2 is not a positive quantity"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tk := baseTask()
			if tc.mutate != nil {
				tc.mutate(tk)
			}
			got, err := Build(tk, opts)
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

func TestBuildDoesNotAliasTheTask(t *testing.T) {
	tk := baseTask()
	tk.Spec.Command = []string{"a"}
	tk.Spec.Env = []corev1.EnvVar{{Name: "X", Value: "1"}}
	pod, err := Build(tk, opts)
	if err != nil {
		t.Fatal(err)
	}
	pod.Spec.Containers[0].Command[0] = "changed"
	pod.Spec.Containers[0].Env[0].Value = "changed"
	pod.Labels["team"] = "changed"
	if tk.Spec.Command[0] != "a" || tk.Spec.Env[0].Value != "1" || tk.Labels["team"] != "vision" {
		t.Errorf("Build() shares memory with the task: %+v", tk)
	}
}

func TestBuildWithoutImage(t *testing.T) {
	_, err := Build(baseTask(), Options{GPUResourceName: "nvidia.com/gpu"})
	if err == nil || !strings.Contains(err.Error(), "spec.image") {
		t.Fatalf("Build() error = %v, want one naming spec.image", err)
	}
}

func FuzzGPUAmount(f *testing.F) {
	for _, s := range []string{"1", "2", "0", "abc", "-3", "1024", "1025", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := GPUAmount(ios(s))
		if err == nil && (n < 1 || n > MaxGPUAmount) {
			t.Fatalf("GPUAmount(%q) = %d without error", s, n)
		}
	})
}
