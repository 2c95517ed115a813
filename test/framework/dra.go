package framework

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// DRADriver is the driver of the fake DRA GPUs, and the name of their
// DeviceClass (artifacts/examples/dra/deviceclass.yaml), as NVIDIA's DRA
// driver names them.
const DRADriver = "gpu.nvidia.com"

// NewDRASlice returns the ResourceSlice a DRA driver would publish for
// node: devices GPUs named gpu-0, gpu-1, ..., each with the productName
// model and 80Gi of memory, in a pool named after the node.
func NewDRASlice(node, model string, devices int) *resourcev1.ResourceSlice {
	slice := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + DRADriver},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   DRADriver,
			Pool:     resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			NodeName: ptr.To(node),
		},
	}
	for i := range devices {
		slice.Spec.Devices = append(slice.Spec.Devices, resourcev1.Device{
			Name:       fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"productName": {StringValue: ptr.To(model)}},
			Capacity:   map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}},
		})
	}
	return slice
}

// CreateDRANode creates a fake node whose GPUs are handed out by DRA: no
// extended GPU resource, the GPU model label label (so that tests of the
// extended resource never count it), and the ResourceSlice of NewDRASlice.
// When kwok runs it waits until the node is Ready.
func (cp *ControlPlane) CreateDRANode(ctx context.Context, name, label, model string, devices int) (*corev1.Node, error) {
	node, err := cp.CreateGPUNode(ctx, name, label, 0)
	if err != nil {
		return nil, err
	}
	if _, err := cp.Kube.ResourceV1().ResourceSlices().Create(ctx, NewDRASlice(name, model, devices), metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating the ResourceSlice of %s: %w", name, err)
	}
	return node, nil
}

// DeleteDRANode deletes the node and its ResourceSlice.
func (cp *ControlPlane) DeleteDRANode(ctx context.Context, name string) error {
	if err := cp.Kube.ResourceV1().ResourceSlices().Delete(ctx, name+"-"+DRADriver, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting the ResourceSlice of %s: %w", name, err)
	}
	return cp.DeleteNode(ctx, name)
}
