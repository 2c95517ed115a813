package e2e

import (
	"context"
	"crypto/tls"
	"net/http"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gputask/gputask-controller/test/framework"
)

// TestMetricsNeedAuthorizedCaller: /metrics, served over HTTPS by default,
// answers a ServiceAccount bound to a role that may get /metrics, refuses a
// tenant's ServiceAccount (403) and an anonymous caller (401), as the API
// server's TokenReview and SubjectAccessReview decide. Health and readiness
// stay plain HTTP for the kubelet.
func TestMetricsNeedAuthorizedCaller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := cp.NamespaceT(t)

	// A Lease held elsewhere keeps this second controller a standby: it
	// serves its endpoints and never runs the controllers beside the shared
	// one.
	_, err := cp.Kube.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "held"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("another-replica"), LeaseDurationSeconds: ptr.To[int32](3600),
			RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	controller := cp.StartControllerT(t, "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0",
		"--leader-elect", "--leader-elect-resource-namespace="+ns, "--leader-elect-resource-name=held")
	metricsAddr, probeAddr := framework.ServingAddrT(t, controller, "metrics"), framework.ServingAddrT(t, controller, "health probes")

	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader-" + ns},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}
	if _, err := cp.Kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cp.Kube.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus", Namespace: ns}},
	}
	if _, err := cp.Kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cp.Kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	token := func(name string) string {
		t.Helper()
		if _, err := cp.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cp.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	scraper, tenant := token("prometheus"), token("tenant")

	// The controller's self-signed certificate: this test checks who may
	// read, not the certificate.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a self-signed test certificate on 127.0.0.1
	}}
	get := func(ctx context.Context, bearer string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+metricsAddr+"/metrics", nil)
		if err != nil {
			return 0, err.Error()
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Status
	}
	framework.Poll(t, waitTimeout, "the scraper reads /metrics", func(ctx context.Context) (bool, string) {
		code, msg := get(ctx, scraper)
		return code == http.StatusOK, msg
	})
	for _, tc := range []struct {
		who, token string
		want       int
	}{
		{"a tenant's ServiceAccount", tenant, http.StatusForbidden},
		{"an anonymous caller", "", http.StatusUnauthorized},
		{"a forged token", "forged", http.StatusUnauthorized},
	} {
		if code, msg := get(ctx, tc.token); code != tc.want {
			t.Errorf("%s: GET /metrics = %d (%s), want %d", tc.who, code, msg, tc.want)
		}
	}
	if code, body := framework.HTTPGet(ctx, "http://"+probeAddr+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz over plain HTTP = %d %q, want 200", code, body)
	}
	if code, _ := framework.HTTPGet(ctx, "http://"+metricsAddr+"/metrics"); code == http.StatusOK {
		t.Error("/metrics answered plain HTTP")
	}
	t.Logf("scraper 200, tenant 403, anonymous 401 on https://%s/metrics", metricsAddr)
}
