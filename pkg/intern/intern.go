// Package intern keeps one copy of the strings that thousands of cached
// objects repeat. Every object an informer decodes carries its own copy of
// its namespace, its labels, its owner's kind and name, its node and its
// condition reasons; at 10,000 tasks and pods those copies are megabytes of
// the cache. The informers' transforms pass what they keep through here, and
// unique.Make returns one shared copy of each value.
package intern

import (
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxValue is the longest value interned: longer ones (a JSON blob in an
// annotation, a long message) are rarely shared, and each interned value
// costs an entry in unique's map.
const maxValue = 128

// String returns the shared copy of s.
func String(s string) string {
	if s == "" || len(s) > maxValue {
		return s
	}
	return unique.Make(s).Value()
}

// Strings interns each element of list in place.
func Strings(list []string) {
	for i := range list {
		list[i] = String(list[i])
	}
}

// Map returns m with its keys and values interned. The map is rebuilt only
// when it has entries.
func Map(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[String(k)] = String(v)
	}
	return out
}

// Meta interns the shared strings of an object's metadata: namespace,
// generateName, labels, annotations, owners and finalizers. Names and UIDs
// are the object's own and stay as they are.
func Meta(m *metav1.ObjectMeta) {
	m.Namespace = String(m.Namespace)
	m.GenerateName = String(m.GenerateName)
	m.Labels = Map(m.Labels)
	m.Annotations = Map(m.Annotations)
	for i := range m.OwnerReferences {
		o := &m.OwnerReferences[i]
		o.APIVersion, o.Kind, o.Name = String(o.APIVersion), String(o.Kind), String(o.Name)
	}
	Strings(m.Finalizers)
}

// Conditions interns each condition's type, status, reason and message.
func Conditions(conds []metav1.Condition) {
	for i := range conds {
		c := &conds[i]
		c.Type, c.Reason, c.Message = String(c.Type), String(c.Reason), String(c.Message)
		c.Status = metav1.ConditionStatus(String(string(c.Status)))
	}
}
