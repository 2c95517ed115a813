package intern

import (
	"reflect"
	"strconv"
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

func TestMapSharesEqualContent(t *testing.T) {
	a := Map(map[string]string{decoded("gputask.io/taskset"): decoded("render"), "tier": "gpu"})
	b := Map(map[string]string{"tier": decoded("gpu"), decoded("gputask.io/taskset"): "render"})
	if reflect.ValueOf(a).UnsafePointer() != reflect.ValueOf(b).UnsafePointer() {
		t.Error("equal maps not shared")
	}
	c := Map(map[string]string{"gputask.io/taskset": "render", "tier": "cpu"})
	if reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(c).UnsafePointer() || c["tier"] != "cpu" {
		t.Errorf("different maps shared: %v %v", a, c)
	}
	// Keys and values that could run together in the content key.
	d := Map(map[string]string{"a": "b\x00c"})
	e := Map(map[string]string{"a": "b", "c": ""})
	if reflect.DeepEqual(d, e) || len(d) != 1 || len(e) != 2 {
		t.Errorf("maps of different content mixed: %v %v", d, e)
	}
	long := map[string]string{"k": string(make([]byte, maxMapKey))}
	if got := Map(long); !reflect.DeepEqual(got, long) {
		t.Error("a long map changed")
	}
	if _, ok := mapKey(long); ok {
		t.Error("a map over maxMapKey is kept for sharing")
	}
}

// TestSharedMapsBounded proves that objects that each carry their own
// labels leave at most maxSharedMaps maps behind.
func TestSharedMapsBounded(t *testing.T) {
	for i := range 3 * maxSharedMaps {
		Map(map[string]string{"gputask.io/task": "task-" + strconv.Itoa(i)})
	}
	if n := sharedMaps.Len(); n > maxSharedMaps {
		t.Errorf("%d shared maps kept, want at most %d", n, maxSharedMaps)
	}
}
