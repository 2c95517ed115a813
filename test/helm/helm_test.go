// Package helm tests the Helm chart in charts/gputask-controller with
// bin/helm against a real kube-apiserver. It checks lint, the values schema,
// renders that a server-side dry run accepts, install, upgrade and
// uninstall, and that the chart grants and runs exactly what
// artifacts/deploy does. No
// image registry is reachable and no kubelet runs, so the Deployment never
// gets pods: the tests check objects, not pods.
package helm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	sigsyaml "sigs.k8s.io/yaml"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/generated/clientset/versioned"
	"github.com/gputask/gputask-controller/test/framework"
)

// cp is the package's control plane: kube-apiserver and etcd only, without
// the gputask.io CRDs, which the chart installs.
var cp *framework.ControlPlane

func TestMain(m *testing.M) {
	framework.RunMain(m, framework.Options{SkipCRDs: true}, func(ctx context.Context, started *framework.ControlPlane) error {
		cp = started
		if err := requireHelm(cp.BinDir); err != nil {
			return err
		}
		// The Prometheus Operator's CRDs, so that the API server validates
		// the chart's ServiceMonitor and PrometheusRule.
		dir := testdata("prometheus-operator")
		if _, err := cp.Kubectl(ctx, "apply", "--server-side", "-f", dir); err != nil {
			return err
		}
		_, err := cp.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s",
			"crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")
		return err
	})
}

func TestLint(t *testing.T) {
	for _, values := range [][]string{nil, {"--values", testdata("nondefault-values.yaml")}} {
		out := helmT(t, append([]string{"lint", "--strict", chartDir()}, values...)...)
		if !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") {
			t.Errorf("helm lint --strict %v:\n%s", values, out)
		}
	}
}

// TestChartFilesMatchArtifacts: the chart's CRDs and admission policies are
// the files in artifacts/crds, byte for byte (hack/update-chart-crds.sh
// copies them; hack/update-codegen.sh runs it last).
func TestChartFilesMatchArtifacts(t *testing.T) {
	cmd := exec.Command("bash", filepath.Join(cp.Root, "hack", "update-chart-crds.sh"), "--verify", cp.Root)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/update-chart-crds.sh --verify: %v\n%s", err, out)
	}
	for _, name := range []string{"gputask.io_gputasks.yaml", "gputask.io_gputasksets.yaml"} {
		if _, err := os.Stat(filepath.Join(chartDir(), "crds", name)); err != nil {
			t.Errorf("the chart lacks its CRD: %v", err)
		}
	}
	policies, err := filepath.Glob(filepath.Join(chartDir(), "files", "admission", "*.yaml"))
	if err != nil || len(policies) == 0 {
		t.Errorf("the chart has no admission policies in files/admission (%v)", err)
	}
}

// TestSchemaRefusesBadValues: a wrong value stops helm before anything is
// rendered, with a message that names the value.
func TestSchemaRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		set  string
		want string
	}{
		{"controller.workers=0", "at '/controller/workers': minimum: got 0, want 1"},
		{"controller.wokers=3", "at '/controller': additional properties 'wokers' not allowed"},
		{"controller.pendingTimeout=5minutes", "at '/controller/pendingTimeout': '5minutes' does not match pattern"},
		{"controller.kubeAPIContentType=application/yaml", "at '/controller/kubeAPIContentType': value must be one of"},
		{"controller.kubeAPIQPS=0", "at '/controller/kubeAPIQPS'"},
		{"controller.loadIndex.allowedCIDRs={10.0.0.1}", "at '/controller/loadIndex/allowedCIDRs/0'"},
		{"image.pullPolicy=Sometimes", "at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'"},
		{"metrics.port=70000", "at '/metrics/port': maximum: got 70,000, want 65,535"},
		{"rbac.secrets.scope=everywhere", "at '/rbac/secrets/scope': value must be one of 'cluster', 'namespaces', 'none'"},
		{"rbac.secrets.scope=namespaces", "at '/rbac/secrets/namespaces': minItems: got 0, want 1"},
		{"serviceAccount.create=false", "at '/serviceAccount/name': minLength: got 0, want 1"},
		{"extraArgs={workers=3}", "at '/extraArgs/0': 'workers=3' does not match pattern '^-'"},
		{"podDisruptionBudget.minAvailable=half", "at '/podDisruptionBudget/minAvailable'"},
		{"leaderElection.resourceName=Bad_Name", "at '/leaderElection/resourceName'"},
		{"leaderElection.enabled=false", "replicaCount above 1 needs leaderElection.enabled"},
	} {
		_, err := runHelm(context.Background(), "template", "x", chartDir(), "--set", tc.set)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %s: got %v, want an error containing %q", tc.set, err, tc.want)
		}
	}
}

