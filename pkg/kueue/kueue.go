// Package kueue reads Kueue's objects, where Kueue is installed: a waiting
// task's reason from its pod's Workload, and a set's quota from its queues.
//
// The queue's own word on a pod that waits for admission, "insufficient
// unused quota for nvidia.com/gpu in flavor gpu-a100, 2 more needed", is on
// the pod's Workload, not on the pod, whose gate only says that it waits.
// For a set's quota (quota.go) it reads what Workloads reserve and what
// LocalQueues and ClusterQueues allow. It reads them through the
// dynamic client, so the project does not depend on Kueue's module, and
// keeps of each only what it reads: of a Workload its owners, the
// conditions it reads and what its admission reserves. It needs get, list
// and watch on workloads, localqueues and clusterqueues in kueue.x-k8s.io,
// nothing else.
package kueue

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/gputask/gputask-controller/pkg/served"
)

// Group is Kueue's API group.
const Group = "kueue.x-k8s.io"

// versions are the Workload versions read, newest first.
var versions = []string{"v1beta2", "v1beta1"}

// Conditions of a Workload that tell why it waits.
const (
	conditionQuotaReserved = "QuotaReserved"
	conditionAdmitted      = "Admitted"
	conditionEvicted       = "Evicted"
	conditionFinished      = "Finished"
)

// Resource returns the Workload resource of the newest version the API
// server serves, and false when Kueue is not installed. It asks as the
// discovery client does, on rc (a discovery client's RESTClient), but
// gives up when ctx ends.
func Resource(ctx context.Context, rc rest.Interface) (schema.GroupVersionResource, bool, error) {
	for _, v := range versions {
		gv := schema.GroupVersion{Group: Group, Version: v}
		ok, err := served.Resource(ctx, rc, gv, "workloads")
		if err != nil || ok {
			return gv.WithResource("workloads"), ok, err
		}
	}
	return schema.GroupVersionResource{}, false, nil
}

// podIndex indexes Workloads by the UID of each pod that owns them, and
// queueIndex by the ClusterQueue that admitted them.
const (
	podIndex   = "pod"
	queueIndex = "clusterQueue"
)

// Workloads is the cache of Kueue's Workloads, indexed by owner pod.
type Workloads struct {
	informer cache.SharedIndexInformer
}

// NewWorkloads builds the Workload informer of gvr. Nothing is read until
// the informer starts.
func NewWorkloads(client dynamic.Interface, gvr schema.GroupVersionResource, resync time.Duration) (*Workloads, error) {
	inf := dynamicinformer.NewFilteredDynamicInformer(client, gvr, metav1.NamespaceAll, resync,
		cache.Indexers{podIndex: ownerPods, queueIndex: admittedBy}, nil).Informer()
	if err := inf.SetTransform(Trim); err != nil {
		return nil, err
	}
	return &Workloads{informer: inf}, nil
}

// Informer is the Workload informer, to start, wait for and add handlers
// to.
func (w *Workloads) Informer() cache.SharedIndexInformer { return w.informer }

// Waiting returns the reason and message of the Workload of pod while it
// waits for quota or admission; false when pod has no Workload in the
// cache or it is admitted.
func (w *Workloads) Waiting(pod *corev1.Pod) (reason, message string, ok bool) {
	objs, err := w.informer.GetIndexer().ByIndex(podIndex, string(pod.UID))
	if err != nil || len(objs) == 0 {
		return "", "", false
	}
	u, isU := objs[0].(*unstructured.Unstructured)
	if !isU {
		return "", "", false
	}
	return WaitingReason(conditions(u))
}

// OwnerPods returns the namespace and names of the pods that own a
// Workload (or its tombstone).
func OwnerPods(obj any) (namespace string, pods []string) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return "", nil
	}
	for _, o := range u.GetOwnerReferences() {
		if o.Kind == "Pod" && o.APIVersion == "v1" {
			pods = append(pods, o.Name)
		}
	}
	return u.GetNamespace(), pods
}

func ownerPods(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, errors.New("not a Workload")
	}
	var uids []string
	for _, o := range u.GetOwnerReferences() {
		if o.Kind == "Pod" && o.APIVersion == "v1" {
			uids = append(uids, string(o.UID))
		}
	}
	return uids, nil
}

