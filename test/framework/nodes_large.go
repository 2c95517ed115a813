package framework

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// CreateLargeGPUNode is CreateGPUNode for a node that takes pods pods rather
// than a kubelet's default 110, so that a benchmark of thousands of pods is
// never limited by node capacity.
func (cp *ControlPlane) CreateLargeGPUNode(ctx context.Context, name, gpuModel string, gpus, pods int) (*corev1.Node, error) {
	node := NewGPUNode(name, gpuModel, gpus)
	count := *resource.NewQuantity(int64(pods), resource.DecimalSI)
	node.Status.Capacity[corev1.ResourcePods] = count
	node.Status.Allocatable[corev1.ResourcePods] = count.DeepCopy()
	return cp.createNode(ctx, node)
}
