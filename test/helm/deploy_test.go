package helm

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	sigsyaml "sigs.k8s.io/yaml"
)

// The names artifacts/deploy installs, which a release named
// gputask-controller in gputask-system gets too.
const (
	deployNamespace = "gputask-system"
	deployName      = "gputask-controller"
	containerName   = "controller"
)

// deployObjects is what `kubectl kustomize artifacts/deploy` renders.
func deployObjects(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	return parseObjects(t, cp.KubectlT(t, "kustomize", filepath.Join(cp.Root, "artifacts", "deploy")))
}

// TestSecurityMatchesDeploy: with its defaults, the chart runs the
// controller exactly as artifacts/deploy does in every security setting,
// and grants exactly the same rights.
func TestSecurityMatchesDeploy(t *testing.T) {
	want := deployObjects(t)
	got := parseObjects(t, renderT(t, deployName, deployNamespace))

	// Every kind artifacts/deploy installs (a NetworkPolicy or a
	// PodDisruptionBudget, say) is one the chart installs by default.
	// The namespace and the CRDs are not the chart's to make.
	kinds := map[string]bool{}
	for _, o := range got {
		kinds[o.GetKind()] = true
	}
	for _, o := range want {
		if k := o.GetKind(); k != "Namespace" && k != "CustomResourceDefinition" && !kinds[k] {
			t.Errorf("artifacts/deploy installs %s, the chart's defaults do not", objectName(o))
		}
	}

	wantDep := into[appsv1.Deployment](t, findObject(t, want, "Deployment", deployName))
	gotDep := into[appsv1.Deployment](t, findObject(t, got, "Deployment", deployName))
	wantPod, gotPod := wantDep.Spec.Template.Spec, gotDep.Spec.Template.Spec
	same := func(what string, want, got any) {
		t.Helper()
		if !equality.Semantic.DeepEqual(want, got) {
			t.Errorf("%s: artifacts/deploy has %s, the chart %s", what, toJSON(want), toJSON(got))
		}
	}
	same("replicas", wantDep.Spec.Replicas, gotDep.Spec.Replicas)
	same("pod securityContext", wantPod.SecurityContext, gotPod.SecurityContext)
	same("serviceAccountName", wantPod.ServiceAccountName, gotPod.ServiceAccountName)
	same("hostNetwork", wantPod.HostNetwork, gotPod.HostNetwork)
	same("hostPID", wantPod.HostPID, gotPod.HostPID)
	same("hostIPC", wantPod.HostIPC, gotPod.HostIPC)
	same("shareProcessNamespace", wantPod.ShareProcessNamespace, gotPod.ShareProcessNamespace)
	same("hostUsers", wantPod.HostUsers, gotPod.HostUsers)
	same("volumes", wantPod.Volumes, gotPod.Volumes)
	same("initContainers", wantPod.InitContainers, gotPod.InitContainers)
	same("number of containers", len(wantPod.Containers), len(gotPod.Containers))
	wantC, gotC := container(t, &wantPod), container(t, &gotPod)
	same("container securityContext", wantC.SecurityContext, gotC.SecurityContext)
	same("container resources", wantC.Resources, gotC.Resources)
	same("container volumeMounts", wantC.VolumeMounts, gotC.VolumeMounts)
	same("container ports", portNames(wantC), portNames(gotC))
	same("automountServiceAccountToken (in effect)",
		automountToken(t, want, &wantPod), automountToken(t, got, &gotPod))

	same("ClusterRole rules", ruleSet(into[rbacv1.ClusterRole](t, findObject(t, want, "ClusterRole", deployName)).Rules),
		ruleSet(into[rbacv1.ClusterRole](t, findObject(t, got, "ClusterRole", deployName)).Rules))
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		for _, b := range objectsOfKind(want, kind) {
			wantB := into[rbacv1.RoleBinding](t, b)
			gotB := into[rbacv1.RoleBinding](t, findObject(t, got, kind, b.GetName()))
			same(kind+" "+b.GetName()+" subjects", wantB.Subjects, gotB.Subjects)
			same(kind+" "+b.GetName()+" roleRef", wantB.RoleRef, gotB.RoleRef)
			same(kind+" "+b.GetName()+" namespace", b.GetNamespace(), gotB.Namespace)
		}
	}
	for _, r := range objectsOfKind(want, "Role") {
		gotR := findObject(t, got, "Role", r.GetName())
		same("Role "+r.GetName()+" rules", ruleSet(into[rbacv1.Role](t, r).Rules), ruleSet(into[rbacv1.Role](t, gotR).Rules))
		same("Role "+r.GetName()+" namespace", r.GetNamespace(), gotR.GetNamespace())
	}
	// The NetworkPolicy, if artifacts/deploy has one: the same rules; the
	// chart's pod selector has the release's label too.
	for _, np := range objectsOfKind(want, "NetworkPolicy") {
		wantNP := into[networkingv1.NetworkPolicy](t, np)
		gotNP := into[networkingv1.NetworkPolicy](t, findObject(t, got, np.GetKind(), np.GetName()))
		same("NetworkPolicy policyTypes", wantNP.Spec.PolicyTypes, gotNP.Spec.PolicyTypes)
		same("NetworkPolicy ingress", wantNP.Spec.Ingress, gotNP.Spec.Ingress)
		same("NetworkPolicy egress", wantNP.Spec.Egress, gotNP.Spec.Egress)
		for k, v := range wantNP.Spec.PodSelector.MatchLabels {
			if gotNP.Spec.PodSelector.MatchLabels[k] != v {
				t.Errorf("NetworkPolicy podSelector %v lacks %s=%s", gotNP.Spec.PodSelector.MatchLabels, k, v)
			}
		}
	}
	// The admission policies: the same specs as in artifacts/crds, read from
	// the files themselves (kustomize reflows the folded CEL expressions).
	policies := crdsDirObjects(t)
	if len(objectsOfKind(policies, "ValidatingAdmissionPolicy")) == 0 {
		t.Error("artifacts/crds has no ValidatingAdmissionPolicy")
	}
	for _, p := range objectsOfKind(policies, "ValidatingAdmissionPolicy") {
		same("ValidatingAdmissionPolicy "+p.GetName(),
			into[admissionregistrationv1.ValidatingAdmissionPolicy](t, p).Spec,
			into[admissionregistrationv1.ValidatingAdmissionPolicy](t, findObject(t, got, p.GetKind(), p.GetName())).Spec)
	}
	for _, p := range objectsOfKind(policies, "ValidatingAdmissionPolicyBinding") {
		same("ValidatingAdmissionPolicyBinding "+p.GetName(),
			into[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, p).Spec,
			into[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, findObject(t, got, p.GetKind(), p.GetName())).Spec)
	}
}

