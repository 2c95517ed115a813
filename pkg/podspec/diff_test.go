package podspec

import (
	"strings"
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// admitted returns what the API server stores for pod: defaults filled in,
// requests copied from limits, the service account token volume mounted and
// the not-ready tolerations appended, a node bound.
func admitted(pod *corev1.Pod) *corev1.Pod {
	p := pod.DeepCopy()
	p.Labels["pod-template-hash"] = "x"
	p.Spec.DNSPolicy = corev1.DNSClusterFirst
	p.Spec.SchedulerName = corev1.DefaultSchedulerName
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
	p.Spec.SecurityContext = &corev1.PodSecurityContext{}
	p.Spec.EnableServiceLinks = ptr.To(true)
	p.Spec.Priority = ptr.To[int32](0)
	p.Spec.NodeName = "gpu-1"
	p.Spec.ServiceAccountName = "default"
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "kube-api-access-x"})
	p.Spec.Tolerations = append(p.Spec.Tolerations,
		corev1.Toleration{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
		corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)})
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
		c.ImagePullPolicy = corev1.PullIfNotPresent
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "kube-api-access-x", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"})
		c.Resources.Requests = corev1.ResourceList{}
		for k, v := range c.Resources.Limits {
			c.Resources.Requests[k] = v
		}
		for j := range c.Ports {
			c.Ports[j].Protocol = corev1.ProtocolTCP
		}
		if c.ReadinessProbe != nil {
			c.ReadinessProbe.PeriodSeconds, c.ReadinessProbe.TimeoutSeconds = 10, 1
			c.ReadinessProbe.HTTPGet.Scheme = corev1.URISchemeHTTP
		}
	}
	return p
}

func richTask() *gputaskv1.GPUTask {
	tk := baseTask()
	tk.Spec.GPU, tk.Spec.GPUAlternatives, tk.Spec.Memory = "A100", []string{"H100"}, ios("16Gi")
	tp := withTemplate(tk, corev1.Container{
		Name: "task", Image: "vllm:1", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8000}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromString("http")}}},
		VolumeMounts:   []corev1.VolumeMount{{Name: "shm", MountPath: "/dev/shm"}},
	})
	tp.Metadata.Annotations = map[string]string{"a": "1"}
	tp.Spec.Volumes = []corev1.Volume{{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}
	return tk
}

