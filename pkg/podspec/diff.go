package podspec

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
)

var quantityType = reflect.TypeOf(resource.Quantity{})

// admittedLists are the pod lists that admission plugins append to. They
// are compared even when the spec leaves them empty, once the items that
// admission added are taken out of the running pod.
var admittedLists = map[string]bool{"volumes": true, "volumeMounts": true, "tolerations": true}

// FirstDifference compares want, the pod the task's spec asks for now, with
// have, the running pod, and returns the path of the first field that differs,
// such as "spec.containers[task].image", or "" when the pod is up to date.
//
// Only what want sets is compared. What it leaves empty is for the API server
// to default or for admission to fill in (dnsPolicy, schedulerName, requests
// copied from limits, nodeName, priority), and the running pod may carry more
// labels, annotations and map keys (such as the node selector a queueing
// system adds), and more tolerations than the spec asks for. The service
// account token volume and mounts that admission adds are ignored.
func FirstDifference(want, have *corev1.Pod) string {
	have = withoutAdmittedItems(want, have)
	for _, f := range []struct {
		path       string
		want, have any
	}{
		{"metadata.labels", want.Labels, have.Labels},
		{"metadata.annotations", want.Annotations, have.Annotations},
		{"spec", &want.Spec, &have.Spec},
	} {
		if d, ok := firstDiff("", reflect.ValueOf(f.want), reflect.ValueOf(f.have)); ok {
			return f.path + d
		}
	}
	return ""
}

// firstDiff reports whether want and have differ and, if so, the path of the
// first difference below them. The path is built only once a difference is
// found, so comparing equal pods allocates nothing: this runs on every sync
// of every task. name is the JSON name of the field want is.
func firstDiff(name string, want, have reflect.Value) (string, bool) {
	if skipZero(want) && want.IsZero() && !(want.Kind() == reflect.Slice && admittedLists[name]) {
		return "", false
	}
	if want.Type() == quantityType {
		w, h := want.Interface().(resource.Quantity), have.Interface().(resource.Quantity)
		return "", w.Cmp(h) != 0
	}
	switch want.Kind() {
	case reflect.Pointer:
		if have.IsNil() {
			return "", true
		}
		return firstDiff(name, want.Elem(), have.Elem())
	case reflect.Struct:
		for _, f := range typeOf(want.Type()).fields {
			if d, ok := firstDiff(f.name, want.Field(f.index), have.Field(f.index)); ok {
				if f.name != "" {
					d = "." + f.name + d
				}
				return d, true
			}
		}
	case reflect.Slice:
		for i := 0; i < want.Len(); i++ {
			w := want.Index(i)
			key := itemName(w)
			h, ok := matchItem(have, key, i)
			if !ok {
				return itemPath(key, i), true
			}
			if d, ok := firstDiff("", w, h); ok {
				return itemPath(key, i) + d, true
			}
		}
		return "", have.Len() != want.Len()
	case reflect.Map:
		return mapDiff(want, have)
	default:
		return "", !want.Equal(have)
	}
	return "", false
}

// skipZero says whether a zero want is worth looking for: it always is but
// for a struct, where IsZero walks every field and the fields are walked
// anyway, unless the struct holds a list that admission appends to.
func skipZero(want reflect.Value) bool {
	return want.Kind() != reflect.Struct || want.Type() == quantityType || typeOf(want.Type()).admittedList
}

// mapDiff compares the keys want sets, and reports the first differing key
// in sorted order, so the path does not depend on map iteration.
func mapDiff(want, have reflect.Value) (string, bool) {
	var differ []reflect.Value
	for it := want.MapRange(); it.Next(); {
		h := have.MapIndex(it.Key())
		if !h.IsValid() {
			differ = append(differ, it.Key())
			continue
		}
		if _, ok := firstDiff("", it.Value(), h); ok {
			differ = append(differ, it.Key())
		}
	}
	if len(differ) == 0 {
		return "", false
	}
	k := slices.MinFunc(differ, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
	sub := "[" + k.String() + "]"
	h := have.MapIndex(k)
	if !h.IsValid() {
		return sub, true
	}
	d, _ := firstDiff("", want.MapIndex(k), h)
	return sub + d, true
}

// structInfo is what firstDiff needs of a struct type, worked out once.
type structInfo struct {
	// fields are the exported fields and their JSON names.
	fields []field
	// nameIndex is the index of a string field Name, or -1.
	nameIndex int
	// admittedList says a field is a list admission appends to.
	admittedList bool
}

type field struct {
	index int
	name  string
}

var structInfos sync.Map // reflect.Type -> *structInfo

func typeOf(t reflect.Type) *structInfo {
	if info, ok := structInfos.Load(t); ok {
		return info.(*structInfo)
	}
	info := &structInfo{nameIndex: -1}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		info.fields = append(info.fields, field{index: i, name: jsonName(f)})
		info.admittedList = info.admittedList || admittedLists[jsonName(f)]
		if f.Name == "Name" && f.Type.Kind() == reflect.String {
			info.nameIndex = i
		}
	}
	structInfos.Store(t, info)
	return info
}