// crdsDirObjects parses the YAML files of artifacts/crds but the CRDs.
func crdsDirObjects(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(cp.Root, "artifacts", "crds", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range parseObjects(t, string(data)) {
			if k := o.GetKind(); k != "CustomResourceDefinition" && k != "Kustomization" {
				objs = append(objs, o)
			}
		}
	}
	return objs
}

// TestRBACSecretScopes: rbac.secrets.scope moves the Secret rule of
// artifacts/deploy's ClusterRole into Roles in the listed namespaces, or
// drops it; every other rule stays as it is.
func TestRBACSecretScopes(t *testing.T) {
	deployRules := into[rbacv1.ClusterRole](t, findObject(t, deployObjects(t), "ClusterRole", deployName)).Rules
	var secretRules, otherRules []rbacv1.PolicyRule
	for _, r := range deployRules {
		if slices.Contains(r.Resources, "secrets") {
			secretRules = append(secretRules, r)
		} else {
			otherRules = append(otherRules, r)
		}
	}
	if len(secretRules) == 0 {
		t.Fatal("artifacts/deploy's ClusterRole has no rule on Secrets")
	}
	for _, tc := range []struct {
		scope      string
		namespaces []string
	}{
		{"namespaces", []string{"team-a", "team-b"}},
		{"none", nil},
	} {
		args := []string{"--set", "rbac.secrets.scope=" + tc.scope}
		if tc.namespaces != nil {
			args = append(args, "--set", "rbac.secrets.namespaces={"+strings.Join(tc.namespaces, ",")+"}")
		}
		got := parseObjects(t, renderT(t, deployName, deployNamespace, args...))
		clusterRules := into[rbacv1.ClusterRole](t, findObject(t, got, "ClusterRole", deployName)).Rules
		if a, b := ruleSet(otherRules), ruleSet(clusterRules); !slices.Equal(a, b) {
			t.Errorf("scope %s: ClusterRole rules %v, want artifacts/deploy's without Secrets %v", tc.scope, b, a)
		}
		var secretRoles []string
		for _, o := range objectsOfKind(got, "Role") {
			role := into[rbacv1.Role](t, o)
			if !hasSecretRule(role.Rules) {
				continue
			}
			secretRoles = append(secretRoles, role.Namespace)
			if a, b := ruleSet(secretRules), ruleSet(role.Rules); !slices.Equal(a, b) {
				t.Errorf("scope %s: Role %s/%s rules %v, want artifacts/deploy's Secret rule %v", tc.scope, role.Namespace, role.Name, b, a)
			}
			binding := into[rbacv1.RoleBinding](t, findRoleBinding(t, got, role.Namespace, role.Name))
			want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: deployName, Namespace: deployNamespace}}
			if !equality.Semantic.DeepEqual(binding.Subjects, want) {
				t.Errorf("scope %s: RoleBinding %s/%s subjects %v, want %v", tc.scope, binding.Namespace, binding.Name, binding.Subjects, want)
			}
		}
		sort.Strings(secretRoles)
		if !slices.Equal(secretRoles, tc.namespaces) {
			t.Errorf("scope %s: Roles on Secrets in %v, want %v", tc.scope, secretRoles, tc.namespaces)
		}
	}
}

func findRoleBinding(t *testing.T, objs []*unstructured.Unstructured, namespace, role string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objectsOfKind(objs, "RoleBinding") {
		b := into[rbacv1.RoleBinding](t, o)
		if b.Namespace == namespace && b.RoleRef.Kind == "Role" && b.RoleRef.Name == role {
			return o
		}
	}
	t.Fatalf("no RoleBinding of Role %s/%s", namespace, role)
	return nil
}

