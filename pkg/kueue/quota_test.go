package kueue

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"sigs.k8s.io/yaml"
)

const gpu = "nvidia.com/gpu"

// ClusterQueue is a ClusterQueue with one resource group: each flavor has
// the quota nominal of nvidia.com/gpu (and of cpu), and reserved of it is
// in use. Quantities are written as the API serves them: strings, or
// numbers for plain integers.
func clusterQueue(name string, flavors ...FlavorQuota) *unstructured.Unstructured {
	var specFlavors, reservation []any
	for _, f := range flavors {
		specFlavors = append(specFlavors, map[string]any{"name": f.Flavor, "resources": []any{
			map[string]any{"name": "cpu", "nominalQuota": "64"},
			map[string]any{"name": gpu, "nominalQuota": f.Nominal},
		}})
		reservation = append(reservation, map[string]any{"name": f.Flavor, "resources": []any{
			map[string]any{"name": "cpu", "total": "8"},
			map[string]any{"name": gpu, "total": runtime.DeepCopyJSONValue(f.Reserved), "borrowed": "0"},
		}})
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
		"metadata": map[string]any{"name": name, "uid": "cq-" + name, "resourceVersion": "7", "labels": map[string]any{"team": "a"}},
		"spec": map[string]any{
			"cohortName":     "all",
			"resourceGroups": []any{map[string]any{"coveredResources": []any{"cpu", gpu}, "flavors": specFlavors}},
		},
		"status": map[string]any{"flavorsReservation": reservation, "pendingWorkloads": int64(2)},
	}}
}

func localQueue(namespace, name, clusterQueue string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
		"metadata": map[string]any{"namespace": namespace, "name": name},
		"spec":     map[string]any{"clusterQueue": clusterQueue},
	}}
}

func TestFlavorQuotas(t *testing.T) {
	cq := clusterQueue("team-a", FlavorQuota{Flavor: "a100", Nominal: 4, Reserved: 2}, FlavorQuota{Flavor: "h100", Nominal: 8})
	// Quantities as strings, as a suffix, and one that does not parse.
	groups, _, _ := unstructured.NestedSlice(cq.Object, "spec", "resourceGroups")
	flavors := groups[0].(map[string]any)["flavors"].([]any)
	flavors[1].(map[string]any)["resources"].([]any)[1].(map[string]any)["nominalQuota"] = "8"
	flavors = append(flavors, map[string]any{"name": "broken", "resources": []any{map[string]any{"name": gpu, "nominalQuota": "lots"}}})
	groups[0].(map[string]any)["flavors"] = flavors
	_ = unstructured.SetNestedSlice(cq.Object, groups, "spec", "resourceGroups")

	got := FlavorQuotas(cq, gpu)
	want := []FlavorQuota{{Flavor: "a100", Nominal: 4, Reserved: 2}, {Flavor: "h100", Nominal: 8}, {Flavor: "broken"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FlavorQuotas = %+v, want %+v", got, want)
	}
	if got := FlavorQuotas(cq, "amd.com/gpu"); len(got) != 0 {
		t.Errorf("FlavorQuotas of a resource without quota = %+v, want none", got)
	}
}

func TestQuotaFit(t *testing.T) {
	tests := []struct {
		name      string
		flavors   []FlavorQuota
		perUnit   int64
		fit, free int64
	}{
		{name: "no flavors", perUnit: 1},
		{name: "free quota divided per task", flavors: []FlavorQuota{{Nominal: 4, Reserved: 1}}, perUnit: 2, fit: 1, free: 3},
		{name: "each flavor on its own", flavors: []FlavorQuota{{Nominal: 3}, {Nominal: 3}}, perUnit: 2, fit: 2, free: 6},
		{name: "over-reserved (borrowed) flavor gives nothing", flavors: []FlavorQuota{{Nominal: 2, Reserved: 6}, {Nominal: 4}}, perUnit: 1, fit: 4, free: 4},
		{name: "tasks without GPUs are not counted", flavors: []FlavorQuota{{Nominal: 4}}, perUnit: 0, fit: 0, free: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := Quota{ClusterQueue: "cq", Flavors: tt.flavors}
			if got := q.Fit(tt.perUnit); got != tt.fit {
				t.Errorf("Fit(%d) = %d, want %d", tt.perUnit, got, tt.fit)
			}
			if got := q.Free(); got != tt.free {
				t.Errorf("Free() = %d, want %d", got, tt.free)
			}
		})
	}
}

