package controllertest

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/podspec"
)

// Node is a Ready node, as the API holds it.
func Node(name string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
}

// GPUNode is a Ready node with gpus allocatable GPUs of model, under the
// default resource name and label key.
func GPUNode(name, model string, gpus int64) *corev1.Node {
	n := Node(name)
	n.Labels = map[string]string{podspec.DefaultGPULabelKey: model}
	n.Status.Allocatable = corev1.ResourceList{podspec.DefaultGPUResourceName: *resource.NewQuantity(gpus, resource.DecimalSI)}
	return n
}

// GPUPod is a pod in the default namespace, bound to node (none when
// empty), in phase, whose one container asks for gpus GPUs: the limit, and
// the request that API defaulting copies from it.
func GPUPod(name, node string, gpus int64, phase corev1.PodPhase) *corev1.Pod {
	q := corev1.ResourceList{podspec.DefaultGPUResourceName: *resource.NewQuantity(gpus, resource.DecimalSI)}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "main", Resources: corev1.ResourceRequirements{Requests: q, Limits: q.DeepCopy()},
		}}},
		Status: corev1.PodStatus{Phase: phase},
	}
}

// OwnedTask is a task that set controls: in the set's namespace, with the
// set's label and controller reference, and the UID uid-<name>.
func OwnedTask(set *gputaskv1.GPUTaskSet, name string) *gputaskv1.GPUTask {
	return &gputaskv1.GPUTask{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Namespace:       set.Namespace,
			UID:             types.UID("uid-" + name),
			Labels:          map[string]string{gputaskv1.LabelTaskSet: set.Name},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(set, gputaskv1.SchemeGroupVersion.WithKind("GPUTaskSet"))},
		},
	}
}

// NotReadyNode is a node whose Ready condition is Unknown, as when its
// kubelet stopped posting status.
func NotReadyNode(name string) *corev1.Node {
	n := Node(name)
	n.Status.Conditions[0].Status = corev1.ConditionUnknown
	return n
}
