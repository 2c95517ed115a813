package autoscaler

import (
	"context"
	"fmt"
	"sync"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	resourceinformers "k8s.io/client-go/informers/resource/v1"
	"k8s.io/client-go/kubernetes"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/clock"
)

// DeviceCache gives the capacity count of DRA sets the cluster's
// DeviceClasses, ResourceSlices and ResourceClaims.
type DeviceCache interface {
	// Devices returns them once their caches have synced.
	Devices(ctx context.Context) (Devices, error)
	// Stop stops the caches, if they run.
	Stop()
}

// Devices is what the DRA capacity count reads.
type Devices struct {
	Classes resourcelisters.DeviceClassLister
	Slices  resourcelisters.ResourceSliceLister
	Claims  resourcelisters.ResourceClaimLister
}

// LazyDevices is the DeviceCache of a running controller. Like LazyPods, its
// caches hold objects of the whole cluster, so they run only from the first
// evaluation of a capacity-aware DRA set until none has come for
// PodCacheIdleStop, and keep only what the count reads.
type LazyDevices struct {
	classes, slices, claims lazyInformer
}

// NewLazyDevices returns a LazyDevices that lists and watches through client.
func NewLazyDevices(client kubernetes.Interface, resync time.Duration, clk clock.WithDelayedExecution) *LazyDevices {
	lazy := func(what string, newInformer func() cache.SharedIndexInformer, trim cache.TransformFunc) lazyInformer {
		return lazyInformer{what: what, clock: clk, newInformer: func() cache.SharedIndexInformer {
			informer := newInformer()
			// The informer has not started, so the transform is always accepted.
			_ = informer.SetTransform(trim)
			return informer
		}}
	}
	return &LazyDevices{
		classes: lazy("DeviceClass cache", func() cache.SharedIndexInformer {
			return resourceinformers.NewDeviceClassInformer(client, resync, cache.Indexers{})
		}, TrimDeviceClass),
		slices: lazy("ResourceSlice cache", func() cache.SharedIndexInformer {
			return resourceinformers.NewResourceSliceInformer(client, resync, cache.Indexers{})
		}, TrimResourceSlice),
		claims: lazy("ResourceClaim cache", func() cache.SharedIndexInformer {
			return resourceinformers.NewResourceClaimInformer(client, metav1.NamespaceAll, resync, cache.Indexers{})
		}, TrimResourceClaim),
	}
}

// Devices starts the caches that do not run, and waits until they have
// synced.
func (d *LazyDevices) Devices(ctx context.Context) (Devices, error) {
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
func (d *LazyDevices) Stop() {
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

// deviceID names a device as an allocation result does.
type deviceID struct{ driver, pool, device string }

// deviceEntry is one way a request can be met: count devices of a class
// that match the class's selectors and the entry's own.
type deviceEntry struct {
	count     int64
	selectors []dracel.CompilationResult
}

// celCache keeps the compiled selectors of the DeviceClasses and templates
// the count evaluates every interval. It is made on first use: a cluster
// without capacity-aware DRA sets never builds the CEL environment.
var celCache = sync.OnceValue(func() *dracel.Cache { return dracel.NewCache(256, dracel.Features{}) })

// deviceEntries are the ways request can be met (its exact request, or its
// firstAvailable list in order), with their selectors compiled.
func deviceEntries(request resourcev1.DeviceRequest, classes resourcelisters.DeviceClassLister) ([]deviceEntry, error) {
	var subs []resourcev1.DeviceSubRequest
	if e := request.Exactly; e != nil {
		subs = []resourcev1.DeviceSubRequest{{DeviceClassName: e.DeviceClassName, Count: e.Count, Selectors: e.Selectors}}
	}
	subs = append(subs, request.FirstAvailable...)
	entries := make([]deviceEntry, 0, len(subs))
	for _, sub := range subs {
		class, err := classes.Get(sub.DeviceClassName)
		if err != nil {
			return nil, fmt.Errorf("DeviceClass %s: %w", sub.DeviceClassName, err)
		}
		entry := deviceEntry{count: max(sub.Count, 1)}
		for _, sel := range append(append([]resourcev1.DeviceSelector{}, class.Spec.Selectors...), sub.Selectors...) {
			if sel.CEL == nil {
				continue
			}
			compiled := celCache().GetOrCompile(sel.CEL.Expression)
			if compiled.Error != nil {
				return nil, fmt.Errorf("selector %q: %s", sel.CEL.Expression, compiled.Error.Detail)
			}
			entry.selectors = append(entry.selectors, compiled)
		}
		entries = append(entries, entry)
	}
	return entries, nil
}

// DeviceFit counts the tasks, each asking for request, that the free
// devices of the cluster hold: on each node that takes new pods, each
// device of the newest generation of its pool that no claim's allocation
// holds counts for the first entry of request it matches (as the
// scheduler tries firstAvailable in order), and each entry's devices are
// divided by its count. Devices that are not local to one node are not
// counted. A selector that fails on a device does not match it.
func DeviceFit(ctx context.Context, request resourcev1.DeviceRequest, devices Devices, schedulable func(node string) bool) (int64, error) {
	entries, err := deviceEntries(request, devices.Classes)
	if err != nil {
		return 0, err
	}
	slices, err := devices.Slices.List(labels.Everything())
	if err != nil {
		return 0, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	claims, err := devices.Claims.List(labels.Everything())
	if err != nil {
		return 0, fmt.Errorf("listing ResourceClaims: %w", err)
	}
	allocated := sets.New[deviceID]()
	for _, c := range claims {
		if a := c.Status.Allocation; a != nil {
			for _, r := range a.Devices.Results {
				allocated.Insert(deviceID{r.Driver, r.Pool, r.Device})
			}
		}
	}
	type poolKey struct{ driver, pool string }
	newest := map[poolKey]int64{}
	for _, s := range slices {
		k := poolKey{s.Spec.Driver, s.Spec.Pool.Name}
		newest[k] = max(newest[k], s.Spec.Pool.Generation)
	}
	free := map[string][]int64{} // node → free devices per entry
	for _, s := range slices {
		node := ""
		if s.Spec.NodeName != nil {
			node = *s.Spec.NodeName
		}
		if node == "" || s.Spec.Pool.Generation != newest[poolKey{s.Spec.Driver, s.Spec.Pool.Name}] || !schedulable(node) {
			continue
		}
		for _, d := range s.Spec.Devices {
			if allocated.Has(deviceID{s.Spec.Driver, s.Spec.Pool.Name, d.Name}) {
				continue
			}
			input := dracel.Device{Driver: s.Spec.Driver, Attributes: d.Attributes, Capacity: d.Capacity}
			for i, e := range entries {
				if matchesAll(ctx, e.selectors, input) {
					if free[node] == nil {
						free[node] = make([]int64, len(entries))
					}
					free[node][i]++
					break
				}
			}
		}
	}
	var fit int64
	for _, perEntry := range free {
		for i, n := range perEntry {
			fit += n / entries[i].count
		}
	}
	return fit, nil
}

func matchesAll(ctx context.Context, selectors []dracel.CompilationResult, d dracel.Device) bool {
	for _, s := range selectors {
		if ok, _, err := s.DeviceMatches(ctx, d); err != nil || !ok {
			return false
		}
	}
	return true
}
