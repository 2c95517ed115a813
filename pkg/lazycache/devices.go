package lazycache

import (
	"context"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourceinformers "k8s.io/client-go/informers/resource/v1"
	"k8s.io/client-go/kubernetes"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// Devices is what the DRA capacity count reads: the cluster's
// DeviceClasses, ResourceSlices and ResourceClaims.
type Devices struct {
	Classes resourcelisters.DeviceClassLister
	Slices  resourcelisters.ResourceSliceLister
	Claims  resourcelisters.ResourceClaimLister
}

// DRA is the caches of Devices. Like Pods, they hold objects of the whole
// cluster, so they run only from the first evaluation of a capacity-aware
// DRA set until none has come for IdleStop, and keep only what the count
// reads.
type DRA struct {
	classes, slices, claims lazyInformer
}

// NewDRA returns a DRA that lists and watches through client.
func NewDRA(client kubernetes.Interface, resync time.Duration, clk clock.WithDelayedExecution) *DRA {
	return &DRA{
		classes: newLazyInformer("DeviceClass cache", clk, func() cache.SharedIndexInformer {
			return resourceinformers.NewDeviceClassInformer(client, resync, cache.Indexers{})
		}, TrimDeviceClass),
		slices: newLazyInformer("ResourceSlice cache", clk, func() cache.SharedIndexInformer {
			return resourceinformers.NewResourceSliceInformer(client, resync, cache.Indexers{})
		}, TrimResourceSlice),
		claims: newLazyInformer("ResourceClaim cache", clk, func() cache.SharedIndexInformer {
			return resourceinformers.NewResourceClaimInformer(client, metav1.NamespaceAll, resync, cache.Indexers{})
		}, TrimResourceClaim),
	}
}

// Devices starts the caches that do not run, and waits until they have
// synced.
func (d *DRA) Devices(ctx context.Context) (Devices, error) {
	classes, err := d.classes.indexer(ctx)
	if err != nil {
		return Devices{}, err
	}
	slices, err := d.slices.indexer(ctx)
	if err != nil {
		return Devices{}, err
	}
	claims, err := d.claims.indexer(ctx)
	if err != nil {
		return Devices{}, err
	}
	return Devices{
		Classes: resourcelisters.NewDeviceClassLister(classes),
		Slices:  resourcelisters.NewResourceSliceLister(slices),
		Claims:  resourcelisters.NewResourceClaimLister(claims),
	}, nil
}

// Stop stops the caches; a later Devices starts them again.
func (d *DRA) Stop() {
	d.classes.Stop()
	d.slices.Stop()
	d.claims.Stop()
}

// TrimDeviceClass keeps a DeviceClass's name and selectors.
func TrimDeviceClass(obj any) (any, error) {
	c, ok := obj.(*resourcev1.DeviceClass)
	if !ok {
		return obj, nil
	}
	return &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, UID: c.UID, ResourceVersion: c.ResourceVersion},
		Spec:       resourcev1.DeviceClassSpec{Selectors: c.Spec.Selectors},
	}, nil
}

// TrimResourceSlice keeps a slice's driver, pool, node and devices with
// their names, attributes and capacities.
func TrimResourceSlice(obj any) (any, error) {
	s, ok := obj.(*resourcev1.ResourceSlice)
	if !ok {
		return obj, nil
	}
	out := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, UID: s.UID, ResourceVersion: s.ResourceVersion},
		Spec:       resourcev1.ResourceSliceSpec{Driver: s.Spec.Driver, Pool: s.Spec.Pool, NodeName: s.Spec.NodeName},
	}
	out.Spec.Devices = make([]resourcev1.Device, len(s.Spec.Devices))
	for i, d := range s.Spec.Devices {
		out.Spec.Devices[i] = resourcev1.Device{Name: d.Name, Attributes: d.Attributes, Capacity: d.Capacity}
	}
	return out, nil
}

// TrimResourceClaim keeps the devices of a claim's allocation.
func TrimResourceClaim(obj any) (any, error) {
	c, ok := obj.(*resourcev1.ResourceClaim)
	if !ok {
		return obj, nil
	}
	out := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: c.Namespace, UID: c.UID, ResourceVersion: c.ResourceVersion},
	}
	if a := c.Status.Allocation; a != nil {
		results := make([]resourcev1.DeviceRequestAllocationResult, len(a.Devices.Results))
		for i, r := range a.Devices.Results {
			results[i] = resourcev1.DeviceRequestAllocationResult{Driver: r.Driver, Pool: r.Pool, Device: r.Device}
		}
		out.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: results}}
	}
	return out, nil
}
