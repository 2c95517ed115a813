package podspec

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
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
// labels, annotations and map keys. The service account token volume and
// mounts and the not-ready and unreachable tolerations that admission adds
// are ignored.
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
		if d := firstDiff(f.path, "", reflect.ValueOf(f.want), reflect.ValueOf(f.have)); d != "" {
			return d
		}
	}
	return ""
}

func firstDiff(path, name string, want, have reflect.Value) string {
	if want.IsZero() && !(want.Kind() == reflect.Slice && admittedLists[name]) {
		return ""
	}
	if want.Type() == quantityType {
		w, h := want.Interface().(resource.Quantity), have.Interface().(resource.Quantity)
		if w.Cmp(h) != 0 {
			return path
		}
		return ""
	}
	switch want.Kind() {
	case reflect.Pointer:
		if have.IsNil() {
			return path
		}
		return firstDiff(path, name, want.Elem(), have.Elem())
	case reflect.Struct:
		t := want.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			field := jsonName(f)
			sub := path
			if field != "" {
				sub = path + "." + field
			}
			if d := firstDiff(sub, field, want.Field(i), have.Field(i)); d != "" {
				return d
			}
		}
	case reflect.Slice:
		for i := 0; i < want.Len(); i++ {
			w := want.Index(i)
			key := itemName(w)
			h, ok := matchItem(have, key, i)
			if !ok {
				return path + itemPath(key, i)
			}
			if d := firstDiff(path+itemPath(key, i), "", w, h); d != "" {
				return d
			}
		}
		if have.Len() != want.Len() {
			return path
		}
	case reflect.Map:
		keys := want.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		for _, k := range keys {
			sub := fmt.Sprintf("%s[%s]", path, k.String())
			h := have.MapIndex(k)
			if !h.IsValid() {
				return sub
			}
			if d := firstDiff(sub, "", want.MapIndex(k), h); d != "" {
				return d
			}
		}
	default:
		if !want.Equal(have) {
			return path
		}
	}
	return ""
}

// itemName is the name of a list item that has one, such as a container or
// a volume, so that items are matched and reported by name: containers[task].
func itemName(v reflect.Value) string {
	if v.Kind() == reflect.Struct {
		if n := v.FieldByName("Name"); n.IsValid() && n.Kind() == reflect.String {
			return n.String()
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
func withoutAdmittedItems(want, have *corev1.Pod) *corev1.Pod {
	have = have.DeepCopy()
	have.Spec.Volumes = slices.DeleteFunc(have.Spec.Volumes, func(v corev1.Volume) bool {
		return strings.HasPrefix(v.Name, "kube-api-access-") && !slices.ContainsFunc(want.Spec.Volumes, func(w corev1.Volume) bool { return w.Name == v.Name })
	})
	for _, list := range [][]corev1.Container{have.Spec.Containers, have.Spec.InitContainers} {
		for i := range list {
			list[i].VolumeMounts = slices.DeleteFunc(list[i].VolumeMounts, func(m corev1.VolumeMount) bool {
				return strings.HasPrefix(m.Name, "kube-api-access-") && m.MountPath == serviceAccountMountPath
			})
		}
	}
	have.Spec.Tolerations = slices.DeleteFunc(have.Spec.Tolerations, func(t corev1.Toleration) bool {
		added := (t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable) && t.Effect == corev1.TaintEffectNoExecute
		return added && !slices.ContainsFunc(want.Spec.Tolerations, func(w corev1.Toleration) bool { return w.Key == t.Key })
	})
	return have
}

const serviceAccountMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"
