package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDiscovery checks what kubectl users rely on: the short name, the
// category and the field documentation.
func TestDiscovery(t *testing.T) {
	list, err := cp.Kube.Discovery().ServerResourcesForGroupVersion("gputask.io/v1")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]metav1.APIResource{}
	for _, r := range list.APIResources {
		byName[r.Name] = r
	}
	tests := []struct {
		resource, kind, shortName string
	}{
		{"gputasks", "GPUTask", "gt"},
		{"gputasksets", "GPUTaskSet", "gts"},
	}
	for _, tc := range tests {
		r, ok := byName[tc.resource]
		if !ok {
			t.Errorf("discovery lacks %s; has %v", tc.resource, byName)
			continue
		}
		if r.Kind != tc.kind || !r.Namespaced {
			t.Errorf("%s: kind %q namespaced %v, want %q namespaced", tc.resource, r.Kind, r.Namespaced, tc.kind)
		}
		if !slices.Contains(r.ShortNames, tc.shortName) {
			t.Errorf("%s: short names %v, want %q", tc.resource, r.ShortNames, tc.shortName)
		}
		if !slices.Contains(r.Categories, "gpu") {
			t.Errorf("%s: categories %v, want gpu", tc.resource, r.Categories)
		}
		for _, sub := range []string{"/status"} {
			if _, ok := byName[tc.resource+sub]; !ok {
				t.Errorf("discovery lacks %s%s", tc.resource, sub)
			}
		}
	}
	if _, ok := byName["gputasksets/scale"]; !ok {
		t.Errorf("discovery lacks gputasksets/scale")
	}

	ns := cp.NamespaceT(t)
	out := cp.KubectlT(t, "explain", "gputask.spec")
	for _, want := range []string{"gpu-amount", "reschedulePolicy", "GPUAmount is how many GPUs"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl explain gputask.spec lacks %q:\n%s", want, out)
		}
	}
	// The short name and the category resolve through discovery in kubectl.
	for _, name := range []string{"gt", "gpu", "gts"} {
		if _, err := cp.Kubectl(context.Background(), "get", name, "-n", ns); err != nil {
			t.Errorf("kubectl get %s: %v", name, err)
		}
	}
}

// taskJSON returns a GPUTask manifest with spec fields given as raw JSON, so
// that a test can send 2 and "2" and values the Go types could not hold.
func taskJSON(name string, specFields ...string) string {
	return fmt.Sprintf(`{"apiVersion":"gputask.io/v1","kind":"GPUTask","metadata":{"name":%q},"spec":{%s}}`,
		name, strings.Join(specFields, ","))
}

// createRaw posts a manifest to the resource in ns, as kubectl would.
func createRaw(ctx context.Context, ns, resource, manifest string) error {
	return cp.GPUTask.GputaskV1().RESTClient().Post().
		Namespace(ns).Resource(resource).
		Body([]byte(manifest)).SetHeader("Content-Type", "application/json").
		Do(ctx).Error()
}