func TestQuotasFor(t *testing.T) {
	q := newTestQuotas(t,
		localQueue("team-a", "gpus", "team-a-cq"),
		localQueue("team-a", "orphan", "missing"),
		localQueue("team-b", "gpus", "team-b-cq"),
		clusterQueue("team-a-cq", FlavorQuota{Flavor: "a100", Nominal: 4, Reserved: 2}),
		clusterQueue("team-b-cq", FlavorQuota{Flavor: "a100", Nominal: 16}),
	)
	got, ok := q.For("team-a", "gpus", gpu)
	if want := (Quota{ClusterQueue: "team-a-cq", Flavors: []FlavorQuota{{Flavor: "a100", Nominal: 4, Reserved: 2}}}); !ok || !reflect.DeepEqual(got, want) {
		t.Errorf("For(team-a/gpus) = %+v, %v; want %+v", got, ok, want)
	}
	// A LocalQueue is namespaced: team-a's tasks never read team-b's quota.
	if got, ok := q.For("team-b", "gpus", gpu); !ok || got.ClusterQueue != "team-b-cq" {
		t.Errorf("For(team-b/gpus) = %+v, %v; want team-b-cq", got, ok)
	}
	for _, tc := range []struct{ ns, queue string }{{"team-a", "orphan"}, {"team-a", "none"}, {"team-c", "gpus"}} {
		if got, ok := q.For(tc.ns, tc.queue, gpu); ok {
			t.Errorf("For(%s/%s) = %+v, want no quota", tc.ns, tc.queue, got)
		}
	}
	if got, ok := q.For("team-a", "gpus", "amd.com/gpu"); ok {
		t.Errorf("For a resource the queue has no quota of = %+v, want none", got)
	}
}

func TestTrimQueue(t *testing.T) {
	cq := clusterQueue("team-a-cq", FlavorQuota{Flavor: "a100", Nominal: 4, Reserved: 2})
	out, err := TrimQueue(cq)
	if err != nil {
		t.Fatal(err)
	}
	trimmed := out.(*unstructured.Unstructured)
	if trimmed.GetLabels() != nil || trimmed.Object["spec"].(map[string]any)["cohortName"] != nil {
		t.Errorf("TrimQueue kept fields it does not read: %v", trimmed.Object)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(trimmed.Object, "status", "pendingWorkloads"); found {
		t.Errorf("TrimQueue kept status.pendingWorkloads")
	}
	if got, want := FlavorQuotas(trimmed, gpu), FlavorQuotas(cq, gpu); !reflect.DeepEqual(got, want) {
		t.Errorf("quotas after TrimQueue = %+v, want %+v", got, want)
	}
	if trimmed.GetName() != "team-a-cq" || trimmed.GetResourceVersion() != "7" || trimmed.GetUID() != "cq-team-a-cq" {
		t.Errorf("TrimQueue lost the identity: %v", trimmed.Object["metadata"])
	}
	lq, _ := TrimQueue(localQueue("team-a", "gpus", "team-a-cq"))
	if name, _, _ := unstructured.NestedString(lq.(*unstructured.Unstructured).Object, "spec", "clusterQueue"); name != "team-a-cq" {
		t.Errorf("TrimQueue lost spec.clusterQueue: %v", lq)
	}
}

// newTestQuotas is a Quotas whose caches hold objs (LocalQueues and
// ClusterQueues), for tests of what reads it.
func newTestQuotas(t testing.TB, objs ...*unstructured.Unstructured) *Quotas {
	t.Helper()
	q, err := NewQuotas(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), schema.GroupVersion{Group: Group, Version: "v1beta2"}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		inf := q.cluster
		if o.GetKind() == "LocalQueue" {
			inf = q.local
		}
		if err := inf.GetIndexer().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return q
}

// TestQueuesExample reads the Kueue example (artifacts/examples/kueue),
// which a control plane without Kueue's CRDs cannot validate, as Quotas
// reads it: the LocalQueue "gpus" of team-a leads to 4 GPUs of the flavor
// gpu-a100, which hold two 2-GPU tasks.
func TestQueuesExample(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "artifacts", "examples", "kueue", "queues.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	kinds := map[string]bool{}
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("queues.yaml: %v", err)
		}
		if gv := u.GroupVersionKind().GroupVersion(); gv.Group != Group || !slices.Contains(versions, gv.Version) {
			t.Errorf("%s %s: apiVersion %s is not one this controller reads", u.GetKind(), u.GetName(), u.GetAPIVersion())
		}
		kinds[u.GetKind()] = true
		objs = append(objs, u)
	}
	if !kinds["ResourceFlavor"] || !kinds["ClusterQueue"] || !kinds["LocalQueue"] {
		t.Errorf("queues.yaml kinds %v, want a ResourceFlavor, a ClusterQueue and a LocalQueue", kinds)
	}
	var queues []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() != "ResourceFlavor" {
			queues = append(queues, o)
		}
	}
	q, ok := newTestQuotas(t, queues...).For("team-a", "gpus", gpu)
	want := Quota{ClusterQueue: "team-a", Flavors: []FlavorQuota{{Flavor: "gpu-a100", Nominal: 4}}}
	if !ok || !reflect.DeepEqual(q, want) {
		t.Fatalf("For(team-a, gpus) = %+v, %v; want %+v", q, ok, want)
	}
	if n := q.Fit(2); n != 2 {
		t.Errorf("Fit(2) = %d, want 2", n)
	}
}

