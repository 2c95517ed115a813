// Package tenancy tests a shared cluster under abuse: a tenant who tries to
// read a Secret through a load-index source, and objects stored before the
// CRD's rules that must not stop anybody else. It runs a control plane of
// its own (API server only: no pod needs to run), because it swaps the CRD
// and the admission policy under the controller.
package tenancy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/generated/clientset/versioned"
	"github.com/gputask/gputask-controller/test/framework"
)

const (
	tenantUser     = "alice"
	secretOwner    = "bob"
	stolenSecret   = "db-password"
	stolenValue    = "hunter2-do-not-leak"
	leakMarker     = "LEAK-MARKER-7f3a"
	tenancyTimeout = 60 * time.Second
)

// exfilServer is the tenant's own endpoint: it counts requests and records
// any that carried the Secret's value.
type exfilServer struct {
	srv      *httptest.Server
	requests atomic.Int64
	leaks    atomic.Int64
	mu       sync.Mutex
	status   int
}

func newExfilServer(t *testing.T) *exfilServer {
	s := &exfilServer{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		for _, values := range r.Header {
			for _, v := range values {
				if strings.Contains(v, stolenValue) {
					s.leaks.Add(1)
				}
			}
		}
		s.mu.Lock()
		status := s.status
		s.mu.Unlock()
		if status != 0 {
			// An error body the set's author would love to read back.
			http.Error(w, leakMarker, status)
			return
		}
		fmt.Fprintf(w, `{"data":{"load_balance":"%s"}}`, leakMarker)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *exfilServer) answer(status int) {
	s.mu.Lock()
	s.status = status
	s.mu.Unlock()
}

func TestTenancy(t *testing.T) {
	c := framework.StartT(t, framework.Options{})
	args := []string{"--workers=2", "--health-probe-bind-address=127.0.0.1:0"}
	controller := c.StartControllerT(t, args...)
	probeAddr := framework.ServingAddrT(t, controller, "health probes")
	waitReady(t, probeAddr)
	// restart starts the controller again and returns where its health
	// probes now are.
	restart := func(t *testing.T) string {
		controller.Stop()
		controller = c.StartControllerT(t, args...)
		return framework.ServingAddrT(t, controller, "health probes")
	}

	t.Run("SecretExfiltrationRefused", func(t *testing.T) { testSecretExfiltration(t, c) })
	t.Run("RequestShape", func(t *testing.T) { testRequestShape(t, c) })
	t.Run("PoisonObjects", func(t *testing.T) { testPoisonObjects(t, c, probeAddr, restart) })
}

// testSecretExfiltration: alice may create GPUTaskSets in her namespace but
// may not read its Secrets. She points a set at her own server and names
// the Secret db-password for the bearer token and a header.
func testSecretExfiltration(t *testing.T, c *framework.ControlPlane) {
	ctx := context.Background()
	ns := c.NamespaceT(t)
	grantTenant(t, c, ns)
	if _, err := c.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: stolenSecret},
		Data:       map[string][]byte{"password": []byte(stolenValue)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	server := newExfilServer(t)
	alice := clientAs(t, c, tenantUser)
	bob := clientAs(t, c, secretOwner)

	// 1. With the ValidatingAdmissionPolicy: alice's set is refused, with a
	// message naming the Secret; bob, who may read it, may use it.
	installPolicy(t, c)
	stealing := exfilSet("steal", server.srv.URL)
	framework.Poll(t, tenancyTimeout, "the policy to refuse alice's set", func(ctx context.Context) (bool, string) {
		_, err := alice.GputaskV1().GPUTaskSets(ns).Create(ctx, stealing, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err), fmt.Sprintf("dry-run create: %v", err)
	})
	_, err := alice.GputaskV1().GPUTaskSets(ns).Create(ctx, stealing, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "names Secret "+stolenSecret) || !strings.Contains(err.Error(), tenantUser) {
		t.Fatalf("alice's create: %v; want a refusal naming Secret %s and alice", err, stolenSecret)
	}
	t.Logf("refused by the policy: %v", err)
	for _, edit := range []func(*gputaskv1.GPUTaskSet){
		func(s *gputaskv1.GPUTaskSet) { s.Spec.Autoscaling.Metrics[0].HTTP.Auth = nil }, // header only
		func(s *gputaskv1.GPUTaskSet) { s.Spec.Autoscaling.Metrics[0].HTTP.Headers = nil },
		func(s *gputaskv1.GPUTaskSet) {
			m := &s.Spec.Autoscaling.Metrics[0]
			m.Prometheus = &gputaskv1.PrometheusSource{ServerAddress: m.HTTP.URL, Query: "up",
				Auth: &gputaskv1.SourceAuth{CASecretRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: stolenSecret}, Key: "password"}}}
			m.HTTP = nil
		},
	} {
		set := stealing.DeepCopy()
		edit(set)
		if _, err := alice.GputaskV1().GPUTaskSets(ns).Create(ctx, set, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err == nil || !strings.Contains(err.Error(), stolenSecret) {
			t.Errorf("alice's create of %s: %v; want a refusal naming %s", toJSON(set.Spec.Autoscaling.Metrics[0]), err, stolenSecret)
		}
	}
	clean := exfilSet("clean", server.srv.URL)
	clean.Spec.Autoscaling.Metrics[0].HTTP.Auth = nil
	clean.Spec.Autoscaling.Metrics[0].HTTP.Headers = nil
	if _, err := alice.GputaskV1().GPUTaskSets(ns).Create(ctx, clean, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("alice's set without Secrets was refused: %v", err)
	}
	// Bob, who may read the Secret, may use it; alice may not take over his
	// set and point it at her server.
	bobs := exfilSet("bobs", "http://load.example:8080/api")
	if _, err := bob.GputaskV1().GPUTaskSets(ns).Create(ctx, bobs, metav1.CreateOptions{}); err != nil {
		t.Fatalf("bob, who may read the Secret, was refused: %v", err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		set, err := alice.GputaskV1().GPUTaskSets(ns).Get(ctx, bobs.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		set.Spec.Autoscaling.Metrics[0].HTTP.URL = server.srv.URL
		_, err = alice.GputaskV1().GPUTaskSets(ns).Update(ctx, set, metav1.UpdateOptions{})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), stolenSecret) {
		t.Errorf("alice's update of bob's set: %v; want a refusal naming %s", err, stolenSecret)
	}
	if err := c.GPUTask.GputaskV1().GPUTaskSets(ns).Delete(ctx, bobs.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// 2. Without the policy (a cluster that never installed it): the set is
	// stored, but the Secret has not opted in, so the controller sends
	// nothing and says why on the set.
	uninstallPolicy(t, c)
	framework.Poll(t, tenancyTimeout, "the policy to be gone", func(ctx context.Context) (bool, string) {
		_, err := alice.GputaskV1().GPUTaskSets(ns).Create(ctx, stealing, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil, fmt.Sprintf("dry-run create: %v", err)
	})
	if _, err := alice.GputaskV1().GPUTaskSets(ns).Create(ctx, stealing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cond := waitSetCondition(t, c, ns, stealing.Name, gputaskv1.ConditionScalingActive, func(cond *metav1.Condition) bool {
		return cond.Status == metav1.ConditionFalse && strings.Contains(cond.Message, ns+"/"+stolenSecret)
	})
	t.Logf("ScalingActive: %s: %s", cond.Reason, cond.Message)
	if !strings.Contains(cond.Message, gputaskv1.AnnotationLoadIndexAccess) {
		t.Errorf("condition message %q does not say how the Secret opts in", cond.Message)
	}
	// A second evaluation (interval 1s) passes the same refusal: the
	// status stays as it is, and still nothing was sent.
	waitEvaluations(t, c, ns, stealing.Name, 2)
	if n := server.requests.Load(); n != 0 {
		t.Fatalf("alice's server got %d requests, want 0", n)
	}

	// 3. The owner opts the Secret in for another set: still nothing.
	annotateSecret(t, c, ns, "other-set")
	waitEvaluations(t, c, ns, stealing.Name, 2)
	if n := server.requests.Load(); n != 0 {
		t.Fatalf("alice's server got %d requests after the Secret opted in for another set, want 0", n)
	}

	// 4. Control: once the owner opts the Secret in for this set, the same
	// set does send it, so the zero above was the guard's doing. The
	// server's answers never reach the status.
	annotateSecret(t, c, ns, "other-set, "+stealing.Name)
	framework.Poll(t, tenancyTimeout, "requests once the Secret opts in", func(context.Context) (bool, string) {
		return server.leaks.Load() > 0, fmt.Sprintf("%d requests, %d with the secret", server.requests.Load(), server.leaks.Load())
	})
	cond = waitSetCondition(t, c, ns, stealing.Name, gputaskv1.ConditionScalingActive, func(cond *metav1.Condition) bool {
		return cond.Reason == "FailedGetLoadIndex" && strings.Contains(cond.Message, "not a number")
	})
	t.Logf("string value: %s", cond.Message)
	server.answer(http.StatusForbidden)
	cond = waitSetCondition(t, c, ns, stealing.Name, gputaskv1.ConditionScalingActive, func(cond *metav1.Condition) bool {
		return strings.Contains(cond.Message, "HTTP 4xx")
	})
	t.Logf("error answer: %s", cond.Message)
	if strings.Contains(cond.Message, "403") {
		t.Errorf("condition message %q names the status code; want its class only", cond.Message)
	}
	checkNoReadBack(t, c, ns, stealing.Name)

	// 5. Destinations: a set pointed at the API server is refused at dial
	// time, even though the controller may reach loopback in this test.
	apiSet := exfilSet("apiserver", c.Config.Host+"/api")
	apiSet.Spec.Autoscaling.Metrics[0].HTTP.Auth = &gputaskv1.SourceAuth{InsecureSkipVerify: true}
	apiSet.Spec.Autoscaling.Metrics[0].HTTP.Headers = nil
	if _, err := alice.GputaskV1().GPUTaskSets(ns).Create(ctx, apiSet, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cond = waitSetCondition(t, c, ns, apiSet.Name, gputaskv1.ConditionScalingActive, func(cond *metav1.Condition) bool {
		return strings.Contains(cond.Message, "destination refused by the controller's policy")
	})
	t.Logf("API server as a source: %s", cond.Message)
	// Which rule refused it is the controller's log's business: a tenant
	// learns only that the destination is refused.
	if strings.Contains(cond.Message, "API server") || strings.Contains(cond.Message, "127.0.0.1") {
		t.Errorf("condition message %q says which address or rule refused it; want the class only", cond.Message)
	}
}

// exfilSet reads a load index from url with the stolen Secret as the bearer
// token and as a header.
func exfilSet(name, url string) *gputaskv1.GPUTaskSet {
	ref := &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: stolenSecret}, Key: "password"}
	return &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To[int32](0),
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{GPU: "none"}},
			Autoscaling: &gputaskv1.AutoscalingSpec{
				MinReplicas: ptr.To[int32](0), MaxReplicas: 1,
				Interval: &gputaskv1.Duration{Duration: time.Second},
				Metrics: []gputaskv1.MetricSpec{{Name: "load", HTTP: &gputaskv1.HTTPSource{
					URL:     url,
					Auth:    &gputaskv1.SourceAuth{BearerTokenSecretRef: ref},
					Headers: []gputaskv1.HTTPHeader{{Name: "X-Api-Key", ValueFrom: ref}},
				}}},
			},
		},
	}
}

