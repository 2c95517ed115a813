package intern

import (
	"testing"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// same reports whether a and b share their bytes.
func same(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

// decoded is s in memory of its own, as a decoder leaves it.
func decoded(s string) string { return string([]byte(s)) }

func TestMetaSharesRepeatedStrings(t *testing.T) {
	meta := func() *metav1.ObjectMeta {
		return &metav1.ObjectMeta{
			Name: decoded("render-x7k2p"), Namespace: decoded("team-a"), UID: "uid-1",
			Labels:          map[string]string{decoded("gputask.io/taskset"): decoded("render")},
			Annotations:     map[string]string{decoded("gputask.io/pod-spec-hash"): decoded("5d8f9c")},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: decoded("gputask.io/v1"), Kind: decoded("GPUTaskSet"), Name: decoded("render")}},
			Finalizers:      []string{decoded("gputask.io/pod")},
		}
	}
	a, b := meta(), meta()
	Meta(a)
	Meta(b)
	if !same(a.Namespace, b.Namespace) || !same(a.OwnerReferences[0].Kind, b.OwnerReferences[0].Kind) ||
		!same(a.Finalizers[0], b.Finalizers[0]) || !same(a.Labels["gputask.io/taskset"], b.Labels["gputask.io/taskset"]) ||
		!same(a.Annotations["gputask.io/pod-spec-hash"], b.Annotations["gputask.io/pod-spec-hash"]) {
		t.Error("repeated metadata strings not shared")
	}
	for k := range a.Labels {
		for k2 := range b.Labels {
			if !same(k, k2) {
				t.Error("label keys not shared")
			}
		}
	}
	if same(a.Name, b.Name) {
		t.Error("names interned; they are the object's own")
	}
	if a.Labels["gputask.io/taskset"] != "render" || a.Namespace != "team-a" {
		t.Errorf("values changed: %+v", a)
	}
}

func TestLongAndEmptyValuesKept(t *testing.T) {
	long := decoded(string(make([]byte, maxValue+1)))
	if got := String(long); !same(got, long) {
		t.Error("a value over maxValue was interned")
	}
	if String("") != "" || Map(nil) != nil {
		t.Error("empty values changed")
	}
	conds := []metav1.Condition{{Type: decoded("Ready"), Status: metav1.ConditionStatus(decoded("True")), Reason: decoded("PodRunning")}}
	other := []metav1.Condition{{Type: decoded("Ready"), Status: metav1.ConditionStatus(decoded("True")), Reason: decoded("PodRunning")}}
	Conditions(conds)
	Conditions(other)
	if !same(conds[0].Reason, other[0].Reason) || !same(string(conds[0].Status), string(other[0].Status)) {
		t.Error("condition strings not shared")
	}
}