// renders are the value sets each rendered and dry-run: the defaults, every
// value changed (testdata/nondefault-values.yaml), and the smallest install.
var renders = []struct {
	name, release, namespace string
	namespaces               []string // created first
	args                     []string
}{
	{name: "defaults", release: "gputask-controller", namespace: "helm-defaults", args: []string{"--include-crds"}},
	{name: "every value changed", release: "r", namespace: "helm-render",
		namespaces: []string{"helm-tenant-a", "helm-tenant-b", "helm-monitoring"},
		args:       []string{"--values", testdata("nondefault-values.yaml")}},
	{name: "minimal", release: "minimal", namespace: "helm-minimal", args: []string{
		"--set", "replicaCount=1", "--set", "leaderElection.enabled=false", "--set", "metrics.enabled=false",
		"--set", "rbac.secrets.scope=none", "--set", "serviceAccount.create=false", "--set", "serviceAccount.name=existing",
		"--set", "admissionPolicies.enabled=false", "--set", "networkPolicy.enabled=true", "--set", "podAntiAffinity=hard",
	}},
}

// TestServerDryRun: each render passes a server-side apply dry run with
// strict field validation, so every field is one the API server knows.
// (Server-side: a client-side apply would store each CRD, over 256 KiB, in
// an annotation, which the API server refuses.)
func TestServerDryRun(t *testing.T) {
	ctx := context.Background()
	for _, r := range renders {
		t.Run(r.name, func(t *testing.T) {
			for _, ns := range append([]string{r.namespace}, r.namespaces...) {
				if err := cp.CreateNamespace(ctx, ns); err != nil {
					t.Fatal(err)
				}
			}
			manifest := renderT(t, r.release, r.namespace, r.args...)
			objs := parseObjects(t, manifest)
			out, err := cp.KubectlWithInput(ctx, []byte(manifest), "apply", "--server-side", "--field-manager=helm-test",
				"--dry-run=server", "--validate=strict", "-f", "-")
			if err != nil {
				t.Fatalf("server dry run: %v\n%s", err, out)
			}
			if lines := strings.Count(strings.TrimSpace(out), "\n") + 1; lines != len(objs) {
				t.Errorf("server dry run reports %d objects, the render has %d (%s):\n%s", lines, len(objs), describe(objs), out)
			}
			t.Logf("%d objects: %s", len(objs), describe(objs))
		})
	}
}

const (
	installNamespace = "gputask-system"
	installRelease   = "gputask-controller"
	tenantUser       = "helm-tenant-user"
	tenantSecret     = "db-token"
)

var gputaskCRDs = []string{"gputasks.gputask.io", "gputasksets.gputask.io"}

