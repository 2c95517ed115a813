package helm

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	sigsyaml "sigs.k8s.io/yaml"
)

// TestPackingScheduler: the opt-in second scheduler is off by default; on,
// it renders a kube-scheduler Deployment whose pods the controller's
// selector never picks (nor the other way), a configuration whose profile
// is artifacts/scheduler/gputask-pack.yaml's with the values' name and
// weight, and objects the API server accepts.
func TestPackingScheduler(t *testing.T) {
	if strings.Contains(renderT(t, "gputask-controller", "helm-defaults"), "pack-scheduler") {
		t.Error("the default render has the packing scheduler")
	}
	const ns = "helm-pack"
	manifest := renderT(t, "gputask-controller", ns, "--set", "packingScheduler.enabled=true")
	objs := parseObjects(t, manifest)
	const name = "gputask-controller-pack-scheduler"
	dep := into[appsv1.Deployment](t, findObject(t, objs, "Deployment", name))
	ctl := into[appsv1.Deployment](t, findObject(t, objs, "Deployment", "gputask-controller"))
	selects := func(sel *metav1.LabelSelector, l map[string]string) bool {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			t.Fatal(err)
		}
		return s.Matches(labels.Set(l))
	}
	if selects(ctl.Spec.Selector, dep.Spec.Template.Labels) || selects(dep.Spec.Selector, ctl.Spec.Template.Labels) {
		t.Error("the controller's and the scheduler's Deployments select each other's pods")
	}
	if sa := dep.Spec.Template.Spec.ServiceAccountName; sa != name {
		t.Errorf("scheduler ServiceAccount %q, want %q", sa, name)
	}
	for _, kind := range []string{"ServiceAccount", "ConfigMap"} {
		findObject(t, objs, kind, name)
	}
	for _, roleRef := range []string{"system:kube-scheduler", "system:volume-scheduler", "extension-apiserver-authentication-reader", name + "-lease"} {
		found := false
		for _, o := range append(objectsOfKind(objs, "ClusterRoleBinding"), objectsOfKind(objs, "RoleBinding")...) {
			ref, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
			found = found || ref == roleRef
		}
		if !found {
			t.Errorf("no binding to %s", roleRef)
		}
	}

	cm := into[corev1.ConfigMap](t, findObject(t, objs, "ConfigMap", name))
	var rendered, shipped map[string]any
	if err := sigsyaml.Unmarshal([]byte(cm.Data["config.yaml"]), &rendered); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(cp.Root, "artifacts", "scheduler", "gputask-pack.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.Unmarshal(b, &shipped); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rendered["profiles"], shipped["profiles"]) {
		t.Errorf("the chart's profile differs from artifacts/scheduler/gputask-pack.yaml:\n%v\n%v", rendered["profiles"], shipped["profiles"])
	}

	if err := cp.CreateNamespace(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	out, err := cp.KubectlWithInput(context.Background(), []byte(manifest), "apply", "--server-side", "--field-manager=helm-test",
		"--dry-run=server", "--validate=strict", "-f", "-")
	if err != nil {
		t.Fatalf("server dry run: %v\n%s", err, out)
	}
}
