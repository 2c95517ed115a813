package autoscaler

import (
	"context"
	"fmt"
	"sync"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/gputask/gputask-controller/pkg/lazycache"
)

// DeviceCache gives the capacity count of DRA sets the cluster's
// DeviceClasses, ResourceSlices and ResourceClaims. A running controller's
// is a lazycache.DRA, which runs only while capacity-aware DRA sets read it.
type DeviceCache interface {
	// Devices returns them once their caches have synced.
	Devices(ctx context.Context) (lazycache.Devices, error)
	// Stop stops the caches, if they run.
	Stop()
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
func DeviceFit(ctx context.Context, request resourcev1.DeviceRequest, devices lazycache.Devices, schedulable func(node string) bool) (int64, error) {
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
