package kueue

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

// LabelQueueName is the pod label that names the pod's LocalQueue.
const LabelQueueName = "kueue.x-k8s.io/queue-name"

// Quotas is the cache of Kueue's LocalQueues and ClusterQueues, for what a
// queue can still admit. Both are few (one per team and queue), and each
// keeps only the fields FlavorQuotas reads.
type Quotas struct {
	local, cluster cache.SharedIndexInformer
	workloads      *Workloads
}

// NewQuotas builds the LocalQueue and ClusterQueue informers of gv, the
// group version Resource found. Nothing is read until they start.
// workloads, if not nil, adds the reservations of the Workloads to those
// of the ClusterQueue's status, which Kueue updates later.
func NewQuotas(client dynamic.Interface, gv schema.GroupVersion, resync time.Duration, workloads *Workloads) (*Quotas, error) {
	q := &Quotas{
		workloads: workloads,
		local: dynamicinformer.NewFilteredDynamicInformer(client, gv.WithResource("localqueues"), metav1.NamespaceAll, resync,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, nil).Informer(),
		cluster: dynamicinformer.NewFilteredDynamicInformer(client, gv.WithResource("clusterqueues"), metav1.NamespaceAll, resync,
			cache.Indexers{}, nil).Informer(),
	}
	for _, inf := range q.Informers() {
		if err := inf.SetTransform(TrimQueue); err != nil {
			return nil, err
		}
	}
	return q, nil
}

// Informers are the LocalQueue and ClusterQueue informers, to start and
// wait for.
func (q *Quotas) Informers() []cache.SharedIndexInformer {
	return []cache.SharedIndexInformer{q.local, q.cluster}
}

// Quota is what one ClusterQueue can still admit of one resource.
type Quota struct {
	// ClusterQueue is the ClusterQueue's name.
	ClusterQueue string
	// Flavors are the queue's flavors that have a quota for the resource.
	Flavors []FlavorQuota
}

// FlavorQuota is one flavor's nominal quota of a resource and how much of
// it the queue's workloads reserve.
type FlavorQuota struct {
	Flavor            string
	Nominal, Reserved int64
}

// Fit is how many more workloads asking for perUnit of the resource the
// queue admits: each is admitted in one flavor, so each flavor's free quota
// is divided on its own. Borrowing from a cohort is not counted: it
// depends on what the other queues leave unused.
func (q Quota) Fit(perUnit int64) int64 {
	if perUnit <= 0 {
		return 0
	}
	var n int64
	for _, f := range q.Flavors {
		if free := f.Nominal - f.Reserved; free > 0 {
			n += free / perUnit
		}
	}
	return n
}

// Free is the quota not reserved, summed over the flavors.
func (q Quota) Free() int64 {
	var n int64
	for _, f := range q.Flavors {
		n += max(f.Nominal-f.Reserved, 0)
	}
	return n
}

// For returns the quota of r in the ClusterQueue behind the LocalQueue
// localQueue of namespace, each flavor's reservation the larger of the
// ClusterQueue's status and its Workloads' admissions. It is false when
// either queue is not in the cache or the ClusterQueue has no quota for r:
// then the queue sets no limit this controller can count.
func (q *Quotas) For(namespace, localQueue string, r corev1.ResourceName) (Quota, bool) {
	obj, ok, err := q.local.GetIndexer().GetByKey(namespace + "/" + localQueue)
	if err != nil || !ok {
		return Quota{}, false
	}
	lq, isU := obj.(*unstructured.Unstructured)
	if !isU {
		return Quota{}, false
	}
	name, _, _ := unstructured.NestedString(lq.Object, "spec", "clusterQueue")
	if name == "" {
		return Quota{}, false
	}
	obj, ok, err = q.cluster.GetIndexer().GetByKey(name)
	if err != nil || !ok {
		return Quota{}, false
	}
	cq, isU := obj.(*unstructured.Unstructured)
	if !isU {
		return Quota{}, false
	}
	flavors := FlavorQuotas(cq, r)
	if q.workloads != nil {
		// The status lags behind the admissions: a pod whose gate was just
		// lifted would count both as admitted and as quota still free.
		reserved := q.workloads.Reserved(name, r)
		for i := range flavors {
			flavors[i].Reserved = max(flavors[i].Reserved, reserved[flavors[i].Flavor])
		}
	}
	return Quota{ClusterQueue: name, Flavors: flavors}, len(flavors) > 0
}

// FlavorQuotas reads a ClusterQueue's nominal quota of r in each flavor
// (spec.resourceGroups) and what its workloads reserve of it
// (status.flavorsReservation). A quantity that does not parse counts as
// no quota.
func FlavorQuotas(cq *unstructured.Unstructured, r corev1.ResourceName) []FlavorQuota {
	reserved := map[string]int64{}
	usage, _, _ := unstructured.NestedSlice(cq.Object, "status", "flavorsReservation")
	for _, f := range maps(usage) {
		name, _ := f["name"].(string)
		list, _ := f["resources"].([]any)
		for _, res := range maps(list) {
			if res["name"] == string(r) {
				reserved[name] += quantity(res["total"])
			}
		}
	}
	var out []FlavorQuota
	groups, _, _ := unstructured.NestedSlice(cq.Object, "spec", "resourceGroups")
	for _, g := range maps(groups) {
		flavors, _ := g["flavors"].([]any)
		for _, f := range maps(flavors) {
			name, _ := f["name"].(string)
			list, _ := f["resources"].([]any)
			for _, res := range maps(list) {
				if res["name"] == string(r) {
					out = append(out, FlavorQuota{Flavor: name, Nominal: quantity(res["nominalQuota"]), Reserved: reserved[name]})
				}
			}
		}
	}
	return out
}

func maps(list []any) []map[string]any {
	out := make([]map[string]any, 0, len(list))
	for _, v := range list {
		if m, ok := v.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// quantity reads a quantity as the API serves it: a string, or a number
// in JSON. It rounds up, as quota is charged.
func quantity(v any) int64 {
	var s string
	switch t := v.(type) {
	case string:
		s = t
	case int64:
		return t
	case float64:
		s = fmt.Sprint(t)
	default:
		return 0
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0
	}
	return q.Value()
}

// TrimQueue is the LocalQueue and ClusterQueue informers' transform: it
// keeps the identity, a LocalQueue's ClusterQueue, and a ClusterQueue's
// resource groups and reservations.
func TrimQueue(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	out := identity(u)
	for _, path := range [][]string{{"spec", "clusterQueue"}, {"spec", "resourceGroups"}, {"status", "flavorsReservation"}} {
		if v, found, _ := unstructured.NestedFieldNoCopy(u.Object, path...); found {
			_ = unstructured.SetNestedField(out.Object, v, path...)
		}
	}
	return out, nil
}
