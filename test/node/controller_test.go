//go:build realnode

package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

// The controller as a user installs it: the chart, its image built from
// the Dockerfile, in a namespace of restricted PodSecurity.
const (
	release          = "gputask-controller"
	releaseNamespace = "gputask-system"
	imageRepository  = "localhost/gputask-controller"
	// firstTag is installed; secondTag, the same image under another tag,
	// is what `helm upgrade` moves to.
	firstTag  = "node-a"
	secondTag = "node-b"
	// metricsPort is the chart's default container port of /metrics.
	metricsPort = 8080
)

// controllerImage is the controller's image, saved as an archive for the
// node's containerd.
type controllerImage struct {
	archive string
	dir     string
	pm      *framework.Podman
	err     error
}

func (c controllerImage) close() error {
	var errs []error
	if c.pm != nil {
		errs = append(errs, c.pm.Close())
	}
	if c.dir != "" {
		errs = append(errs, os.RemoveAll(c.dir))
	}
	return errors.Join(errs...)
}

// buildControllerImage builds the image from the Dockerfile with podman and
// saves it under both tags.
func buildControllerImage(ctx context.Context, root string, logf func(string, ...any)) controllerImage {
	started := time.Now()
	pm, err := framework.NewPodman(root)
	if err != nil {
		return controllerImage{err: err}
	}
	img := controllerImage{pm: pm}
	if img.dir, img.err = os.MkdirTemp("", "gputask-node-image-"); img.err != nil {
		return img
	}
	ref := imageRepository + ":" + firstTag
	if err := pm.BuildControllerImage(ctx, ref); err != nil {
		img.err = fmt.Errorf("building the controller's image: %w", err)
		return img
	}
	img.archive = filepath.Join(img.dir, "controller.tar")
	if err := pm.SaveArchive(ctx, img.archive, ref, imageRepository+":"+secondTag); err != nil {
		img.err = fmt.Errorf("saving the controller's image: %w", err)
		return img
	}
	logf("controller image built from the Dockerfile in %s", time.Since(started).Round(time.Second))
	return img
}

// installController installs the chart with its defaults (2 replicas,
// leader election, secure metrics) but the image, and waits until both
// replicas are Ready on the node.
func installController(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNamespace, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce":         "restricted",
		"pod-security.kubernetes.io/enforce-version": "latest",
	}}}
	if _, err := cp.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return err
	}
	started := time.Now()
	if _, err := cp.Helm(ctx, helmArgs("install", firstTag)...); err != nil {
		return fmt.Errorf("installing the chart: %w\n%s", err, controllerPodsSummary(ctx))
	}
	logf("chart installed, 2 controller pods Ready in %s", time.Since(started).Round(time.Second))
	return nil
}

// uninstallController removes the release, whose ReplicaSet would otherwise
// make its pods again while the node is taken down.
func uninstallController() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cp.Helm(ctx, "status", release, "--namespace", releaseNamespace); err != nil {
		return
	}
	if _, err := cp.Helm(ctx, "uninstall", release, "--namespace", releaseNamespace, "--wait", "--timeout=2m"); err != nil {
		logf("cleanup: %v", err)
	}
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, "node: "+format+"\n", args...) }

// helmArgs installs or upgrades the release to the image tag; the CRDs are
// the control plane's already. Load-index sources may reach the node's own
// address only, where the tests serve their load indexes, as an operator
// would allow the network of the servers that sets name.
func helmArgs(verb, tag string) []string {
	return helmArgsOf(filepath.Join(cp.Root, "charts", "gputask-controller"), verb, tag)
}

// helmArgsOf is helmArgs for the chart in dir.
func helmArgsOf(chart, verb, tag string) []string {
	return []string{verb, release, chart,
		"--namespace", releaseNamespace, "--skip-crds", "--wait", "--timeout=3m",
		"--set", "image.repository=" + imageRepository, "--set", "image.tag=" + tag, "--set", "image.pullPolicy=Never",
		"--set", "controller.loadIndex.allowedCIDRs={" + framework.NodeIP + "/32}"}
}

func controllerPods(ctx context.Context) ([]corev1.Pod, error) {
	pods, err := cp.Kube.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=gputask-controller"})
	if err != nil {
		return nil, err
	}
	return pods.Items, nil
}

