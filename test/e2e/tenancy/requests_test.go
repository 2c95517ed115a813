package tenancy

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

// testRequestShape: what a set may make the controller send. The CRD
// refuses a query in valueLocation and identity or hop-by-hop headers, in
// any case; a POST, which the controller here does not allow, is an
// InvalidMetricSpec and reaches no server.
func testRequestShape(t *testing.T, c *framework.ControlPlane) {
	ctx := context.Background()
	ns := c.NamespaceT(t)
	server := newExfilServer(t)
	sets := c.GPUTask.GputaskV1().GPUTaskSets(ns)
	value := "x"
	refusedByCRD := map[string]func(*gputaskv1.HTTPSource){
		"filter query": func(h *gputaskv1.HTTPSource) { h.ValueLocation = `[@this].#(SecretAccessKey>="kZ9")#|#` },
		"wildcard":     func(h *gputaskv1.HTTPSource) { h.ValueLocation = `data.*` },
		"modifier":     func(h *gputaskv1.HTTPSource) { h.ValueLocation = `@reverse` },
		"X-Remote-User": func(h *gputaskv1.HTTPSource) {
			h.Headers = []gputaskv1.HTTPHeader{{Name: "x-remote-user", Value: &value}}
		},
		"Impersonate-Group": func(h *gputaskv1.HTTPSource) {
			h.Headers = []gputaskv1.HTTPHeader{{Name: "Impersonate-Group", Value: &value}}
		},
		"X-Forwarded-For": func(h *gputaskv1.HTTPSource) {
			h.Headers = []gputaskv1.HTTPHeader{{Name: "X-FORWARDED-FOR", Value: &value}}
		},
		"Host": func(h *gputaskv1.HTTPSource) { h.Headers = []gputaskv1.HTTPHeader{{Name: "Host", Value: &value}} },
		"inline Authorization": func(h *gputaskv1.HTTPSource) {
			h.Headers = []gputaskv1.HTTPHeader{{Name: "Authorization", Value: &value}}
		},
	}
	refused := 0
	for what, edit := range refusedByCRD {
		set := exfilSet("shape", server.srv.URL)
		set.Spec.Autoscaling.Metrics[0].HTTP.Auth = nil
		set.Spec.Autoscaling.Metrics[0].HTTP.Headers = nil
		edit(set.Spec.Autoscaling.Metrics[0].HTTP)
		_, err := sets.Create(ctx, set, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if apierrors.IsInvalid(err) {
			refused++
			continue
		}
		t.Errorf("a set with %s: %v, want Invalid", what, err)
	}
	if refused != len(refusedByCRD) {
		t.Errorf("the CRD refused %d of %d sets", refused, len(refusedByCRD))
	}

	// Stored before the CRD had these rules, the same sets are refused when
	// the controller builds their sources: InvalidMetricSpec, no request.
	relaxSetCRD(t, c)
	stored := map[string]func(*gputaskv1.HTTPSource){
		"stored-query":  refusedByCRD["filter query"],
		"stored-header": refusedByCRD["X-Remote-User"],
	}
	for name, edit := range stored {
		set := exfilSet(name, server.srv.URL)
		set.Spec.Autoscaling.Metrics[0].HTTP.Auth = nil
		set.Spec.Autoscaling.Metrics[0].HTTP.Headers = nil
		edit(set.Spec.Autoscaling.Metrics[0].HTTP)
		if _, err := sets.Create(ctx, set, metav1.CreateOptions{}); err != nil {
			t.Fatalf("storing %s under the relaxed CRD: %v", name, err)
		}
	}
	if err := c.InstallCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	for name, field := range map[string]string{"stored-query": "http.valueLocation", "stored-header": "http.headers[0].name"} {
		cond := waitSetCondition(t, c, ns, name, gputaskv1.ConditionScalingActive, func(cond *metav1.Condition) bool {
			return cond.Reason == "InvalidMetricSpec" && strings.Contains(cond.Message, field)
		})
		t.Logf("%s: %s", name, cond.Message)
		waitEvaluations(t, c, ns, name, 2)
	}
	if n := server.requests.Load(); n != 0 {
		t.Errorf("the server got %d requests from stored sets the CRD now refuses, want 0", n)
	}

	post := exfilSet("post", server.srv.URL)
	post.Spec.Autoscaling.Metrics[0].HTTP.Auth = nil
	post.Spec.Autoscaling.Metrics[0].HTTP.Headers = nil
	post.Spec.Autoscaling.Metrics[0].HTTP.Method = "POST"
	if _, err := sets.Create(ctx, post, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cond := waitSetCondition(t, c, ns, post.Name, gputaskv1.ConditionScalingActive, func(cond *metav1.Condition) bool {
		return cond.Reason == "InvalidMetricSpec" && strings.Contains(cond.Message, "POST is not allowed")
	})
	t.Logf("POST: %s", cond.Message)
	waitEvaluations(t, c, ns, post.Name, 2)
	if n := server.requests.Load(); n != 0 {
		t.Errorf("the server got %d requests from a POST set, want 0", n)
	}
}
