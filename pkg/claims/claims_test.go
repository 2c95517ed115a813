package claims

import (
	"context"
	"errors"
	"reflect"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

func TestDevices(t *testing.T) {
	result := func(request, device string) resourcev1.DeviceRequestAllocationResult {
		return resourcev1.DeviceRequestAllocationResult{Request: request, Driver: "gpu.nvidia.com", Pool: "node-1", Device: device}
	}
	claim := func(results ...resourcev1.DeviceRequestAllocationResult) *resourcev1.ResourceClaim {
		c := &resourcev1.ResourceClaim{}
		if results != nil {
			c.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: results}}
		}
		return c
	}
	one := &gputaskv1.GPUTaskSpec{GPU: "A100"}
	alts := &gputaskv1.GPUTaskSpec{GPU: "A100", GPUAlternatives: []string{"H100"}}
	for _, tc := range []struct {
		name        string
		spec        *gputaskv1.GPUTaskSpec
		claim       *resourcev1.ResourceClaim
		wantDevices []string
		wantModel   string
	}{
		{name: "not allocated", spec: one, claim: claim()},
		{name: "one model", spec: one, claim: claim(result("gpus", "gpu-0"), result("gpus", "gpu-1")),
			wantDevices: []string{"gpu.nvidia.com/node-1/gpu-0", "gpu.nvidia.com/node-1/gpu-1"}, wantModel: "A100"},
		{name: "the alternative it got", spec: alts, claim: claim(result("gpus/model-1", "gpu-3")),
			wantDevices: []string{"gpu.nvidia.com/node-1/gpu-3"}, wantModel: "H100"},
		{name: "the template's own claims are not the GPUs", spec: one, claim: claim(result("nic", "mlx-0"), result("gpus", "gpu-0")),
			wantDevices: []string{"gpu.nvidia.com/node-1/gpu-0"}, wantModel: "A100"},
		{name: "any model", spec: &gputaskv1.GPUTaskSpec{}, claim: claim(result("gpus", "gpu-0")),
			wantDevices: []string{"gpu.nvidia.com/node-1/gpu-0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			devices, model := Devices(tc.spec, tc.claim)
			if !reflect.DeepEqual(devices, tc.wantDevices) || model != tc.wantModel {
				t.Errorf("Devices = %v, %q; want %v, %q", devices, model, tc.wantDevices, tc.wantModel)
			}
		})
	}
}

func TestEnsureWithoutDRA(t *testing.T) {
	var templates *Templates
	if err := templates.Ensure(context.Background(), &gputaskv1.GPUTask{}); !errors.Is(err, ErrNotServed) {
		t.Errorf("Ensure without DRA = %v, want ErrNotServed", err)
	}
}