// TestGPUTaskValidation sends one invalid field per case and expects the
// apiserver to refuse it as Invalid, naming the field; the valid forms must
// be accepted.
func TestGPUTaskValidation(t *testing.T) {
	ns := cp.NamespaceT(t)
	ctx := context.Background()
	invalid := []struct {
		name, field, wantField string
	}{
		{"gpu-amount-zero", `"gpu-amount":0`, "gpu-amount"},
		{"gpu-amount-negative", `"gpu-amount":-1`, "gpu-amount"},
		{"gpu-amount-word", `"gpu-amount":"abc"`, "gpu-amount"},
		{"gpu-amount-fraction", `"gpu-amount":"1.5"`, "gpu-amount"},
		{"gpu-amount-too-many", `"gpu-amount":2000`, "gpu-amount"},
		{"gpu-amount-zero-string", `"gpu-amount":"0"`, "gpu-amount"},
		{"cpu-word", `"cpu":"abc"`, "spec.cpu"},
		{"memory-word", `"memory":"lots"`, "spec.memory"},
		{"gpu-amount-too-many-string", `"gpu-amount":"2000"`, "gpu-amount"},
		{"cpu-negative", `"cpu":"-1"`, "spec.cpu"},
		{"cpu-negative-int", `"cpu":-2`, "spec.cpu"},
		{"cpu-zero", `"cpu":0`, "spec.cpu"},
		{"memory-negative", `"memory":"-4Gi"`, "spec.memory"},
		{"memory-zero-string", `"memory":"0"`, "spec.memory"},
		{"reschedule-policy", `"reschedulePolicy":"Sometimes"`, "reschedulePolicy"},
		{"gpu-label-value", `"gpu":"A100 80GB!"`, "spec.gpu"},
		{"gpu-label-too-long", fmt.Sprintf(`"gpu":%q`, strings.Repeat("a", 64)), "spec.gpu"},
		{"gpu-alternatives-without-gpu", `"gpuAlternatives":["H100"]`, "gpuAlternatives needs gpu"},
		{"gpu-alternatives-repeat-gpu", `"gpu":"A100","gpuAlternatives":["A100"]`, "gpuAlternatives must not repeat gpu"},
		{"gpu-alternatives-twice", `"gpu":"A100","gpuAlternatives":["H100","H100"]`, "spec.gpuAlternatives"},
		{"template-container-without-name", `"template":{"spec":{"containers":[{"image":"x"}]}}`, "spec.template.spec.containers[0].name"},
		{"template-unknown-restart-policy-type", `"template":{"spec":{"restartPolicy":3}}`, "spec.template.spec.restartPolicy"},
	}
	for i, tc := range invalid {
		t.Run("rejects/"+tc.name, func(t *testing.T) {
			err := createRaw(ctx, ns, "gputasks", taskJSON(fmt.Sprintf("bad-%d", i), tc.field))
			if !apierrors.IsInvalid(err) {
				t.Fatalf("create with %s: got %v, want Invalid", tc.field, err)
			}
			if !strings.Contains(err.Error(), tc.wantField) {
				t.Errorf("error does not name %s: %v", tc.wantField, err)
			}
		})
	}

	valid := []struct {
		name   string
		fields []string
	}{
		{"integers", []string{`"gpu-amount":2`, `"cpu":2`, `"memory":1073741824`}},
		{"strings", []string{`"gpu-amount":"2"`, `"cpu":"2"`, `"memory":"16Gi"`}},
		{"millicores-and-model", []string{`"cpu":"500m"`, `"gpu":"NVIDIA-A100-SXM4-80GB"`, `"reschedulePolicy":"Periodic"`}},
		{"max-gpus", []string{`"gpu-amount":1024`}},
		{"max-gpus-string", []string{`"gpu-amount":"1024"`, `"cpu":"0.5"`, `"memory":"1e9"`}},
		{"template", []string{`"gpu":"A100"`, `"gpuAlternatives":["H100"]`, `"template":{"metadata":{"labels":{"q":"a"}},"spec":{"restartPolicy":"OnFailure","volumes":[{"name":"shm","emptyDir":{"medium":"Memory"}}]}}`}},
		{"defaults-only", nil},
	}
	for i, tc := range valid {
		t.Run("accepts/"+tc.name, func(t *testing.T) {
			if err := createRaw(ctx, ns, "gputasks", taskJSON(fmt.Sprintf("good-%d", i), tc.fields...)); err != nil {
				t.Fatalf("create with %v: %v", tc.fields, err)
			}
		})
	}

	// Defaults are applied by the apiserver, so every client sees them.
	task, err := cp.GPUTask.GputaskV1().GPUTasks(ns).Get(ctx, fmt.Sprintf("good-%d", len(valid)-1), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if task.Spec.GPUAmount == nil || task.Spec.GPUAmount.String() != "1" || task.Spec.ReschedulePolicy != "OnFailure" {
		t.Errorf("defaults: gpu-amount %v reschedulePolicy %q, want 1 and OnFailure", task.Spec.GPUAmount, task.Spec.ReschedulePolicy)
	}
}

// TestGPUTaskSetValidation covers the cross-field rules of a GPUTaskSet.
func TestGPUTaskSetValidation(t *testing.T) {
	ns := cp.NamespaceT(t)
	ctx := context.Background()
	set := func(name, autoscaling string) string {
		return fmt.Sprintf(`{"apiVersion":"gputask.io/v1","kind":"GPUTaskSet","metadata":{"name":%q},
			"spec":{"template":{"spec":{"gpu":"A100"}},"autoscaling":%s}}`, name, autoscaling)
	}
	const httpMetric = `{"name":"load","http":{"url":"http://127.0.0.1:9/load"}}`
	const sloMetrics = `[{"name":"in","role":"Arrivals","http":{"url":"http://127.0.0.1:9/in"}},{"name":"running","role":"Running","http":{"url":"http://127.0.0.1:9/running"}}]`
	const bothMetric = `{"name":"load","http":{"url":"http://127.0.0.1:9/load"},"prometheus":{"serverAddress":"http://127.0.0.1:9","query":"up"}}`
	tests := []struct {
		name, autoscaling, wantMessage string
	}{
		{"min-above-max", `{"minReplicas":5,"maxReplicas":2,"metrics":[` + httpMetric + `]}`, "minReplicas must not exceed maxReplicas"},
		{"http-and-prometheus", `{"maxReplicas":2,"metrics":[` + bothMetric + `]}`, "exactly one of http or prometheus"},
		{"neither-source", `{"maxReplicas":2,"metrics":[{"name":"load"}]}`, "exactly one of http or prometheus"},
		{"burst-factor", `{"maxReplicas":2,"metrics":[` + httpMetric + `],"burst":{"factor":"1"}}`, "factor must be between 1.1 and 100"},
		{"burst-window", `{"maxReplicas":2,"metrics":[` + httpMetric + `],"burst":{"window":"2h"}}`, "window must be between 0s and 1h"},
		{"schedule-not-cron", `{"maxReplicas":2,"metrics":[` + httpMetric + `],"schedules":[{"name":"peak","start":"at nine","duration":"1h","minReplicas":1}]}`, "spec.autoscaling.schedules[0].start"},
		{"schedule-ceiling-under-floor", `{"maxReplicas":9,"metrics":[` + httpMetric + `],"schedules":[{"name":"peak","start":"0 9 * * 1-5","duration":"1h","minReplicas":4,"maxReplicas":2}]}`, "maxReplicas must be at least minReplicas"},
		{"predictive-mode", `{"maxReplicas":2,"metrics":[` + httpMetric + `],"predictive":{"mode":"Sometimes"}}`, "spec.autoscaling.predictive.mode"},
		{"schedule-too-long", `{"maxReplicas":9,"metrics":[` + httpMetric + `],"schedules":[{"name":"peak","start":"0 9 * * 1-5","duration":"200h","minReplicas":4}]}`, "duration must be more than 0s and at most 168h"},
		{"slo-wait-under-1s", `{"maxReplicas":9,"policy":{"type":"SLO","slo":{"wait":"500ms","slotsPerTask":8}},"metrics":` + sloMetrics + `}`, "wait must be between 1s and 1h"},
		{"slo-percentile-over-99.9", `{"maxReplicas":9,"policy":{"type":"SLO","slo":{"wait":"10s","percentile":"99.95","slotsPerTask":8}},"metrics":` + sloMetrics + `}`, "percentile must be between 50 and 99.9"},
		{"slo-without-slo", `{"maxReplicas":9,"policy":{"type":"SLO"},"metrics":` + sloMetrics + `}`, "slo is required by the SLO policy and read by it only"},
		{"slo-without-running", `{"maxReplicas":9,"policy":{"type":"SLO","slo":{"wait":"10s","slotsPerTask":8}},"metrics":[{"name":"in","role":"Arrivals","http":{"url":"http://127.0.0.1:9/in"}}]}`, "needs a metric of role Running and one of role Arrivals or Completions"},
		{"role-on-step", `{"maxReplicas":9,"metrics":[{"name":"in","role":"Arrivals","http":{"url":"http://127.0.0.1:9/in"}}]}`, "metric roles are read by the SLO policy only"},
	}
	for i, tc := range tests {
		t.Run("rejects/"+tc.name, func(t *testing.T) {
			err := createRaw(ctx, ns, "gputasksets", set(fmt.Sprintf("bad-%d", i), tc.autoscaling))
			if !apierrors.IsInvalid(err) {
				t.Fatalf("got %v, want Invalid", err)
			}
			if !strings.Contains(err.Error(), tc.wantMessage) {
				t.Errorf("error lacks %q: %v", tc.wantMessage, err)
			}
		})
	}
	t.Run("accepts/burst-and-schedules", func(t *testing.T) {
		err := createRaw(ctx, ns, "gputasksets", set("scheduled", `{"maxReplicas":9,"metrics":[`+httpMetric+`],"burst":{"factor":"2.5","window":"90s"},"predictive":{"mode":"Preview","leadTime":"3m"},
			"schedules":[{"name":"weekday-peak","start":"0 9 * * 1-5","timeZone":"Europe/Berlin","duration":"3h","minReplicas":4,"maxReplicas":9},{"name":"night","start":"0 22 * * *","duration":"8h","minReplicas":0,"maxReplicas":1}]}`))
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Run("accepts/slo", func(t *testing.T) {
		err := createRaw(ctx, ns, "gputasksets", set("slo", `{"maxReplicas":9,"policy":{"type":"SLO","slo":{"wait":"10s","percentile":95,"slotsPerTask":8,"serviceTimeVariability":"1.5"}},"metrics":`+sloMetrics+`}`))
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Run("accepts/min-equals-max", func(t *testing.T) {
		err := createRaw(ctx, ns, "gputasksets", set("good", `{"minReplicas":2,"maxReplicas":2,"metrics":[`+httpMetric+`]}`))
		if err != nil {
			t.Fatal(err)
		}
	})
}

// TestGPUTaskSetScaleSubresource checks that `kubectl scale` and the scale
// client (what an HPA and the autoscaler use) reach spec.replicas.
func TestGPUTaskSetScaleSubresource(t *testing.T) {
	ns := cp.NamespaceT(t)
	ctx := context.Background()
	manifest := `{"apiVersion":"gputask.io/v1","kind":"GPUTaskSet","metadata":{"name":"pool"},"spec":{"template":{"spec":{"gpu":"A100"}}}}`
	if err := createRaw(ctx, ns, "gputasksets", manifest); err != nil {
		t.Fatal(err)
	}
	sets := cp.GPUTask.GputaskV1().GPUTaskSets(ns)
	set, err := sets.Get(ctx, "pool", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if set.Spec.Replicas == nil || *set.Spec.Replicas != 1 {
		t.Errorf("default replicas = %v, want 1", set.Spec.Replicas)
	}

	cp.KubectlT(t, "scale", "-n", ns, "gts/pool", "--replicas=3")
	scale, err := sets.GetScale(ctx, "pool", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if scale.Spec.Replicas != 3 {
		t.Errorf("scale after kubectl scale = %d, want 3", scale.Spec.Replicas)
	}

	scale.Spec.Replicas = 5
	scale, err = sets.UpdateScale(ctx, "pool", scale, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	set, err = sets.Get(ctx, "pool", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if set.Spec.Replicas == nil || *set.Spec.Replicas != 5 {
		t.Errorf("spec.replicas after UpdateScale = %v, want 5", set.Spec.Replicas)
	}

	scale.Spec.Replicas = -1
	if _, err := sets.UpdateScale(ctx, "pool", scale, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("UpdateScale to -1: got %v, want Invalid", err)
	}
}
