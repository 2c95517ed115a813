package app

import (
	"encoding/json"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

func TestStripManagedFields(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	for _, obj := range []metav1.Object{
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"a": "b"}, ManagedFields: managed}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"a": "b"}, ManagedFields: managed}},
		&gputaskv1.GPUTask{ObjectMeta: metav1.ObjectMeta{Name: "t", Labels: map[string]string{"a": "b"}, ManagedFields: managed}},
	} {
		out, err := StripManagedFields(obj)
		if err != nil {
			t.Fatal(err)
		}
		m := out.(metav1.Object)
		if m.GetManagedFields() != nil || m.GetLabels()["a"] != "b" {
			t.Errorf("%s: managedFields %v, labels %v; want none and the labels kept", m.GetName(), m.GetManagedFields(), m.GetLabels())
		}
	}
	tombstone := cache.DeletedFinalStateUnknown{Key: "ns/p"}
	if out, err := StripManagedFields(tombstone); err != nil || out != any(tombstone) {
		t.Errorf("a tombstone must pass as it is, got %v, %v", out, err)
	}
}

func TestCompactGPUTask(t *testing.T) {
	conds := make([]metav1.Condition, 2, 8)
	conds[0].Type, conds[1].Type = "SpecValid", "Ready"
	task := &gputaskv1.GPUTask{
		ObjectMeta: metav1.ObjectMeta{Name: "t", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		Status:     gputaskv1.GPUTaskStatus{Conditions: conds},
	}
	out, err := compactGPUTask(task)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*gputaskv1.GPUTask)
	if got.ManagedFields != nil || len(got.Status.Conditions) != 2 || cap(got.Status.Conditions) != 2 ||
		got.Status.Conditions[0].Type != "SpecValid" || got.Status.Conditions[1].Type != "Ready" {
		t.Errorf("compacted task: managedFields %v, conditions %v (cap %d)", got.ManagedFields, got.Status.Conditions, cap(got.Status.Conditions))
	}
	set := &gputaskv1.GPUTaskSet{ObjectMeta: metav1.ObjectMeta{Name: "s", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}}}
	if out, err := compactGPUTask(set); err != nil || out.(*gputaskv1.GPUTaskSet).ManagedFields != nil {
		t.Errorf("a set keeps its managedFields: %v, %v", out, err)
	}
}

// TestCompactGPUTaskSharesStrings: two tasks of one set, decoded apart,
// hold one copy of what they repeat once cached.
func TestCompactGPUTaskSharesStrings(t *testing.T) {
	decode := func(name string) *gputaskv1.GPUTask {
		task := &gputaskv1.GPUTask{}
		data := `{"metadata":{"name":"` + name + `","namespace":"team-a","labels":{"gputask.io/taskset":"render"}},
			"spec":{"gpu":"NVIDIA-A100-SXM4-80GB","image":"registry.example/render:1","args":["--serve"]},
			"status":{"phase":"Running","nodeName":"gpu-node-1","conditions":[{"type":"Ready","status":"True","reason":"PodReady","message":"","lastTransitionTime":"2026-11-24T00:00:00Z"}]}}`
		if err := json.Unmarshal([]byte(data), task); err != nil {
			t.Fatal(err)
		}
		out, err := compactGPUTask(task)
		if err != nil {
			t.Fatal(err)
		}
		return out.(*gputaskv1.GPUTask)
	}
	a, b := decode("render-a"), decode("render-b")
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	for what, pair := range map[string][2]string{
		"namespace": {a.Namespace, b.Namespace},
		"label":     {a.Labels["gputask.io/taskset"], b.Labels["gputask.io/taskset"]},
		"gpu":       {a.Spec.GPU, b.Spec.GPU},
		"image":     {a.Spec.Image, b.Spec.Image},
		"arg":       {a.Spec.Args[0], b.Spec.Args[0]},
		"phase":     {string(a.Status.Phase), string(b.Status.Phase)},
		"node":      {a.Status.NodeName, b.Status.NodeName},
		"reason":    {a.Status.Conditions[0].Reason, b.Status.Conditions[0].Reason},
	} {
		if pair[0] != pair[1] || !same(pair[0], pair[1]) {
			t.Errorf("%s: %q and %q are not one shared copy", what, pair[0], pair[1])
		}
	}
}
