// Package intern keeps one copy of the strings that thousands of cached
// objects repeat. Every object an informer decodes carries its own copy of
// its namespace, its labels, its owner's kind and name, its node and its
// condition reasons; at 10,000 tasks and pods those copies are megabytes of
// the cache. The informers' transforms pass what they keep through here, and
// unique.Make returns one shared copy of each value. Whole label and
// annotation maps are shared too when objects carry the same one, as the
// tasks of a set and their pods' annotations do.
package intern

import (
	"encoding/binary"
	"slices"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/lru"
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

// Map returns a map equal to m whose keys and values are interned. A map
// whose content was seen lately is returned as the same map, so objects
// that carry equal labels or annotations share one: callers must never
// write to it, as no code may write to an informer's objects anyway. The
// map is rebuilt only when it has entries.
func Map(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	key, shareable := mapKey(m)
	if shareable {
		if v, ok := sharedMaps.Get(key); ok {
			return v.(map[string]string)
		}
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[String(k)] = String(v)
	}
	if shareable {
		sharedMaps.Add(key, out)
	}
	return out
}

// maxSharedMaps bounds the maps kept for sharing: the least recently seen
// content is forgotten (objects keep their maps), so objects that each carry
// their own labels cannot grow it.
const maxSharedMaps = 1024

// maxMapKey is the longest content a shared map may have.
const maxMapKey = 512

var sharedMaps = lru.New(maxSharedMaps)

// mapKey is m's content as one string, and false when it is too long to
// keep for sharing.
func mapKey(m map[string]string) (string, bool) {
	n := 0
	for k, v := range m {
		n += len(k) + len(v)
	}
	if n > maxMapKey {
		return "", false
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	// Each key and value is preceded by its length, so that no two
	// contents read as one.
	b := make([]byte, 0, n+len(m)*4)
	for _, k := range keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(m[k])))
		b = append(b, m[k]...)
	}
	return string(b), true
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