// Trim is the Workload informer's transform: it keeps the name, namespace,
// UID, resourceVersion and owners, the conditions WaitingReason and
// Reserved read, and of an admission its ClusterQueue and each pod set's
// flavors and resource usage.
func Trim(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	out := identity(u)
	out.SetOwnerReferences(u.GetOwnerReferences())
	if conds, found, _ := unstructured.NestedSlice(u.Object, "status", "conditions"); found {
		var kept []any
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok {
				switch m["type"] {
				case conditionQuotaReserved, conditionAdmitted, conditionEvicted, conditionFinished:
					kept = append(kept, map[string]any{"type": m["type"], "status": m["status"], "reason": m["reason"], "message": m["message"]})
				}
			}
		}
		if len(kept) > 0 {
			_ = unstructured.SetNestedSlice(out.Object, kept, "status", "conditions")
		}
	}
	if cq, found, _ := unstructured.NestedString(u.Object, "status", "admission", "clusterQueue"); found {
		_ = unstructured.SetNestedField(out.Object, cq, "status", "admission", "clusterQueue")
		list, _, _ := unstructured.NestedSlice(u.Object, "status", "admission", "podSetAssignments")
		var kept []any
		for _, a := range maps(list) {
			kept = append(kept, map[string]any{"flavors": a["flavors"], "resourceUsage": a["resourceUsage"]})
		}
		_ = unstructured.SetNestedSlice(out.Object, kept, "status", "admission", "podSetAssignments")
	}
	return out, nil
}

// admittedBy indexes a Workload that holds quota by its ClusterQueue.
func admittedBy(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, errors.New("not a Workload")
	}
	if cq, _, _ := unstructured.NestedString(u.Object, "status", "admission", "clusterQueue"); cq != "" && holdsQuota(conditions(u)) {
		return []string{cq}, nil
	}
	return nil, nil
}

// holdsQuota reports whether a Workload with conds has quota reserved and
// has not finished (a finished Workload keeps its admission, but Kueue has
// released its quota).
func holdsQuota(conds []Condition) bool {
	reserved, finished := false, false
	for _, c := range conds {
		switch {
		case c.Type == conditionQuotaReserved && c.Status == string(metav1.ConditionTrue):
			reserved = true
		case c.Type == conditionFinished && c.Status == string(metav1.ConditionTrue):
			finished = true
		}
	}
	return reserved && !finished
}

// Reserved returns, by flavor, how much of r the Workloads in the cache
// that clusterQueue admitted reserve. It is as fresh as the Workloads
// themselves: Kueue reserves a Workload's quota before it lifts its pods'
// gates, and sums the reservations into the ClusterQueue's status later.
func (w *Workloads) Reserved(clusterQueue string, r corev1.ResourceName) map[string]int64 {
	objs, err := w.informer.GetIndexer().ByIndex(queueIndex, clusterQueue)
	if err != nil {
		return nil
	}
	out := map[string]int64{}
	for _, obj := range objs {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		list, _, _ := unstructured.NestedSlice(u.Object, "status", "admission", "podSetAssignments")
		for _, a := range maps(list) {
			flavors, _ := a["flavors"].(map[string]any)
			usage, _ := a["resourceUsage"].(map[string]any)
			if flavor, _ := flavors[string(r)].(string); flavor != "" {
				out[flavor] += quantity(usage[string(r)])
			}
		}
	}
	return out
}

// identity is a copy of u with only its kind, name, namespace, UID and
// resourceVersion: what an informer needs of an object, for the trims to
// add what they read.
func identity(u *unstructured.Unstructured) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: map[string]any{}}
	out.SetAPIVersion(u.GetAPIVersion())
	out.SetKind(u.GetKind())
	out.SetName(u.GetName())
	out.SetNamespace(u.GetNamespace())
	out.SetUID(u.GetUID())
	out.SetResourceVersion(u.GetResourceVersion())
	return out
}

// Condition is the part of a Workload condition WaitingReason reads.
type Condition struct {
	Type, Status, Reason, Message string
}

func conditions(u *unstructured.Unstructured) []Condition {
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var out []Condition
	for _, c := range list {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		s := func(k string) string { v, _ := m[k].(string); return v }
		out = append(out, Condition{Type: s("type"), Status: s("status"), Reason: s("reason"), Message: s("message")})
	}
	return out
}

// WaitingReason is why a Workload with conds waits, in Kueue's words: an
// eviction's reason first (it is why an admitted workload waits again),
// then the QuotaReserved condition's while it is not True, then the
// Admitted condition's. It is false for an admitted workload, and for one
// Kueue has not looked at yet.
func WaitingReason(conds []Condition) (reason, message string, ok bool) {
	find := func(t string) *Condition {
		for i := range conds {
			if conds[i].Type == t {
				return &conds[i]
			}
		}
		return nil
	}
	if a := find(conditionAdmitted); a != nil && a.Status == string(metav1.ConditionTrue) {
		return "", "", false
	}
	if e := find(conditionEvicted); e != nil && e.Status == string(metav1.ConditionTrue) && e.Reason != "" {
		return e.Reason, e.Message, true
	}
	for _, t := range []string{conditionQuotaReserved, conditionAdmitted} {
		if c := find(t); c != nil && c.Status != string(metav1.ConditionTrue) && c.Reason != "" {
			return c.Reason, c.Message, true
		}
	}
	return "", "", false
}