// grantTenant lets alice manage GPUTaskSets in ns, and bob too, who may also
// read its Secrets.
func grantTenant(t *testing.T, c *framework.ControlPlane, ns string) {
	t.Helper()
	ctx := context.Background()
	sets := rbacv1.PolicyRule{APIGroups: []string{"gputask.io"}, Resources: []string{"gputasksets"},
		Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}
	secrets := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list"}}
	for user, rules := range map[string][]rbacv1.PolicyRule{tenantUser: {sets}, secretOwner: {sets, secrets}} {
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: rules}
		if _, err := c.Kube.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		}
		if _, err := c.Kube.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// RBAC is cached by the authorizer for a moment: wait until alice may
	// create sets and may not read Secrets.
	framework.Poll(t, tenancyTimeout, "alice's RBAC", func(ctx context.Context) (bool, string) {
		_, err := clientAs(t, c, tenantUser).GputaskV1().GPUTaskSets(ns).List(ctx, metav1.ListOptions{})
		return err == nil, fmt.Sprintf("list as alice: %v", err)
	})
	aliceKube, err := kubernetes.NewForConfig(c.ConfigAs(tenantUser, "system:authenticated"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := aliceKube.CoreV1().Secrets(ns).Get(ctx, stolenSecret, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("alice's get of a Secret: %v, want Forbidden", err)
	}
}

func clientAs(t *testing.T, c *framework.ControlPlane, user string) versioned.Interface {
	t.Helper()
	cl, err := versioned.NewForConfig(c.ConfigAs(user, "system:authenticated"))
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func policyFile(c *framework.ControlPlane) string {
	return filepath.Join(c.Root, "artifacts", "crds", "load-index-secrets-policy.yaml")
}

func installPolicy(t *testing.T, c *framework.ControlPlane) {
	t.Helper()
	c.KubectlT(t, "apply", "-f", policyFile(c))
	t.Cleanup(func() { uninstallPolicy(t, c) })
}

func uninstallPolicy(t *testing.T, c *framework.ControlPlane) {
	t.Helper()
	if c.Stopped() {
		return
	}
	c.KubectlT(t, "delete", "--ignore-not-found", "-f", policyFile(c))
}

func annotateSecret(t *testing.T, c *framework.ControlPlane, ns, value string) {
	t.Helper()
	c.KubectlT(t, "-n", ns, "annotate", "--overwrite", "secret", stolenSecret, gputaskv1.AnnotationLoadIndexAccess+"="+value)
}

// waitSetCondition waits until the set's condition of type condType
// satisfies ok, and returns it.
func waitSetCondition(t *testing.T, c *framework.ControlPlane, ns, name, condType string, ok func(*metav1.Condition) bool) *metav1.Condition {
	t.Helper()
	var got *metav1.Condition
	framework.Poll(t, tenancyTimeout, fmt.Sprintf("condition %s of %s/%s", condType, ns, name), func(ctx context.Context) (bool, string) {
		set, err := c.GPUTask.GputaskV1().GPUTaskSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got = meta.FindStatusCondition(set.Status.Conditions, condType)
		return got != nil && ok(got), toJSON(set.Status.Conditions)
	})
	return got
}

// waitEvaluations waits until the autoscaler has evaluated the set n more
// times, counted by its reconcile metric... which this controller does not
// serve; the recorded decisions' times serve instead: each evaluation that
// builds a source anew emits an InvalidMetricSpec event, aggregated by count.
func waitEvaluations(t *testing.T, c *framework.ControlPlane, ns, name string, n int32) {
	t.Helper()
	count := func(ctx context.Context) int32 {
		events, err := c.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return -1
		}
		var total int32
		for _, e := range events.Items {
			if e.InvolvedObject.Name == name && e.Reason == "InvalidMetricSpec" {
				total += max(e.Count, 1)
			}
		}
		return total
	}
	start := count(context.Background())
	framework.Poll(t, tenancyTimeout, fmt.Sprintf("%d more evaluations of %s/%s", n, ns, name), func(ctx context.Context) (bool, string) {
		now := count(ctx)
		return now >= start+n, fmt.Sprintf("%d InvalidMetricSpec events, from %d", now, start)
	})
}

// checkNoReadBack: nothing the tenant's server answered is in the set's
// status or its events.
func checkNoReadBack(t *testing.T, c *framework.ControlPlane, ns, name string) {
	t.Helper()
	ctx := context.Background()
	set, err := c.GPUTask.GputaskV1().GPUTaskSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s := toJSON(set.Status); strings.Contains(s, leakMarker) {
		t.Errorf("the set's status holds the server's answer: %s", s)
	}
	events, err := c.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if strings.Contains(e.Message, leakMarker) || strings.Contains(e.Message, stolenValue) {
			t.Errorf("event %s holds the server's answer: %s", e.Reason, e.Message)
		}
	}
}