// itemName is the name of a list item that has one, such as a container or
// a volume, so that items are matched and reported by name: containers[task].
func itemName(v reflect.Value) string {
	if v.Kind() == reflect.Struct {
		if i := typeOf(v.Type()).nameIndex; i >= 0 {
			return v.Field(i).String()
		}
	}
	return ""
}

// matchItem finds the item of list that is named key, or at position i when
// the item has no name.
func matchItem(list reflect.Value, key string, i int) (reflect.Value, bool) {
	if key == "" {
		if i < list.Len() {
			return list.Index(i), true
		}
		return reflect.Value{}, false
	}
	for j := 0; j < list.Len(); j++ {
		if itemName(list.Index(j)) == key {
			return list.Index(j), true
		}
	}
	return reflect.Value{}, false
}

func itemPath(key string, i int) string {
	if key != "" {
		return "[" + key + "]"
	}
	return fmt.Sprintf("[%d]", i)
}

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "" && !f.Anonymous {
		return f.Name
	}
	return name
}

// withoutAdmittedItems returns have without the items that the ServiceAccount
// and DefaultTolerationSeconds admission plugins add, unless want has them too.
//
// have comes from an informer's cache and is never changed: lists that lose
// items are copied, the rest is shared.
func withoutAdmittedItems(want, have *corev1.Pod) *corev1.Pod {
	out := *have
	out.Spec.Volumes = without(have.Spec.Volumes, func(v corev1.Volume) bool {
		return strings.HasPrefix(v.Name, "kube-api-access-") && !slices.ContainsFunc(want.Spec.Volumes, func(w corev1.Volume) bool { return w.Name == v.Name })
	})
	out.Spec.Containers = withoutTokenMounts(have.Spec.Containers)
	out.Spec.InitContainers = withoutTokenMounts(have.Spec.InitContainers)
	out.Spec.Tolerations = without(have.Spec.Tolerations, func(t corev1.Toleration) bool {
		added := (t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable) && t.Effect == corev1.TaintEffectNoExecute
		return added && !slices.ContainsFunc(want.Spec.Tolerations, func(w corev1.Toleration) bool { return w.Key == t.Key })
	})
	// Admission and queueing systems add tolerations too (a Kueue
	// ResourceFlavor's, say): a pod that has every toleration the spec asks
	// for is up to date, whatever else it tolerates.
	if containsAll(out.Spec.Tolerations, want.Spec.Tolerations) {
		out.Spec.Tolerations = want.Spec.Tolerations
	}
	return &out
}

// containsAll reports whether every toleration of want is in have.
func containsAll(have, want []corev1.Toleration) bool {
	for i := range want {
		if !slices.ContainsFunc(have, func(h corev1.Toleration) bool { return equality.Semantic.DeepEqual(h, want[i]) }) {
			return false
		}
	}
	return true
}

func withoutTokenMounts(containers []corev1.Container) []corev1.Container {
	isToken := func(m corev1.VolumeMount) bool {
		return strings.HasPrefix(m.Name, "kube-api-access-") && m.MountPath == serviceAccountMountPath
	}
	if !slices.ContainsFunc(containers, func(c corev1.Container) bool { return slices.ContainsFunc(c.VolumeMounts, isToken) }) {
		return containers
	}
	out := slices.Clone(containers)
	for i := range out {
		out[i].VolumeMounts = without(out[i].VolumeMounts, isToken)
	}
	return out
}

// without returns list without the items drop matches, in a new slice when
// there are any, so that list itself is never changed.
func without[T any](list []T, drop func(T) bool) []T {
	if !slices.ContainsFunc(list, drop) {
		return list
	}
	return slices.DeleteFunc(slices.Clone(list), drop)
}

const serviceAccountMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"