// controllerPodsSummary says, for a failure message, what each controller
// pod is doing.
func controllerPodsSummary(ctx context.Context) string {
	pods, err := controllerPods(ctx)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods {
		fmt.Fprintf(&b, "pod %s: phase=%s ready=%t image=%s", p.Name, p.Status.Phase, podReady(&p), p.Spec.Containers[0].Image)
		for _, s := range p.Status.ContainerStatuses {
			if s.State.Waiting != nil {
				fmt.Fprintf(&b, " waiting=%s(%s)", s.State.Waiting.Reason, s.State.Waiting.Message)
			}
			fmt.Fprintf(&b, " restarts=%d", s.RestartCount)
		}
		b.WriteString("\n")
		logs, err := cp.Kube.CoreV1().Pods(releaseNamespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: ptr.To(int64(15))}).DoRaw(ctx)
		if err != nil {
			logs = []byte(err.Error())
		}
		fmt.Fprintf(&b, "its log ends:\n%s\n", logs)
	}
	return b.String()
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readyControllerPods waits for exactly two Ready controller pods, both of
// tag, none being deleted.
func readyControllerPods(t *testing.T, tag string) []corev1.Pod {
	t.Helper()
	var ready []corev1.Pod
	framework.Poll(t, 5*time.Minute, "2 Ready controller pods of tag "+tag, func(ctx context.Context) (bool, string) {
		pods, err := controllerPods(ctx)
		if err != nil {
			return false, err.Error()
		}
		ready = ready[:0]
		for _, p := range pods {
			if p.DeletionTimestamp == nil && podReady(&p) && p.Spec.Containers[0].Image == imageRepository+":"+tag {
				ready = append(ready, p)
			}
		}
		return len(ready) == 2 && len(pods) == 2, controllerPodsSummary(ctx)
	})
	return ready
}

