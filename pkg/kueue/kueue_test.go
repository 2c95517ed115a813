package kueue

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

const quotaMessage = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu-a100, 2 more needed"

func TestWaitingReason(t *testing.T) {
	tests := []struct {
		name                string
		conds               []Condition
		wantReason, wantMsg string
		wantOK              bool
	}{
		{name: "not looked at yet"},
		{name: "no quota", conds: []Condition{{Type: "QuotaReserved", Status: "False", Reason: "Pending", Message: quotaMessage}},
			wantReason: "Pending", wantMsg: quotaMessage, wantOK: true},
		{name: "quota reserved, waiting for admission checks", conds: []Condition{
			{Type: "QuotaReserved", Status: "True", Reason: "QuotaReserved"},
			{Type: "Admitted", Status: "False", Reason: "NoChecks", Message: "waiting for the provisioning request"},
		}, wantReason: "NoChecks", wantMsg: "waiting for the provisioning request", wantOK: true},
		{name: "admitted", conds: []Condition{{Type: "QuotaReserved", Status: "True", Reason: "QuotaReserved"}, {Type: "Admitted", Status: "True", Reason: "Admitted"}}},
		{name: "evicted and waiting again", conds: []Condition{
			{Type: "QuotaReserved", Status: "False", Reason: "Pending", Message: quotaMessage},
			{Type: "Evicted", Status: "True", Reason: "Preempted", Message: "Preempted to accommodate a workload (UID: 1) in the ClusterQueue"},
		}, wantReason: "Preempted", wantMsg: "Preempted to accommodate a workload (UID: 1) in the ClusterQueue", wantOK: true},
		{name: "a condition without a reason says nothing", conds: []Condition{{Type: "QuotaReserved", Status: "False"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reason, msg, ok := WaitingReason(tc.conds)
			if reason != tc.wantReason || msg != tc.wantMsg || ok != tc.wantOK {
				t.Errorf("WaitingReason = %q, %q, %v; want %q, %q, %v", reason, msg, ok, tc.wantReason, tc.wantMsg, tc.wantOK)
			}
		})
	}
}

var workloadGVR = schema.GroupVersionResource{Group: Group, Version: "v1beta2", Resource: "workloads"}

// workload is a Workload owned by the pod render of UID pod-uid, as Kueue's
// pod integration makes it, with a spec the cache does not keep.
func workload(conds ...map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": Group + "/v1beta2", "kind": "Workload",
		"metadata": map[string]any{"name": "pod-render-3c1f2", "namespace": "team-a", "uid": "wl-uid", "resourceVersion": "5"},
		"spec":     map[string]any{"queueName": "gpu", "podSets": []any{map[string]any{"name": "main", "count": int64(1)}}},
	}}
	u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "render", UID: "pod-uid"}})
	list := make([]any, len(conds))
	for i := range conds {
		list[i] = conds[i]
	}
	_ = unstructured.SetNestedSlice(u.Object, list, "status", "conditions")
	return u
}

func TestWorkloadsWaitingAndTrim(t *testing.T) {
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{workloadGVR: "WorkloadList"})
	w, err := NewWorkloads(client, workloadGVR, 0)
	if err != nil {
		t.Fatal(err)
	}
	wl := workload(
		map[string]any{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": quotaMessage, "lastTransitionTime": "2026-11-24T00:00:00Z"},
		map[string]any{"type": "PodsReady", "status": "False", "reason": "PodsReady"},
	)
	trimmed, err := Trim(wl)
	if err != nil {
		t.Fatal(err)
	}
	got := trimmed.(*unstructured.Unstructured)
	if _, found := got.Object["spec"]; found {
		t.Error("the cached Workload keeps its spec")
	}
	if conds := conditions(got); len(conds) != 1 || conds[0].Type != "QuotaReserved" {
		t.Errorf("cached conditions = %+v, want QuotaReserved only", conds)
	}
	if err := w.Informer().GetIndexer().Add(got); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "render", Namespace: "team-a", UID: "pod-uid"}}
	if reason, msg, ok := w.Waiting(pod); !ok || reason != "Pending" || msg != quotaMessage {
		t.Errorf("Waiting = %q, %q, %v; want Pending and the quota message", reason, msg, ok)
	}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "team-a", UID: "other-uid"}}
	if _, _, ok := w.Waiting(other); ok {
		t.Error("a pod without a Workload is reported waiting")
	}
	if ns, pods := OwnerPods(cache.DeletedFinalStateUnknown{Obj: got}); ns != "team-a" || len(pods) != 1 || pods[0] != "render" {
		t.Errorf("OwnerPods = %q, %v", ns, pods)
	}
}

func TestResource(t *testing.T) {
	served := map[string]string{} // path to APIResourceList
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := served[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	d, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, ok, err := Resource(ctx, d.RESTClient()); ok || err != nil {
		t.Errorf("without Kueue: ok %v, err %v; want false, nil", ok, err)
	}
	served["/apis/kueue.x-k8s.io/v1beta1"] = `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"kueue.x-k8s.io/v1beta1","resources":[{"name":"workloads","namespaced":true,"kind":"Workload","verbs":["get"]}]}`
	if gvr, ok, err := Resource(ctx, d.RESTClient()); !ok || err != nil || gvr.Version != "v1beta1" {
		t.Errorf("Resource = %v, %v, %v; want v1beta1 workloads", gvr, ok, err)
	}
	served["/apis/kueue.x-k8s.io/v1beta2"] = strings.ReplaceAll(served["/apis/kueue.x-k8s.io/v1beta1"], "v1beta1", "v1beta2")
	if gvr, ok, err := Resource(ctx, d.RESTClient()); !ok || err != nil || gvr != workloadGVR {
		t.Errorf("Resource = %v, %v, %v; want %v", gvr, ok, err, workloadGVR)
	}
	// An API server that does not answer: the caller's context ends the wait.
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hang.Close()
	hd, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: hang.URL})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, ok, err := Resource(cctx, hd.RESTClient()); ok || err == nil {
		t.Errorf("with the context ended: ok %v, err %v; want an error", ok, err)
	}
}