func toJSON(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// testPoisonObjects: sets whose specs the CRD refuses today are stored under
// a CRD without the rules (as an older version of it would have), then the
// real CRD comes back. The controller keeps scaling a healthy set in another
// namespace, stays ready, across a restart too, and gives each bad set an
// InvalidSpec condition of its own.
func testPoisonObjects(t *testing.T, c *framework.ControlPlane, probeAddr string, restart func(*testing.T) string) {
	ctx := context.Background()
	healthyNS, poisonNS := c.NamespaceT(t), c.NamespaceT(t)
	load := newLoadServer(t, loadMid)
	healthy := &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: "healthy"},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To[int32](2),
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{GPU: "none"}},
			Autoscaling: &gputaskv1.AutoscalingSpec{
				MinReplicas: ptr.To[int32](1), MaxReplicas: 8,
				Interval:                     &gputaskv1.Duration{Duration: time.Second},
				ScaleDownStabilizationWindow: &gputaskv1.Duration{},
				// This control plane has no scheduler or nodes, so no task
				// ever becomes Ready: a short startup timeout keeps the
				// starting tasks from holding scale-up back.
				StartupTimeout: &gputaskv1.Duration{Duration: time.Second},
				Metrics:        []gputaskv1.MetricSpec{{Name: "load", HTTP: &gputaskv1.HTTPSource{URL: load.srv.URL}}},
			},
		},
	}
	if _, err := c.GPUTask.GputaskV1().GPUTaskSets(healthyNS).Create(ctx, healthy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReplicas(t, c, healthyNS, "healthy", 2, "holding at load 0.6")

	// The poison: every rule of the CRD broken once, stored under a CRD
	// without the rules.
	poison := map[string]string{
		"bad-interval":    `interval: abc`,
		"zero-interval":   `interval: 0s`,
		"neg-interval":    `interval: -5s`,
		"number-interval": `interval: "30"`,
		"bad-min-age":     `interval: 1s`,
		"neg-tolerance":   "interval: 1s\n    policy: {tolerance: \"-0.1\"}",
		"neg-window":      `scaleDownStabilizationWindow: -1m`,
		"up-below-down":   `interval: 1s`,
		"prop-no-target":  "interval: 1s\n    policy: {type: Proportional}",
		"bad-timeout":     `interval: 1s`,
		"bad-burst":       "interval: 1s\n    burst: {factor: \"1\"}",
		"bad-schedule":    "interval: 1s\n    schedules: [{name: peak, start: \"0 9 * * *\", timeZone: Mars/Olympus, duration: 1h, minReplicas: 2}]",
	}
	metric := map[string]string{
		"up-below-down": `{name: load, upThreshold: "0.3", downThreshold: "0.6", http: {url: "` + load.srv.URL + `"}}`,
		"bad-timeout":   `{name: load, http: {url: "` + load.srv.URL + `", timeout: "5 seconds"}}`,
	}
	wantField := map[string]string{
		"bad-interval": "spec.autoscaling.interval", "zero-interval": "spec.autoscaling.interval",
		"neg-interval": "spec.autoscaling.interval", "number-interval": "spec.autoscaling.interval",
		"bad-min-age": "spec.minTaskAge", "neg-tolerance": "spec.autoscaling.policy.tolerance",
		"neg-window": "spec.autoscaling.scaleDownStabilizationWindow", "up-below-down": "spec.autoscaling.metrics[0].upThreshold",
		"prop-no-target": "spec.autoscaling.metrics[0].target", "bad-timeout": "spec.autoscaling.metrics[0].http.timeout",
		"bad-burst": "spec.autoscaling.burst.factor", "bad-schedule": "spec.autoscaling.schedules[0].timeZone",
	}
	relaxSetCRD(t, c)
	for name, autoscaling := range poison {
		m, ok := metric[name]
		if !ok {
			m = `{name: load, http: {url: "` + load.srv.URL + `"}}`
		}
		minAge := ""
		if name == "bad-min-age" {
			minAge = "  minTaskAge: forever\n"
		}
		doc := fmt.Sprintf(`apiVersion: gputask.io/v1
kind: GPUTaskSet
metadata: {name: %s, namespace: %s}
spec:
  replicas: 1
%s  template: {spec: {gpu: none}}
  autoscaling:
    maxReplicas: 3
    %s
    metrics: [%s]
`, name, poisonNS, minAge, autoscaling, m)
		if _, err := c.KubectlWithInput(ctx, []byte(doc), "apply", "-f", "-"); err != nil {
			t.Fatalf("storing %s under the relaxed CRD: %v", name, err)
		}
	}
	if err := c.InstallCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	// The real CRD refuses such objects again (a moment after the update).
	framework.Poll(t, tenancyTimeout, "the real CRD to refuse interval abc", func(ctx context.Context) (bool, string) {
		_, err := c.KubectlWithInput(ctx, []byte(`apiVersion: gputask.io/v1
kind: GPUTaskSet
metadata: {name: refused, namespace: `+poisonNS+`}
spec:
  template: {spec: {gpu: none}}
  autoscaling: {maxReplicas: 3, interval: abc, metrics: [{name: load, http: {url: "http://x"}}]}
`), "apply", "--dry-run=server", "-f", "-")
		return err != nil && strings.Contains(err.Error(), "interval"), fmt.Sprintf("%v", err)
	})

	// The healthy set keeps scaling: 2 → 5 → 8 at load 0.9.
	load.Set(loadHigh)
	waitReplicas(t, c, healthyNS, "healthy", 8, "scaled up at load 0.9 next to the poison")
	if code, body := framework.HTTPGet(ctx, "http://"+probeAddr+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d %q, want 200", code, body)
	}
	for name, field := range wantField {
		cond := waitSetCondition(t, c, poisonNS, name, gputaskv1.ConditionSpecValid, func(cond *metav1.Condition) bool {
			return cond.Status == metav1.ConditionFalse && cond.Reason == "InvalidSpec"
		})
		if !strings.Contains(cond.Message, field) {
			t.Errorf("%s: SpecValid message %q does not name %s", name, cond.Message, field)
		}
	}

	// After a restart, the lists decode, so the controller gets ready and
	// scales the healthy set down.
	probeAddr = restart(t)
	waitReady(t, probeAddr)
	load.Set(loadLow)
	waitReplicas(t, c, healthyNS, "healthy", 1, "scaled down at load 0.3 after a restart")

	// Fixing a bad set brings it back: its SpecValid condition goes away.
	set, err := c.GPUTask.GputaskV1().GPUTaskSets(poisonNS).Get(ctx, "bad-interval", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	set.Spec.Autoscaling.Interval = &gputaskv1.Duration{Duration: time.Second}
	if _, err := c.GPUTask.GputaskV1().GPUTaskSets(poisonNS).Update(ctx, set, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("fixing bad-interval: %v", err)
	}
	waitSetCondition(t, c, poisonNS, "bad-interval", gputaskv1.ConditionScalingActive, func(cond *metav1.Condition) bool {
		return cond.Status == metav1.ConditionTrue
	})
	fixed, err := c.GPUTask.GputaskV1().GPUTaskSets(poisonNS).Get(ctx, "bad-interval", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cond := meta.FindStatusCondition(fixed.Status.Conditions, gputaskv1.ConditionSpecValid); cond != nil {
		t.Errorf("bad-interval still has SpecValid after the fix: %+v", cond)
	}
	// A fix outside spec.autoscaling is found too, at the latest at the
	// next periodic check.
	set, err = c.GPUTask.GputaskV1().GPUTaskSets(poisonNS).Get(ctx, "bad-min-age", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	set.Spec.MinTaskAge = &gputaskv1.Duration{Duration: time.Minute}
	if _, err := c.GPUTask.GputaskV1().GPUTaskSets(poisonNS).Update(ctx, set, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("fixing bad-min-age: %v", err)
	}
	waitSetCondition(t, c, poisonNS, "bad-min-age", gputaskv1.ConditionScalingActive, func(cond *metav1.Condition) bool {
		return cond.Status == metav1.ConditionTrue
	})
}

// relaxSetCRD replaces the GPUTaskSet CRD with one that has no patterns,
// bounds or CEL rules, as the CRD had before them; InstallCRDs puts the real
// one back.
func relaxSetCRD(t *testing.T, c *framework.ControlPlane) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(c.Root, "artifacts", "crds", "gputask.io_gputasksets.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	stripValidations(doc)
	raw, err = yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	relaxed := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(raw, relaxed); err != nil {
		t.Fatal(err)
	}
	crds := c.APIExtensions.ApiextensionsV1().CustomResourceDefinitions()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current, err := crds.Get(context.Background(), relaxed.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		current.Spec = relaxed.Spec
		_, err = crds.Update(context.Background(), current, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("relaxing the GPUTaskSet CRD: %v", err)
	}
	// The API server applies a new schema a moment after the update.
	framework.Poll(t, tenancyTimeout, "the relaxed CRD to apply", func(ctx context.Context) (bool, string) {
		_, err := c.KubectlWithInput(ctx, []byte(`apiVersion: gputask.io/v1
kind: GPUTaskSet
metadata: {name: probe, namespace: default}
spec: {template: {spec: {gpu: none}}, autoscaling: {maxReplicas: 1, interval: abc, metrics: [{name: m, http: {url: "http://x"}}]}}
`), "apply", "--dry-run=server", "-f", "-")
		return err == nil, fmt.Sprintf("%v", err)
	})
}

// stripValidations removes every pattern, bound and CEL rule from a schema.
func stripValidations(node any) {
	switch n := node.(type) {
	case map[string]any:
		for _, k := range []string{"x-kubernetes-validations", "pattern", "maxLength", "minLength", "maximum", "minimum", "maxItems", "minItems", "enum"} {
			// A keyword's value is never an object; a property of that
			// name would be, and stays.
			if _, isSchema := n[k].(map[string]any); !isSchema {
				delete(n, k)
			}
		}
		for _, v := range n {
			stripValidations(v)
		}
	case []any:
		for _, v := range n {
			stripValidations(v)
		}
	}
}

func waitReplicas(t *testing.T, c *framework.ControlPlane, ns, name string, want int32, what string) {
	t.Helper()
	framework.Poll(t, tenancyTimeout, fmt.Sprintf("%s/%s at %d replicas (%s)", ns, name, want, what), func(ctx context.Context) (bool, string) {
		set, err := c.GPUTask.GputaskV1().GPUTaskSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return ptr.Deref(set.Spec.Replicas, 1) == want, fmt.Sprintf("replicas %d, conditions %s", ptr.Deref(set.Spec.Replicas, 1), toJSON(set.Status.Conditions))
	})
}

func waitReady(t *testing.T, probeAddr string) {
	t.Helper()
	framework.Poll(t, tenancyTimeout, "/readyz 200", func(ctx context.Context) (bool, string) {
		code, body := framework.HTTPGet(ctx, "http://"+probeAddr+"/readyz")
		return code == http.StatusOK, fmt.Sprintf("readyz %d %q", code, body)
	})
}