func TestFirstDifference(t *testing.T) {
	o := opts
	o.GPUTaintToleration = true
	running, err := Build(richTask(), o)
	if err != nil {
		t.Fatal(err)
	}
	running = admitted(running)

	tests := []struct {
		name   string
		mutate func(*gputaskv1.GPUTask)
		want   string
	}{
		{name: "unchanged spec, defaulted pod", mutate: func(*gputaskv1.GPUTask) {}},
		{name: "image", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.Template.Spec.Containers[0].Image = "vllm:2" }, want: "spec.containers[task].image"},
		{name: "memory", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.Memory = ios("32Gi") }, want: "spec.containers[task].resources.limits[memory]"},
		{name: "same memory written differently", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.Memory = ios("16384Mi") }},
		{name: "gpu amount", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.GPUAmount = ioi(2) }, want: "spec.containers[task].resources.limits[nvidia.com/gpu]"},
		{name: "env added", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.Env = []corev1.EnvVar{{Name: "A", Value: "1"}} }, want: "spec.containers[task].env[A]"},
		{name: "probe path", mutate: func(tk *gputaskv1.GPUTask) {
			tk.Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet.Path = "/ready"
		}, want: "spec.containers[task].readinessProbe.httpGet.path"},
		{name: "gpu alternatives", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.GPUAlternatives = []string{"L40S"} },
			want: "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values[1]"},
		{name: "volume added", mutate: func(tk *gputaskv1.GPUTask) {
			tk.Spec.Template.Spec.Volumes = append(tk.Spec.Template.Spec.Volumes, corev1.Volume{Name: "model"})
		}, want: "spec.volumes[model]"},
		{name: "volume removed", mutate: func(tk *gputaskv1.GPUTask) {
			tk.Spec.Template.Spec.Volumes = nil
			tk.Spec.Template.Spec.Containers[0].VolumeMounts = nil
		}, want: "spec.volumes"},
		{name: "toleration added", mutate: func(tk *gputaskv1.GPUTask) {
			tk.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "spot", Operator: corev1.TolerationOpExists}}
		}, want: "spec.tolerations[0].key"},
		{name: "sidecar added", mutate: func(tk *gputaskv1.GPUTask) {
			tk.Spec.Template.Spec.Containers = append(tk.Spec.Template.Spec.Containers, corev1.Container{Name: "proxy", Image: "envoy"})
		}, want: "spec.containers[proxy]"},
		{name: "annotation", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.Template.Metadata.Annotations["a"] = "2" }, want: "metadata.annotations[a]"},
		{name: "restart policy", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure }, want: "spec.restartPolicy"},
		{name: "service account", mutate: func(tk *gputaskv1.GPUTask) { tk.Spec.Template.Spec.ServiceAccountName = "worker" }, want: "spec.serviceAccountName"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tk := richTask()
			tc.mutate(tk)
			want, err := Build(tk, o)
			if err != nil {
				t.Fatal(err)
			}
			if got := FirstDifference(want, running); got != tc.want {
				t.Errorf("FirstDifference() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFirstDifferenceQuantities(t *testing.T) {
	want := basePod()
	have := basePod()
	have.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"] = *resource.NewQuantity(1, resource.BinarySI)
	if got := FirstDifference(want, have); got != "" {
		t.Errorf("FirstDifference() = %q for equal quantities", got)
	}
}

func TestFirstDifferenceWithoutGPUToleration(t *testing.T) {
	o := opts
	o.GPUTaintToleration = true
	running, err := Build(richTask(), o)
	if err != nil {
		t.Fatal(err)
	}
	o.GPUTaintToleration = false
	want, err := Build(richTask(), o)
	if err != nil {
		t.Fatal(err)
	}
	// A toleration the pod has and the spec no longer asks for is not a
	// difference: admission may have added it.
	if got := FirstDifference(want, admitted(running)); got != "" {
		t.Errorf("FirstDifference() = %q for a pod with one more toleration, want none", got)
	}
	// One the spec asks for and the pod lacks is.
	if got := FirstDifference(running, admitted(want)); got != "spec.tolerations[0]" {
		t.Errorf("FirstDifference() = %q for a pod without the GPU toleration, want spec.tolerations[0]", got)
	}
}

// TestFirstDifferenceQueueMutations: what a queueing system adds to a pod,
// as Kueue does on admission (its ResourceFlavor's tolerations and node
// selector, its scheduling gate, label, annotation and finalizer), is not a
// difference; only what the spec asks for is.
func TestFirstDifferenceQueueMutations(t *testing.T) {
	want, running := richPods(t)
	kueued := running.DeepCopy()
	if kueued.Spec.NodeSelector == nil {
		kueued.Spec.NodeSelector = map[string]string{}
	}
	kueued.Labels["kueue.x-k8s.io/managed"] = "true"
	kueued.Annotations["kueue.x-k8s.io/workload"] = "pod-render-3f1c2"
	kueued.Finalizers = append(kueued.Finalizers, "kueue.x-k8s.io/managed")
	kueued.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/admission"}}
	kueued.Spec.NodeSelector["cloud.example.com/gpu-flavor"] = "a100-spot"
	kueued.Spec.Tolerations = append([]corev1.Toleration{{Key: "spot", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}}, kueued.Spec.Tolerations...)
	if got := FirstDifference(want, kueued); got != "" {
		t.Errorf("FirstDifference() = %q for a pod a queue admitted, want none", got)
	}
	// A spec edit is still found beside them.
	edited := want.DeepCopy()
	edited.Spec.Containers[0].Image = "vllm:2"
	if got := FirstDifference(edited, kueued); got != "spec.containers[task].image" {
		t.Errorf("FirstDifference() = %q, want spec.containers[task].image", got)
	}
	edited = want.DeepCopy()
	edited.Spec.Tolerations = append(edited.Spec.Tolerations, corev1.Toleration{Key: "maintenance", Operator: corev1.TolerationOpExists})
	if got := FirstDifference(edited, kueued); got == "" || !strings.HasPrefix(got, "spec.tolerations") {
		t.Errorf("FirstDifference() = %q for a toleration the pod lacks, want one under spec.tolerations", got)
	}
}

// richPods returns the pod richTask asks for and that pod as the API server
// stores it.
func richPods(t testing.TB) (want, running *corev1.Pod) {
	t.Helper()
	want, err := Build(richTask(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return want, admitted(want)
}

// TestFirstDifferenceLeavesThePodAlone: the running pod comes from an
// informer's cache, which no reader may change, and the token volume and
// not-ready tolerations left out of the comparison stay on it.
func TestFirstDifferenceLeavesThePodAlone(t *testing.T) {
	want, running := richPods(t)
	before := running.DeepCopy()
	if got := FirstDifference(want, running); got != "" {
		t.Fatalf("FirstDifference() = %q, want none", got)
	}
	if !apiequality.Semantic.DeepEqual(before, running) {
		t.Errorf("FirstDifference changed the running pod:\nbefore %+v\nafter  %+v", before.Spec, running.Spec)
	}
}

// TestFirstDifferenceMapKeys reports the first differing key in sorted
// order, whatever the map's iteration order.
func TestFirstDifferenceMapKeys(t *testing.T) {
	want, running := richPods(t)
	want.Annotations = map[string]string{"a": "1", "m": "2", "z": "3", "b": "4"}
	running.Annotations = map[string]string{"a": "1", "m": "x", "z": "y"}
	for range 20 {
		if got := FirstDifference(want, running); got != "metadata.annotations[b]" {
			t.Fatalf("FirstDifference() = %q, want metadata.annotations[b]", got)
		}
	}
}

// BenchmarkFirstDifference is the comparison every sync of a task with a
// pod makes; an up-to-date pod should cost no allocation per field.
func BenchmarkFirstDifference(b *testing.B) {
	want, running := richPods(b)
	b.ReportAllocs()
	for b.Loop() {
		if d := FirstDifference(want, running); d != "" {
			b.Fatal(d)
		}
	}
}
