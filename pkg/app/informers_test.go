package app

import (
	"testing"

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