// leader returns the name of the pod that holds the controller's Lease; the
// holder identity is the pod's host name, then "_" and a unique id.
func leader(ctx context.Context) (string, error) {
	lease, err := cp.Kube.CoordinationV1().Leases(releaseNamespace).Get(ctx, release, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	name, _, ok := strings.Cut(holder, "_")
	if !ok {
		return "", fmt.Errorf("lease held by %q", holder)
	}
	return name, nil
}

// newTask is a task whose pod runs the node image, which sleeps.
func newTask(name string, gpus int32) *gputaskv1.GPUTask {
	amount := intOrString(gpus)
	return &gputaskv1.GPUTask{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gputaskv1.GPUTaskSpec{
			GPU:       gpuModel,
			GPUAmount: &amount,
			Template: &gputaskv1.PodTemplate{Spec: corev1.PodSpec{
				AutomountServiceAccountToken:  ptr.To(false),
				TerminationGracePeriodSeconds: ptr.To(int64(5)),
				Containers: []corev1.Container{{
					Name:            "task",
					Image:           framework.NodeImage,
					ImagePullPolicy: corev1.PullNever,
					Resources:       smallRequests(),
				}},
			}},
		},
	}
}

// runTask creates a task and waits until its one pod runs on the node and
// the task says so; it returns the pod.
func runTask(t *testing.T, ns string, task *gputaskv1.GPUTask) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	if _, err := cp.GPUTask.GputaskV1().GPUTasks(ns).Create(ctx, task, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	framework.Poll(t, 2*time.Minute, "task "+task.Name+" Running with its pod on the real node", func(ctx context.Context) (bool, string) {
		got, err := cp.GPUTask.GputaskV1().GPUTasks(ns).Get(ctx, task.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if got.Status.PodName == "" {
			return false, "no pod yet, phase " + string(got.Status.Phase)
		}
		pod, err = cp.Kube.CoreV1().Pods(ns).Get(ctx, got.Status.PodName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == gputaskv1.GPUTaskRunning && pod.Status.Phase == corev1.PodRunning && pod.Spec.NodeName == nodeName,
			fmt.Sprintf("task %s, pod %s on %q", got.Status.Phase, pod.Status.Phase, pod.Spec.NodeName)
	})
	return pod
}

// expectPods checks that ns holds exactly these pods, by UID, none
// restarted: nothing was duplicated, replaced or lost.
func expectPods(t *testing.T, ns string, want ...*corev1.Pod) {
	t.Helper()
	pods, err := cp.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, p := range pods.Items {
		got[string(p.UID)] = true
		for _, s := range p.Status.ContainerStatuses {
			if s.RestartCount != 0 {
				t.Errorf("pod %s restarted %d times", p.Name, s.RestartCount)
			}
		}
	}
	for _, w := range want {
		if !got[string(w.UID)] {
			t.Errorf("pod %s (uid %s) is gone", w.Name, w.UID)
		}
	}
	if len(pods.Items) != len(want) {
		t.Errorf("%d pods in %s, want %d", len(pods.Items), ns, len(want))
	}
}

// TestControllerProbesAreProbed: the kubelet itself probes both controller
// pods' liveness and readiness, and both succeed.
func TestControllerProbesAreProbed(t *testing.T) {
	pods := readyControllerPods(t, currentTag)
	framework.Poll(t, 2*time.Minute, "successful liveness and readiness probes of both controller pods, counted by the kubelet", func(ctx context.Context) (bool, string) {
		raw, err := cp.Kube.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", nodeName, "proxy", "metrics", "probes").DoRaw(ctx)
		if err != nil {
			return false, err.Error()
		}
		var missing []string
		for _, p := range pods {
			for _, probe := range []string{"Liveness", "Readiness"} {
				v, ok := framework.MetricValue(string(raw), "prober_probe_total", map[string]string{
					"namespace": releaseNamespace, "pod": p.Name, "container": "controller", "probe_type": probe, "result": "successful"})
				if !ok || v < 1 {
					missing = append(missing, p.Name+" "+probe)
				}
			}
		}
		return len(missing) == 0, "no successful probe yet: " + strings.Join(missing, ", ")
	})
}

// TestLeaderHandsOver: deleting the leader's pod hands the Lease to the
// other replica, which goes on: a task made before keeps its pod, a task
// made after gets one, and no pod is duplicated.
func TestLeaderHandsOver(t *testing.T) {
	readyControllerPods(t, currentTag)
	ns := cp.NamespaceT(t)
	before := runTask(t, ns, newTask("before-handover", 1))
	ctx := context.Background()
	old, err := leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Kube.CoreV1().Pods(releaseNamespace).Delete(ctx, old, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, 2*time.Minute, "the Lease held by another controller pod", func(ctx context.Context) (bool, string) {
		now, err := leader(ctx)
		if err != nil {
			return false, err.Error()
		}
		return now != old, "held by " + now
	})
	after := runTask(t, ns, newTask("after-handover", 1))
	expectPods(t, ns, before, after)
	readyControllerPods(t, currentTag)
}

// TestMetricsNeedAScraperToken: /metrics answers a ServiceAccount bound to
// the chart's metrics-reader ClusterRole, and refuses another one and a
// caller with no token.
func TestMetricsNeedAScraperToken(t *testing.T) {
	pod := readyControllerPods(t, currentTag)[0]
	ns := cp.NamespaceT(t)
	ctx := context.Background()
	for _, name := range []string{"scraper", "stranger"} {
		if _, err := cp.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-scraper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: release + "-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scraper", Namespace: ns}},
	}
	if _, err := cp.Kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cp.Kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	token := func(sa string) string {
		tr, err := cp.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(600))}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	// The pod's address is on the test's own bridge. The controller serves
	// a certificate of its own making, as kube-controller-manager does
	// without --tls-cert-file, so the client does not verify it.
	url := "https://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(metricsPort)) + "/metrics"
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(ctx context.Context, token string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, "", err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	scraper, stranger := token("scraper"), token("stranger")
	framework.Poll(t, time.Minute, "/metrics answering the scraper", func(ctx context.Context) (bool, string) {
		code, body, err := get(ctx, scraper)
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusOK && strings.Contains(body, "workqueue_adds_total"), fmt.Sprintf("HTTP %d", code)
	})
	for _, c := range []struct {
		who   string
		token string
		want  int
	}{{"another ServiceAccount", stranger, http.StatusForbidden}, {"no token", "", http.StatusUnauthorized}} {
		code, _, err := get(ctx, c.token)
		if err != nil {
			t.Fatal(err)
		}
		if code != c.want {
			t.Errorf("/metrics with %s: HTTP %d, want %d", c.who, code, c.want)
		}
	}
}

// currentTag is the tag the controller runs; TestHelmUpgradeKeepsTaskPods
// moves it.
var currentTag = firstTag

// The older release TestHelmUpgradeKeepsTaskPods upgrades from differs from
// this chart as a release before a change of the API and of a default
// would: its GPUTaskSet CRD lacks spec.minTaskAge, and its
// --node-not-ready-timeout defaults to 5m where this chart's is 1m.
const (
	oldNodeNotReadyTimeout = "5m"
	newNodeNotReadyTimeout = "1m"
)

// TestHelmUpgradeKeepsTaskPods: `helm upgrade` from an older release, the
// way docs/helm.md tells users to upgrade: the new CRDs applied first
// (Helm leaves crds/ alone on upgrade), then the release upgraded with
// --reset-then-reuse-values and a new image tag. A GPUTask and a
// GPUTaskSet made under the older release keep their pods, by UID and
// restart count; the new controller pods run the new default of the flag
// whose default changed (with --reuse-values Helm would keep the older
// chart's); and the new leader acts on the old set: spec.minTaskAge, which
// the older CRD did not take, is set on it and holds back its scale-in,
// which its status shows.
func TestHelmUpgradeKeepsTaskPods(t *testing.T) {
	readyControllerPods(t, currentTag)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// The older release: its CRDs, then its chart.
	old := oldChart(t)
	if err := cp.InstallCRDsFrom(ctx, filepath.Join(old, "crds")); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Helm(ctx, helmArgsOf(old, "upgrade", firstTag)...); err != nil {
		t.Fatalf("installing the older release: %v\n%s", err, controllerPodsSummary(ctx))
	}
	oldPods := readyControllerPodsWith(t, firstTag, "--node-not-ready-timeout="+oldNodeNotReadyTimeout)

	ns := cp.NamespaceT(t)
	task := runTask(t, ns, newTask("before-upgrade", 1))
	set := &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: "before-upgrade"},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To[int32](1),
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: newTask("", 1).Spec},
		},
	}
	if _, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	setStatus(t, ns, set.Name, "the set's task Running under the older release", func(s *gputaskv1.GPUTaskSet) bool {
		return s.Status.RunningReplicas == 1
	})
	// The older CRD does not take spec.minTaskAge: refused, or pruned.
	_, patchErr := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Patch(ctx, set.Name, types.MergePatchType, []byte(`{"spec":{"minTaskAge":"1h"}}`), metav1.PatchOptions{})
	got, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Get(ctx, set.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.MinTaskAge != nil {
		t.Fatalf("spec.minTaskAge %s kept by the older CRD, which lacks it (patch: %v): the older release is not older", got.Spec.MinTaskAge.Duration, patchErr)
	}
	before := podsOf(t, ns)
	if len(before) != 2 {
		t.Fatalf("%d pods under the older release, want the task's and the set's task's", len(before))
	}

	// The upgrade, as docs/helm.md says. With --reuse-values instead, the
	// older chart's defaults would stay, as its dry run shows.
	cp.KubectlT(t, "apply", "--server-side", "--force-conflicts", "-f", filepath.Join(cp.Root, "charts", "gputask-controller", "crds"))
	upgrade := func(values string, more ...string) []string {
		return append([]string{"upgrade", release, filepath.Join(cp.Root, "charts", "gputask-controller"),
			"--namespace", releaseNamespace, "--skip-crds", values, "--set", "image.tag=" + secondTag}, more...)
	}
	dryRun, err := cp.Helm(ctx, upgrade("--reuse-values", "--dry-run=server")...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dryRun, "--node-not-ready-timeout="+oldNodeNotReadyTimeout) {
		t.Errorf("helm upgrade --reuse-values would not keep the older default --node-not-ready-timeout=%s: docs/helm.md's reason for --reset-then-reuse-values is gone", oldNodeNotReadyTimeout)
	}
	if _, err := cp.Helm(ctx, upgrade("--reset-then-reuse-values", "--wait", "--timeout=3m")...); err != nil {
		t.Fatalf("%v\n%s", err, controllerPodsSummary(ctx))
	}
	currentTag = secondTag
	pods := readyControllerPodsWith(t, currentTag, "--node-not-ready-timeout="+newNodeNotReadyTimeout)
	for _, p := range pods {
		for _, o := range oldPods {
			if p.UID == o.UID {
				t.Fatalf("controller pod %s was not replaced", p.Name)
			}
		}
	}
	framework.Poll(t, 2*time.Minute, "the Lease held by a pod of the new release", func(ctx context.Context) (bool, string) {
		name, err := leader(ctx)
		if err != nil {
			return false, err.Error()
		}
		return name == pods[0].Name || name == pods[1].Name, "held by " + name
	})

	// The new leader acts on the old set, with the field only the new CRD
	// knows: one task more, then one less, which minTaskAge holds back.
	patchSet(t, ns, set.Name, `{"spec":{"minTaskAge":"1h","replicas":2}}`)
	setStatus(t, ns, set.Name, "the old set grown to 2 Running tasks by the new leader", func(s *gputaskv1.GPUTaskSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.RunningReplicas == 2 && s.Spec.MinTaskAge != nil
	})
	patchSet(t, ns, set.Name, `{"spec":{"replicas":1}}`)
	setStatus(t, ns, set.Name, "the scale-in held back by minTaskAge", func(s *gputaskv1.GPUTaskSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.HeldBackReplicas == 1 && s.Status.Replicas == 2
	})
	// A task made now is placed by the new leader, so by then it has read
	// every task, the older ones included.
	after := runTask(t, ns, newTask("after-upgrade", 1))
	now := podsOf(t, ns)
	for uid, restarts := range before {
		if r, ok := now[uid]; !ok || r != restarts {
			t.Errorf("pod %s made under the older release: kept %t, restarts %d then %d", uid, ok, restarts, r)
		}
	}
	if len(now) != 4 {
		t.Errorf("%d pods after the upgrade, want the 2 made before, the set's second task's and %s's", len(now), after.Name)
	}
	if got := taskOf(t, ns, task.Name); got.Status.PodName != task.Name || got.Status.Phase != gputaskv1.GPUTaskRunning {
		t.Errorf("the older task after the upgrade: pod %q, phase %s", got.Status.PodName, got.Status.Phase)
	}
}

