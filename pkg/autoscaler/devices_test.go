package autoscaler

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/lazycache"
)

const (
	a100Model = "NVIDIA A100-SXM4-80GB"
	h100Model = "NVIDIA H100 80GB HBM3"
)

// gpuSlice is the ResourceSlice of node's pool at generation gen, with one
// device per model given, named gpu-0, gpu-1, ..., each with memory.
func gpuSlice(node string, gen int64, memory string, models ...string) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", node, gen)},
		Spec: resourcev1.ResourceSliceSpec{Driver: "gpu.nvidia.com", NodeName: ptr.To(node),
			Pool: resourcev1.ResourcePool{Name: node, Generation: gen, ResourceSliceCount: 1}},
	}
	for i, m := range models {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{
			Name:       fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"productName": {StringValue: ptr.To(m)}},
			Capacity:   map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse(memory)}},
		})
	}
	return s
}

// claimHolding is a claim whose allocation holds the devices of pool.
func claimHolding(name, pool string, devices ...string) *resourcev1.ResourceClaim {
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	a := &resourcev1.AllocationResult{}
	for _, d := range devices {
		a.Devices.Results = append(a.Devices.Results, resourcev1.DeviceRequestAllocationResult{Request: "gpus", Driver: "gpu.nvidia.com", Pool: pool, Device: d})
	}
	c.Status.Allocation = a
	return c
}

