package tombstone

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestUnwrap(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	for _, tc := range []struct {
		name   string
		obj    any
		wantOK bool
	}{
		{"object", pod, true},
		{"tombstone", cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: pod}, true},
		{"other type", &corev1.Node{}, false},
		{"tombstone of other type", cache.DeletedFinalStateUnknown{Key: "n", Obj: &corev1.Node{}}, false},
		{"nil", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Unwrap[*corev1.Pod](tc.obj)
			if ok != tc.wantOK || (ok && got != pod) {
				t.Fatalf("Unwrap = %v, %v; want pod %v", got, ok, tc.wantOK)
			}
		})
	}
}