// TestInstallUpgradeUninstall installs the chart with its defaults, upgrades
// it with other values and uninstalls it, and checks the objects each step
// leaves: after uninstall the CRDs (and the GPUTasks in them) stay, and the
// Lease the controller made; nothing else does.
func TestInstallUpgradeUninstall(t *testing.T) {
	ctx := context.Background()
	if err := cp.CreateNamespace(ctx, installNamespace); err != nil {
		t.Fatal(err)
	}
	tenantNamespace := cp.NamespaceT(t)
	grantTenant(t, tenantNamespace)
	before := clusterObjects(t)

	// Install.
	helmT(t, "install", installRelease, chartDir(), "--namespace", installNamespace)
	checkRelease(t, 1, "deployed")
	crdUIDs := waitCRDsEstablished(t)
	dep, err := cp.Kube.AppsV1().Deployments(installNamespace).Get(ctx, installRelease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ptr.Deref(dep.Spec.Replicas, 0); got != 2 {
		t.Errorf("Deployment replicas %d, want 2", got)
	}
	for _, get := range []func() error{
		getErr(cp.Kube.CoreV1().ServiceAccounts(installNamespace).Get(ctx, installRelease, metav1.GetOptions{})),
		getErr(cp.Kube.CoreV1().Services(installNamespace).Get(ctx, installRelease+"-metrics", metav1.GetOptions{})),
		getErr(cp.Kube.RbacV1().ClusterRoleBindings().Get(ctx, installRelease, metav1.GetOptions{})),
		getErr(cp.Kube.RbacV1().Roles(installNamespace).Get(ctx, installRelease+"-leader-election", metav1.GetOptions{})),
		getErr(cp.Kube.RbacV1().RoleBindings(installNamespace).Get(ctx, installRelease+"-leader-election", metav1.GetOptions{})),
		getErr(cp.Kube.NetworkingV1().NetworkPolicies(installNamespace).Get(ctx, installRelease, metav1.GetOptions{})),
	} {
		if err := get(); err != nil {
			t.Error(err)
		}
	}
	policies := len(objectsOfKind(crdsDirObjects(t), "ValidatingAdmissionPolicy"))
	if n := releasePolicies(t); n != 2*policies {
		t.Errorf("%d admission policies and bindings of the release, want %d (those of artifacts/crds)", n, 2*policies)
	}
	if !hasSecretRule(clusterRoleRules(t)) {
		t.Errorf("the ClusterRole does not grant get on Secrets with rbac.secrets.scope=cluster")
	}
	// The admission policy the chart installed refuses a set that names a
	// Secret its author may not read.
	tenant := tenantClient(t)
	framework.Poll(t, time.Minute, "the chart's admission policy to refuse the tenant's set", func(ctx context.Context) (bool, string) {
		_, err := tenant.GputaskV1().GPUTaskSets(tenantNamespace).Create(ctx, secretSet(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "a load-index source may only use Secrets its author can read"),
			fmt.Sprintf("dry-run create: %v", err)
	})
	runAsChartServiceAccount(t, dep)

	// A task made while the chart is installed, to be found after uninstall.
	task := &gputaskv1.GPUTask{ObjectMeta: metav1.ObjectMeta{Name: "survivor"}, Spec: gputaskv1.GPUTaskSpec{GPU: "A100"}}
	if _, err := cp.GPUTask.GputaskV1().GPUTasks(tenantNamespace).Create(ctx, task, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Helm leaves the CRDs alone on upgrade; docs/helm.md has them applied
	// first, server-side, over what helm install created.
	cp.KubectlT(t, "apply", "--server-side", "--force-conflicts", "-f", filepath.Join(chartDir(), "crds"))

	// Upgrade: one replica, Secrets in the tenant's namespace only, no
	// admission policy, a PodDisruptionBudget, a ServiceMonitor and a
	// PrometheusRule.
	helmT(t, "upgrade", installRelease, chartDir(), "--namespace", installNamespace,
		"--values", testdata("upgrade-values.yaml"), "--set", "rbac.secrets.namespaces={"+tenantNamespace+"}")
	checkRelease(t, 2, "deployed")
	dep, err = cp.Kube.AppsV1().Deployments(installNamespace).Get(ctx, installRelease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ptr.Deref(dep.Spec.Replicas, 0); got != 1 {
		t.Errorf("Deployment replicas after the upgrade %d, want 1", got)
	}
	if hasSecretRule(clusterRoleRules(t)) {
		t.Errorf("the ClusterRole still grants Secrets with rbac.secrets.scope=namespaces")
	}
	role, err := cp.Kube.RbacV1().Roles(tenantNamespace).Get(ctx, installRelease+"-load-index-secrets", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !hasSecretRule(role.Rules) {
		t.Errorf("Role %s/%s does not grant get on Secrets: %v", tenantNamespace, role.Name, role.Rules)
	}
	if n := releasePolicies(t); n != 0 {
		t.Errorf("%d admission policies and bindings of the release after admissionPolicies.enabled=false, want 0", n)
	}
	if _, err := cp.Kube.PolicyV1().PodDisruptionBudgets(installNamespace).Get(ctx, installRelease, metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	dyn := dynamic.NewForConfigOrDie(cp.Config)
	for _, resource := range []string{"servicemonitors", "prometheusrules"} {
		gvr := schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: resource}
		if _, err := dyn.Resource(gvr).Namespace(installNamespace).Get(ctx, installRelease, metav1.GetOptions{}); err != nil {
			t.Error(err)
		}
	}
	framework.Poll(t, time.Minute, "the tenant's set to be accepted without the admission policy", func(ctx context.Context) (bool, string) {
		_, err := tenant.GputaskV1().GPUTaskSets(tenantNamespace).Create(ctx, secretSet(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil, fmt.Sprintf("dry-run create: %v", err)
	})
	if got := waitCRDsEstablished(t); fmt.Sprint(got) != fmt.Sprint(crdUIDs) {
		t.Errorf("the CRDs were replaced by the upgrade: UIDs %v, then %v", crdUIDs, got)
	}

	// Uninstall: the CRDs and the task stay; every other object the chart
	// made is gone, and so is the release.
	helmT(t, "uninstall", installRelease, "--namespace", installNamespace, "--wait", "--timeout", "2m")
	if got := waitCRDsEstablished(t); fmt.Sprint(got) != fmt.Sprint(crdUIDs) {
		t.Errorf("the CRDs changed on uninstall: UIDs %v, then %v", crdUIDs, got)
	}
	if _, err := cp.GPUTask.GputaskV1().GPUTasks(tenantNamespace).Get(ctx, task.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the GPUTask made before uninstall: %v", err)
	}
	// The API server serves each CRD group through an APIService of its
	// own, there as long as the CRDs are. The Lease is the controller's, not
	// the chart's: a real install leaves it too, until the namespace goes.
	expected := map[string]bool{
		"GPUTask/" + tenantNamespace + "/" + task.Name:           true,
		"APIService/v1.gputask.io":                               true,
		"Lease/" + installNamespace + "/" + "gputask-controller": true,
	}
	for _, name := range gputaskCRDs {
		expected["CustomResourceDefinition/"+name] = true
	}
	framework.Poll(t, time.Minute, "only the CRDs and the task left after uninstall", func(context.Context) (bool, string) {
		var unexpected []string
		for key := range clusterObjects(t) {
			if _, ok := before[key]; !ok && !expected[key] {
				unexpected = append(unexpected, key)
			}
		}
		sort.Strings(unexpected)
		return len(unexpected) == 0, "left: " + strings.Join(unexpected, ", ")
	})
	if out := helmT(t, "list", "--namespace", installNamespace, "--short"); strings.TrimSpace(out) != "" {
		t.Errorf("helm list after uninstall: %q", out)
	}
}

// runAsChartServiceAccount runs the controller binary with the installed
// Deployment's flags, as the chart's ServiceAccount (impersonated, so RBAC
// is enforced): it takes the Lease the chart's Role covers and turns ready,
// its informers synced, without a single Forbidden. Only the addresses are
// changed, to loopback.
func runAsChartServiceAccount(t *testing.T, dep *appsv1.Deployment) {
	t.Helper()
	user, groups := framework.ServiceAccountUser(installNamespace, dep.Spec.Template.Spec.ServiceAccountName)
	kubeconfig, err := cp.KubeconfigAs("chart-sa", user, groups...)
	if err != nil {
		t.Fatal(err)
	}
	args := append(container(t, &dep.Spec.Template.Spec).Args,
		"--kubeconfig="+kubeconfig, "--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0")
	proc := cp.StartControllerT(t, args...)
	defer proc.Stop()
	probes := framework.ServingAddrT(t, proc, "health probes")
	framework.Poll(t, time.Minute, "the controller with the chart's flags to lead and be ready", func(ctx context.Context) (bool, string) {
		if proc.Exited() {
			t.Fatalf("the controller exited: %v\n%s", proc.ExitError(), proc.LogTail(20))
		}
		lease, err := cp.Kube.CoordinationV1().Leases(installNamespace).Get(ctx, "gputask-controller", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		status, body := framework.HTTPGet(ctx, "http://"+probes+"/readyz")
		return ptr.Deref(lease.Spec.HolderIdentity, "") != "" && status == 200,
			fmt.Sprintf("lease holder %q, /readyz %d %s", ptr.Deref(lease.Spec.HolderIdentity, ""), status, body)
	})
	for _, line := range strings.Split(proc.LogTail(1000), "\n") {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			t.Errorf("refused as the chart's ServiceAccount: %s", line)
		}
	}
}

// releasePolicies counts the ValidatingAdmissionPolicies and their bindings
// that carry the release's label.
func releasePolicies(t *testing.T) int {
	t.Helper()
	ctx := context.Background()
	selector := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + installRelease}
	vaps, err := cp.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, selector)
	if err != nil {
		t.Fatal(err)
	}
	bindings, err := cp.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().List(ctx, selector)
	if err != nil {
		t.Fatal(err)
	}
	return len(vaps.Items) + len(bindings.Items)
}

func getErr[T any](_ T, err error) func() error { return func() error { return err } }

// checkRelease checks the release's revision and status as helm reports them.
func checkRelease(t *testing.T, revision int, status string) {
	t.Helper()
	out := helmT(t, "status", installRelease, "--namespace", installNamespace)
	for _, want := range []string{"STATUS: " + status, fmt.Sprintf("REVISION: %d", revision)} {
		if !strings.Contains(out, want) {
			t.Errorf("helm status lacks %q:\n%s", want, out)
		}
	}
}

// waitCRDsEstablished waits for the gputask.io CRDs and returns their UIDs.
func waitCRDsEstablished(t *testing.T) []string {
	t.Helper()
	uids := make([]string, len(gputaskCRDs))
	for i, name := range gputaskCRDs {
		framework.Poll(t, time.Minute, "CRD "+name+" established", func(ctx context.Context) (bool, string) {
			crd, err := cp.APIExtensions.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			uids[i] = string(crd.UID)
			for _, c := range crd.Status.Conditions {
				if c.Type == "Established" && c.Status == "True" {
					return true, ""
				}
			}
			return false, fmt.Sprintf("conditions %v", crd.Status.Conditions)
		})
	}
	return uids
}

func clusterRoleRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	role, err := cp.Kube.RbacV1().ClusterRoles().Get(context.Background(), installRelease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return role.Rules
}

func hasSecretRule(rules []rbacv1.PolicyRule) bool {
	for _, r := range rules {
		for _, res := range r.Resources {
			if res == "secrets" {
				return true
			}
		}
	}
	return false
}

// clusterObjects lists every object of every listable resource, as
// kind/namespace/name. Events are left out: the API server may record some
// of its own at any time.
func clusterObjects(t *testing.T) map[string]bool {
	t.Helper()
	ctx := context.Background()
	disc := discovery.NewDiscoveryClientForConfigOrDie(cp.Config)
	lists, err := disc.ServerPreferredResources()
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	dyn := dynamic.NewForConfigOrDie(cp.Config)
	objs := map[string]bool{}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || r.Name == "events" || !contains(r.Verbs, "list") {
				continue
			}
			items, err := dyn.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("listing %s: %v", r.Name, err)
			}
			for i := range items.Items {
				items.Items[i].SetKind(r.Kind)
				objs[objectName(&items.Items[i])] = true
			}
		}
	}
	return objs
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// grantTenant lets tenantUser manage GPUTaskSets in tenantNamespace, where a
// Secret it may not read exists.
func grantTenant(t *testing.T, tenantNamespace string) {
	t.Helper()
	ctx := context.Background()
	if _, err := cp.Kube.CoreV1().Secrets(tenantNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: tenantSecret},
		Data:       map[string][]byte{"token": []byte("not for the tenant")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: tenantUser},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"gputask.io"}, Resources: []string{"gputasksets"},
			Verbs: []string{"get", "list", "create", "update"}}},
	}
	if _, err := cp.Kube.RbacV1().Roles(tenantNamespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: tenantUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: tenantUser},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: tenantUser}},
	}
	if _, err := cp.Kube.RbacV1().RoleBindings(tenantNamespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func tenantClient(t *testing.T) versioned.Interface {
	t.Helper()
	c, err := versioned.NewForConfig(cp.ConfigAs(tenantUser, "system:authenticated"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// secretSet reads its load index with the tenant's unreadable Secret as the
// bearer token.
func secretSet() *gputaskv1.GPUTaskSet {
	return &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: "uses-a-secret"},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To[int32](0),
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{GPU: "A100"}},
			Autoscaling: &gputaskv1.AutoscalingSpec{
				MinReplicas: ptr.To[int32](0), MaxReplicas: 1,
				Metrics: []gputaskv1.MetricSpec{{Name: "load", HTTP: &gputaskv1.HTTPSource{
					URL: "http://load.example:8080/api",
					Auth: &gputaskv1.SourceAuth{BearerTokenSecretRef: &corev1.SecretKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: tenantSecret}, Key: "token"}},
				}}},
			},
		},
	}
}

// TestValuesDocumented: every value of values.yaml has its row in
// docs/helm.md.
func TestValuesDocumented(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir(), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := sigsyaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(cp.Root, "docs", "helm.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range valuePaths("", values) {
		if !strings.Contains(string(doc), "| `"+path+"` |") {
			t.Errorf("docs/helm.md has no row for value %s", path)
		}
	}
}

// valuePaths lists the values users set one by one: maps are walked into,
// but for the Kubernetes objects given whole (resources, security contexts).
func valuePaths(prefix string, values map[string]any) []string {
	whole := map[string]bool{"resources": true, "podSecurityContext": true, "securityContext": true}
	var paths []string
	for k, v := range values {
		path := k
		if prefix != "" {
			path = prefix + "." + k
		}
		if m, ok := v.(map[string]any); ok && len(m) > 0 && !whole[path] {
			paths = append(paths, valuePaths(path, m)...)
			continue
		}
		paths = append(paths, path)
	}
	sort.Strings(paths)
	return paths
}