// TestFlagsMatchController: every flag the chart passes is one the
// controller binary has, and with the chart's defaults each flag has the
// controller's own default, but for those artifacts/deploy sets too: leader
// election on, its Lease in the controller's namespace, and -v=2.
func TestFlagsMatchController(t *testing.T) {
	known := controllerFlags(t)
	deliberate := map[string]bool{"leader-elect": true, "leader-elect-resource-namespace": true, "v": true}
	covered := map[string]bool{}
	for _, r := range renders {
		objs := parseObjects(t, renderT(t, r.release, r.namespace, r.args...))
		dep := into[appsv1.Deployment](t, findObject(t, objs, "Deployment", ""))
		for _, f := range flagArgs(t, container(t, &dep.Spec.Template.Spec).Args) {
			name, value := f[0], f[1]
			def, ok := known[name]
			if !ok {
				t.Errorf("%s: the chart passes --%s, which the controller does not have", r.name, name)
				continue
			}
			covered[name] = true
			if r.name == "defaults" && !deliberate[name] && !sameFlagValue(value, def) {
				t.Errorf("the chart's default --%s=%s differs from the controller's default %q", name, value, def)
			}
		}
	}
	var extra []string
	for name := range known {
		if !covered[name] {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	t.Logf("flags with no chart value (set them with extraArgs): %s", strings.Join(extra, ", "))
}

// TestRestrictedPodSecurity: the pod of every render is admitted in a
// namespace that enforces the restricted Pod Security Standard, as
// artifacts/deploy's gputask-system does.
func TestRestrictedPodSecurity(t *testing.T) {
	ctx := context.Background()
	ns := "helm-restricted"
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	cp.KubectlT(t, "label", "--overwrite", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted")
	for _, r := range renders {
		objs := parseObjects(t, renderT(t, r.release, r.namespace, r.args...))
		dep := into[appsv1.Deployment](t, findObject(t, objs, "Deployment", ""))
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "chart-pod-", Labels: dep.Spec.Template.Labels},
			Spec:       dep.Spec.Template.Spec,
		}
		// The ServiceAccount of the render is not created here; the
		// standard does not look at it.
		pod.Spec.ServiceAccountName = "default"
		if _, err := cp.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("%s: the chart's pod is refused in a restricted namespace: %v", r.name, err)
		}
	}
}

func container(t *testing.T, pod *corev1.PodSpec) *corev1.Container {
	t.Helper()
	for i := range pod.Containers {
		if pod.Containers[i].Name == containerName {
			return &pod.Containers[i]
		}
	}
	t.Fatalf("no container %q", containerName)
	return nil
}

func portNames(c *corev1.Container) []string {
	var names []string
	for _, p := range c.Ports {
		names = append(names, p.Name)
	}
	return names
}

// automountToken is whether the pod gets its ServiceAccount's token: the
// pod's field, else the ServiceAccount's, else true.
func automountToken(t *testing.T, objs []*unstructured.Unstructured, pod *corev1.PodSpec) bool {
	t.Helper()
	if pod.AutomountServiceAccountToken != nil {
		return *pod.AutomountServiceAccountToken
	}
	sa := into[corev1.ServiceAccount](t, findObject(t, objs, "ServiceAccount", pod.ServiceAccountName))
	return ptr.Deref(sa.AutomountServiceAccountToken, true)
}

// ruleSet turns rules into sorted canonical strings, so that two lists of
// rules compare equal whatever their order and the order within each rule.
func ruleSet(rules []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rules {
		r = *r.DeepCopy()
		for _, s := range [][]string{r.APIGroups, r.Resources, r.ResourceNames, r.Verbs, r.NonResourceURLs} {
			sort.Strings(s)
		}
		out = append(out, toJSON(r))
	}
	sort.Strings(out)
	return out
}

func toJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// TestAlertsMatchMonitoring: the PrometheusRule holds the rule groups of
// artifacts/monitoring/gputask-rules.yaml, the same rules.
func TestAlertsMatchMonitoring(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(cp.Root, "artifacts", "monitoring", "gputask-rules.yaml"))
	if err != nil {
		t.Fatalf("the alerting rules the chart ships: %v", err)
	}
	var want struct {
		Groups []any `json:"groups"`
	}
	if err := sigsyaml.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	if len(want.Groups) == 0 {
		t.Fatal("artifacts/monitoring/gputask-rules.yaml has no rule groups")
	}
	objs := parseObjects(t, renderT(t, deployName, deployNamespace, "--set", "metrics.prometheusRule.enabled=true"))
	rule := findObject(t, objs, "PrometheusRule", deployName)
	got, _, err := unstructured.NestedSlice(rule.Object, "spec", "groups")
	if err != nil {
		t.Fatal(err)
	}
	if toJSON(got) != toJSON(want.Groups) {
		t.Errorf("PrometheusRule groups differ from artifacts/monitoring/gputask-rules.yaml:\n%s\nwant\n%s", toJSON(got), toJSON(want.Groups))
	}
}
