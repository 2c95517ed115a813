package autoscaler

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/gputask/gputask-controller/pkg/lazycache"
)

func TestTrimPodKeepsWhatTheCapacityCountReads(t *testing.T) {
	gpus := func(n string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{
			Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(n)},
			Limits:   corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(n)},
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "p", Namespace: "ns", UID: "uid", ResourceVersion: "9",
			Labels:        map[string]string{"app": "x"},
			Annotations:   map[string]string{"big": "annotation"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		},
		Spec: corev1.PodSpec{
			NodeName: "gpu-1",
			InitContainers: []corev1.Container{
				{Name: "sidecar", Image: "s", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways), Resources: gpus("1")},
				{Name: "setup", Image: "i", Resources: gpus("4")},
			},
			Containers: []corev1.Container{{Name: "main", Image: "m", Env: []corev1.EnvVar{{Name: "A", Value: "b"}}, Resources: gpus("2")}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady}}},
	}
	out, err := lazycache.TrimPod(pod.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	trimmed := out.(*corev1.Pod)
	if got, want := podGPUs(trimmed, "nvidia.com/gpu"), podGPUs(pod, "nvidia.com/gpu"); got != want || want != 5 {
		t.Errorf("GPUs of the trimmed pod = %d, of the pod %d; want both 5", got, want)
	}
	if key, _ := cache.MetaNamespaceKeyFunc(trimmed); key != "ns/p" || trimmed.ResourceVersion != "9" || trimmed.Spec.NodeName != "gpu-1" || trimmed.Status.Phase != corev1.PodRunning {
		t.Errorf("trimmed pod lost its key, version, node or phase: %+v", trimmed)
	}
	if trimmed.Labels != nil || trimmed.Annotations != nil || trimmed.ManagedFields != nil ||
		trimmed.Spec.Containers[0].Image != "" || trimmed.Spec.Containers[0].Env != nil || trimmed.Status.Conditions != nil {
		t.Errorf("trimmed pod kept fields the count does not read: %+v", trimmed)
	}

	tombstone := cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: pod}
	if out, _ := lazycache.TrimPod(tombstone); out != any(tombstone) {
		t.Errorf("a tombstone must pass as it is, got %v", out)
	}
}