var gpuClass = &resourcev1.DeviceClass{
	ObjectMeta: metav1.ObjectMeta{Name: "gpu.nvidia.com"},
	Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
		CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "gpu.nvidia.com"`}}}},
}

func devicesOf(t *testing.T, objs ...any) lazycache.Devices {
	t.Helper()
	classes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	slices := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	claims := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, o := range objs {
		var err error
		switch o.(type) {
		case *resourcev1.DeviceClass:
			err = classes.Add(o)
		case *resourcev1.ResourceSlice:
			err = slices.Add(o)
		case *resourcev1.ResourceClaim:
			err = claims.Add(o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return lazycache.Devices{Classes: resourcelisters.NewDeviceClassLister(classes), Slices: resourcelisters.NewResourceSliceLister(slices),
		Claims: resourcelisters.NewResourceClaimLister(claims)}
}

func selector(expr string) resourcev1.DeviceSelector {
	return resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: expr}}
}

func modelIs(m string) resourcev1.DeviceSelector {
	return selector(fmt.Sprintf(`device.attributes["gpu.nvidia.com"].productName == %q`, m))
}

func exactly(count int64, sels ...resourcev1.DeviceSelector) resourcev1.DeviceRequest {
	return resourcev1.DeviceRequest{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{
		DeviceClassName: "gpu.nvidia.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count, Selectors: sels}}
}

func TestDeviceFit(t *testing.T) {
	a100Node := gpuSlice("a", 1, "80Gi", a100Model, a100Model, a100Model, a100Model)
	h100Node := gpuSlice("h", 1, "80Gi", h100Model, h100Model, h100Model)
	alternatives := resourcev1.DeviceRequest{Name: "gpus", FirstAvailable: []resourcev1.DeviceSubRequest{
		{Name: "model-0", DeviceClassName: "gpu.nvidia.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 2, Selectors: []resourcev1.DeviceSelector{modelIs(a100Model)}},
		{Name: "model-1", DeviceClassName: "gpu.nvidia.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 2, Selectors: []resourcev1.DeviceSelector{modelIs(h100Model)}},
	}}
	tests := []struct {
		name        string
		request     resourcev1.DeviceRequest
		objs        []any
		unscheduled string
		want        int64
		wantErr     string
	}{
		{name: "one model, one device per task", request: exactly(1, modelIs(a100Model)), objs: []any{gpuClass, a100Node, h100Node}, want: 4},
		{name: "devices per task divide per node", request: exactly(3, modelIs(a100Model)), objs: []any{gpuClass, a100Node, gpuSlice("a2", 1, "80Gi", a100Model, a100Model)}, want: 1},
		{name: "any model", request: exactly(1), objs: []any{gpuClass, a100Node, h100Node}, want: 7},
		{name: "allocated devices are not free", request: exactly(1, modelIs(a100Model)),
			objs: []any{gpuClass, a100Node, claimHolding("c1", "a", "gpu-0", "gpu-2"), func() *resourcev1.ResourceClaim {
				c := claimHolding("other-driver", "a", "gpu-1")
				c.Status.Allocation.Devices.Results[0].Driver = "nic.example.com"
				return c
			}()}, want: 2},
		{name: "only the newest generation of a pool counts", request: exactly(1, modelIs(a100Model)),
			objs: []any{gpuClass, gpuSlice("a", 1, "80Gi", a100Model, a100Model, a100Model), gpuSlice("a", 2, "80Gi", a100Model)}, want: 1},
		{name: "firstAvailable counts each model's devices", request: alternatives, objs: []any{gpuClass, a100Node, h100Node}, want: 3},
		{name: "further selectors", request: exactly(1, modelIs(a100Model), selector(`device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0`)),
			objs: []any{gpuClass, a100Node, gpuSlice("small", 1, "24Gi", a100Model)}, want: 4},
		{name: "a selector that fails on a device does not match it", request: exactly(1, selector(`device.attributes["gpu.nvidia.com"].index > 0`)),
			objs: []any{gpuClass, a100Node}, want: 0},
		{name: "the class's selectors apply", request: exactly(1), objs: []any{gpuClass, a100Node, func() *resourcev1.ResourceSlice {
			s := gpuSlice("other", 1, "80Gi", a100Model)
			s.Spec.Driver = "gpu.example.com"
			return s
		}()}, want: 4},
		{name: "cordoned nodes take no new pods", request: exactly(1), objs: []any{gpuClass, a100Node, h100Node}, unscheduled: "a", want: 3},
		{name: "devices of no single node are not counted", request: exactly(1), objs: []any{gpuClass, func() *resourcev1.ResourceSlice {
			s := gpuSlice("net", 1, "80Gi", a100Model)
			s.Spec.NodeName, s.Spec.AllNodes = nil, ptr.To(true)
			return s
		}()}, want: 0},
		{name: "a missing class", request: exactly(1), objs: []any{a100Node}, wantErr: "DeviceClass gpu.nvidia.com"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			got, err := DeviceFit(ctx, tt.request, devicesOf(t, tt.objs...), func(node string) bool { return node != tt.unscheduled })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("DeviceFit error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("DeviceFit = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestTrimDevices(t *testing.T) {
	s := gpuSlice("a", 3, "80Gi", a100Model)
	s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "driver"}}
	s.Spec.Devices[0].Taints = []resourcev1.DeviceTaint{{Key: "k", Effect: resourcev1.DeviceTaintEffectNoSchedule}}
	out, _ := lazycache.TrimResourceSlice(s)
	got := out.(*resourcev1.ResourceSlice)
	if got.ManagedFields != nil || got.Spec.Devices[0].Taints != nil || got.Spec.Pool.Generation != 3 || *got.Spec.NodeName != "a" ||
		*got.Spec.Devices[0].Attributes["productName"].StringValue != a100Model {
		t.Errorf("TrimResourceSlice = %+v", got)
	}
	c := claimHolding("c", "a", "gpu-0")
	c.Spec.Devices.Requests = []resourcev1.DeviceRequest{exactly(1)}
	out, _ = lazycache.TrimResourceClaim(c)
	claim := out.(*resourcev1.ResourceClaim)
	if len(claim.Spec.Devices.Requests) != 0 || !reflect.DeepEqual(claim.Status.Allocation.Devices.Results[0], resourcev1.DeviceRequestAllocationResult{Driver: "gpu.nvidia.com", Pool: "a", Device: "gpu-0"}) {
		t.Errorf("TrimResourceClaim = %+v", claim)
	}
	out, _ = lazycache.TrimDeviceClass(gpuClass)
	if class := out.(*resourcev1.DeviceClass); class.Name != gpuClass.Name || len(class.Spec.Selectors) != 1 {
		t.Errorf("TrimDeviceClass = %+v", class)
	}
}

// TestDeviceFitOverTheLazyCaches: the count reads the trimmed objects of
// a running controller's DRA caches as it reads whole ones.
func TestDeviceFitOverTheLazyCaches(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := kubefake.NewClientset(gpuClass, gpuSlice("a", 1, "80Gi", a100Model, a100Model), claimHolding("c", "a", "gpu-0"))
	d := lazycache.NewDRA(client, 0, testingclock.NewFakeClock(t0))
	t.Cleanup(d.Stop)
	devices, err := d.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fit, err := DeviceFit(ctx, exactly(1), devices, func(string) bool { return true })
	if err != nil || fit != 1 {
		t.Errorf("DeviceFit over the lazy caches = %d, %v; want 1", fit, err)
	}
}

// cachedDevices is a DeviceCache over preloaded listers, for the fixture.
type cachedDevices struct{ devices lazycache.Devices }

func (d cachedDevices) Devices(context.Context) (lazycache.Devices, error) { return d.devices, nil }
func (cachedDevices) Stop()                                                {}

// TestCapacityAwareDRASetStopsAtFreeDevices: a capacity-aware set whose
// tasks ask for GPUs by DRA counts the free matching devices, not the
// nodes' extended resources, plus its tasks already placed.
func TestCapacityAwareDRASetStopsAtFreeDevices(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("web", 1)
	set.Spec.Autoscaling.CapacityAware = true
	set.Spec.Autoscaling.Policy.StepUp = ptr.To[int32](8)
	set.Spec.Template.Spec.GPU = a100Model
	set.Spec.Template.Spec.GPUAllocation = gputaskv1.GPUAllocationDRA
	f.devices = cachedDevices{devicesOf(t, gpuClass, gpuSlice("a", 1, "80Gi", a100Model, a100Model, a100Model, a100Model),
		gpuSlice("h", 1, "80Gi", h100Model, h100Model), claimHolding("web-0-gpus-x", "a", "gpu-0"))}
	// No extended GPUs anywhere: the node-label count would find none.
	f.Add(gpuNode("a", "dra", 0, false), gpuNode("h", "dra", 0, false), task("web-0", set, "a"))
	c := f.autoscale(ctx, set, fakeSource{value: 0.95})

	f.syncOK(ctx, c, "web")
	// 3 free A100s, plus web-0 = 4.
	got := f.lastStatus()
	if f.scaleReplicas != 4 || ptr.Deref(got.Status.CapacityReplicas, -1) != 4 {
		t.Errorf("scale replicas %d, capacityReplicas %v; want 4 and 4", f.scaleReplicas, got.Status.CapacityReplicas)
	}
	if msg := got.Status.LastDecision.Message; !strings.Contains(msg, "only 4 tasks fit the free devices of the ResourceSlices") {
		t.Errorf("decision message %q does not name the devices", msg)
	}
}

// TestCapacityAwareDRASetWithoutTheAPI: where the API server serves no DRA
// the count fails, and says why.
func TestCapacityAwareDRASetWithoutTheAPI(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("web", 1)
	set.Spec.Autoscaling.CapacityAware = true
	set.Spec.Template.Spec.GPUAllocation = gputaskv1.GPUAllocationDRA
	f.Add(set)
	c := f.newController(ctx)
	if _, err := c.capacity(ctx, set); err == nil || !strings.Contains(err.Error(), "serves no resource.k8s.io/v1") {
		t.Errorf("capacity error = %v, want one saying DRA is not served", err)
	}
}
