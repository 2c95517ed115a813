package framework

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
)

// Labels, annotations and resources of the fake GPU nodes. They match the
// controller's defaults (--gpu-resource-name, --gpu-label-key).
const (
	GPUResourceName    corev1.ResourceName = "nvidia.com/gpu"
	GPUProductLabel                        = "nvidia.com/gpu.product"
	kwokNodeAnnotation                     = "kwok.x-k8s.io/node"
)

const nodeReadyTimeout = 60 * time.Second

// GPUNodeCapacity is the capacity of every fake GPU node besides its GPUs.
var GPUNodeCapacity = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("64"),
	corev1.ResourceMemory: resource.MustParse("512Gi"),
	corev1.ResourcePods:   resource.MustParse("110"),
}

// NewGPUNode returns a fake node for kwok with gpus GPUs of model gpuModel.
func NewGPUNode(name, gpuModel string, gpus int) *corev1.Node {
	capacity := GPUNodeCapacity.DeepCopy()
	capacity[GPUResourceName] = *resource.NewQuantity(int64(gpus), resource.DecimalSI)
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				"type":                   "kwok",
				GPUProductLabel:          gpuModel,
				corev1.LabelHostname:     name,
				corev1.LabelOSStable:     "linux",
				corev1.LabelArchStable:   "amd64",
				"nvidia.com/gpu.count":   strconv.Itoa(gpus),
				"nvidia.com/gpu.present": "true",
			},
			Annotations: map[string]string{kwokNodeAnnotation: "fake"},
		},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
		},
	}
}

// CreateGPUNode creates a fake GPU node (see NewGPUNode) and, when kwok runs,
// waits until kwok has made it Ready. The node never keeps the not-ready
// taint, so the scheduler can place pods on it at once.
func (cp *ControlPlane) CreateGPUNode(ctx context.Context, name, gpuModel string, gpus int) (*corev1.Node, error) {
	return cp.createNode(ctx, NewGPUNode(name, gpuModel, gpus))
}

// createNode creates want, makes sure its resources and taints are as asked,
// and, when kwok runs, waits until kwok has made it Ready.
func (cp *ControlPlane) createNode(ctx context.Context, want *corev1.Node) (*corev1.Node, error) {
	name := want.Name
	nodes := cp.Kube.CoreV1().Nodes()
	if _, err := nodes.Create(ctx, want, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating node %s: %w", name, err)
	}
	if err := cp.ensureNodeResources(ctx, want); err != nil {
		return nil, err
	}
	if err := cp.removeNotReadyTaints(ctx, name); err != nil {
		return nil, err
	}
	if !cp.opts.Kwok {
		return nodes.Get(ctx, name, metav1.GetOptions{})
	}
	return cp.WaitNodeReady(ctx, name)
}

// ensureNodeResources writes capacity and allocatable through the status
// subresource if the create did not keep them.
func (cp *ControlPlane) ensureNodeResources(ctx context.Context, want *corev1.Node) error {
	nodes := cp.Kube.CoreV1().Nodes()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := nodes.Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		gpus := node.Status.Allocatable[GPUResourceName]
		wantGPUs := want.Status.Allocatable[GPUResourceName]
		if gpus.Cmp(wantGPUs) == 0 {
			return nil
		}
		node.Status.Capacity = want.Status.Capacity
		node.Status.Allocatable = want.Status.Allocatable
		_, err = nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("writing the resources of node %s: %w", want.Name, err)
	}
	return nil
}

// removeNotReadyTaints drops the taints a node lifecycle controller would
// manage. None is expected (see the package documentation), but a node that
// keeps one would silently take no pods.
func (cp *ControlPlane) removeNotReadyTaints(ctx context.Context, name string) error {
	nodes := cp.Kube.CoreV1().Nodes()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		kept := node.Spec.Taints[:0:0]
		for _, taint := range node.Spec.Taints {
			if taint.Key != corev1.TaintNodeNotReady && taint.Key != corev1.TaintNodeUnreachable {
				kept = append(kept, taint)
			}
		}
		if len(kept) == len(node.Spec.Taints) {
			return nil
		}
		node.Spec.Taints = kept
		_, err = nodes.Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("removing not-ready taints of node %s: %w", name, err)
	}
	return nil
}

// WaitNodeReady waits until the node's Ready condition is True.
func (cp *ControlPlane) WaitNodeReady(ctx context.Context, name string) (*corev1.Node, error) {
	var node *corev1.Node
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, nodeReadyTimeout, true, func(ctx context.Context) (bool, error) {
		var err error
		node, err = cp.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return NodeReady(node), nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for node %s to be Ready (is kwok running? see %s): %w", name, cp.Dir, err)
	}
	return node, nil
}

// NodeReady reports whether the node's Ready condition is True.
func NodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// DeleteNode deletes a node, ignoring one that is already gone.
func (cp *ControlPlane) DeleteNode(ctx context.Context, name string) error {
	err := cp.Kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting node %s: %w", name, err)
	}
	return nil
}