// admittedWorkload is a Workload of cq with one pod set of gpus GPUs in
// flavor, whose QuotaReserved (and, if finished, Finished) condition is
// True; the rest of the status as Kueue writes it.
func admittedWorkload(name, cq, flavor string, gpus int64, finished bool) *unstructured.Unstructured {
	conds := []any{map[string]any{"type": conditionQuotaReserved, "status": "True", "reason": "QuotaReserved", "message": "Quota reserved in ClusterQueue " + cq}}
	if finished {
		conds = append(conds, map[string]any{"type": conditionFinished, "status": "True", "reason": "Succeeded"})
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
		"metadata": map[string]any{"namespace": "team-a", "name": name, "uid": "wl-" + name},
		"status": map[string]any{
			"conditions": conds,
			"admission": map[string]any{"clusterQueue": cq, "podSetAssignments": []any{map[string]any{
				"name": "main", "count": int64(1),
				"flavors":       map[string]any{"cpu": flavor, gpu: flavor},
				"resourceUsage": map[string]any{"cpu": "4", gpu: runtime.DeepCopyJSONValue(gpus)},
			}}},
		},
	}}
}

// TestQuotaReservedByWorkloads: a ClusterQueue's status lags behind the
// admissions of its Workloads; each flavor's reservation is the larger of
// the two, and a finished Workload (which keeps its admission) or one of
// another ClusterQueue reserves nothing here.
func TestQuotaReservedByWorkloads(t *testing.T) {
	tests := []struct {
		name      string
		status    int64
		workloads []*unstructured.Unstructured
		reserved  int64
	}{
		{name: "status behind the admissions", status: 0,
			workloads: []*unstructured.Unstructured{admittedWorkload("a", "team-a-cq", "a100", 2, false), admittedWorkload("b", "team-a-cq", "a100", 2, false)},
			reserved:  4},
		{name: "status ahead (a Workload not yet in the cache)", status: 4,
			workloads: []*unstructured.Unstructured{admittedWorkload("a", "team-a-cq", "a100", 2, false)},
			reserved:  4},
		{name: "finished and other queues' Workloads do not count", status: 0,
			workloads: []*unstructured.Unstructured{
				admittedWorkload("done", "team-a-cq", "a100", 2, true),
				admittedWorkload("other", "team-b-cq", "a100", 2, false),
				admittedWorkload("h100", "team-a-cq", "h100", 2, false),
			},
			reserved: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := newTestQuotas(t, localQueue("team-a", "gpus", "team-a-cq"), clusterQueue("team-a-cq", FlavorQuota{Flavor: "a100", Nominal: 4, Reserved: tt.status}))
			w, err := NewWorkloads(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), schema.GroupVersionResource{Group: Group, Version: "v1beta2", Resource: "workloads"}, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, wl := range tt.workloads {
				trimmed, err := Trim(wl)
				if err != nil {
					t.Fatal(err)
				}
				if err := w.Informer().GetIndexer().Add(trimmed); err != nil {
					t.Fatal(err)
				}
			}
			q.workloads = w
			got, ok := q.For("team-a", "gpus", gpu)
			if !ok || len(got.Flavors) != 1 || got.Flavors[0].Reserved != tt.reserved {
				t.Fatalf("For = %+v, %v; want a100 with %d reserved", got, ok, tt.reserved)
			}
		})
	}
}