// oldChart writes the chart, as the older release had it, to a temporary
// directory and returns its path: its GPUTaskSet CRD without
// spec.minTaskAge, and --node-not-ready-timeout at its older default.
func oldChart(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "gputask-controller")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(cp.Root, "charts", "gputask-controller"))); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "crds", "gputask.io_gputasksets.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		t.Fatal(err)
	}
	for _, v := range crd.Spec.Versions {
		spec := v.Schema.OpenAPIV3Schema.Properties["spec"]
		if _, ok := spec.Properties["minTaskAge"]; !ok {
			t.Fatalf("the GPUTaskSet CRD's %s has no spec.minTaskAge to leave out", v.Name)
		}
		delete(spec.Properties, "minTaskAge")
	}
	if data, err = yaml.Marshal(crd); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	values := filepath.Join(dir, "values.yaml")
	if data, err = os.ReadFile(values); err != nil {
		t.Fatal(err)
	}
	line := "  nodeNotReadyTimeout: "
	if n := strings.Count(string(data), line+newNodeNotReadyTimeout+"\n"); n != 1 {
		t.Fatalf("values.yaml sets nodeNotReadyTimeout to %s %d times, want once", newNodeNotReadyTimeout, n)
	}
	data = []byte(strings.Replace(string(data), line+newNodeNotReadyTimeout+"\n", line+oldNodeNotReadyTimeout+"\n", 1))
	if err := os.WriteFile(values, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// setStatus waits until the set satisfies ok.
func setStatus(t *testing.T, ns, name, what string, ok func(*gputaskv1.GPUTaskSet) bool) {
	t.Helper()
	framework.Poll(t, 2*time.Minute, what, func(ctx context.Context) (bool, string) {
		got, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return ok(got), fmt.Sprintf("generation %d, minTaskAge %v, status %+v", got.Generation, got.Spec.MinTaskAge, got.Status)
	})
}

func patchSet(t *testing.T, ns, name, patch string) {
	t.Helper()
	if _, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// readyControllerPodsWith is readyControllerPods, and checks that each
// pod's controller runs with arg.
func readyControllerPodsWith(t *testing.T, tag, arg string) []corev1.Pod {
	t.Helper()
	pods := readyControllerPods(t, tag)
	for _, p := range pods {
		if args := p.Spec.Containers[0].Args; !slices.Contains(args, arg) {
			t.Errorf("controller pod %s runs with %q, want %s", p.Name, args, arg)
		}
	}
	return pods
}

// podsOf returns the pods of ns by UID, with their containers' restarts.
func podsOf(t *testing.T, ns string) map[types.UID]int32 {
	t.Helper()
	pods, err := cp.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[types.UID]int32{}
	for _, p := range pods.Items {
		out[p.UID] = 0
		for _, s := range p.Status.ContainerStatuses {
			out[p.UID] += s.RestartCount
		}
	}
	return out
}
