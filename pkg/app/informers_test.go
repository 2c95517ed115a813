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
