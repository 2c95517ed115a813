package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// TestVLLMDemoSet: the demo runs the example's metrics and SLO as the file
// has them, pointed at its own Prometheus, with times short enough to
// watch, on the pool's own node, with slow-starting workers.
func TestVLLMDemoSet(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", vllmSetFile))
	if err != nil {
		t.Fatal(err)
	}
	const promURL = "http://127.0.0.1:41234"
	out, err := vllmDemoSet(raw, promURL)
	if err != nil {
		t.Fatal(err)
	}
	var file, demo gputaskv1.GPUTaskSet
	if err := yaml.UnmarshalStrict(raw, &file); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(out, &demo); err != nil {
		t.Fatal(err)
	}
	for i := range file.Spec.Autoscaling.Metrics {
		file.Spec.Autoscaling.Metrics[i].Prometheus.ServerAddress = promURL
	}
	if !equality.Semantic.DeepEqual(demo.Spec.Autoscaling.Metrics, file.Spec.Autoscaling.Metrics) {
		t.Errorf("the demo's metrics\n%s\ndiffer from the file's but for the address", out)
	}
	if !equality.Semantic.DeepEqual(demo.Spec.Autoscaling.Policy, file.Spec.Autoscaling.Policy) {
		t.Errorf("the demo's policy %+v, the file's %+v", demo.Spec.Autoscaling.Policy, file.Spec.Autoscaling.Policy)
	}
	if strings.Contains(string(out), placeholderPrometheus) {
		t.Errorf("the demo's set still names %s", placeholderPrometheus)
	}
	a := demo.Spec.Autoscaling
	if a.Interval.Duration != 5*time.Second || a.StartupTimeout.Duration != time.Minute || a.ScaleDownStabilizationWindow.Duration != 30*time.Second ||
		demo.Spec.MinTaskAge.Duration != 20*time.Second || demo.Spec.ScaleIn.DrainTimeout.Duration != 30*time.Second {
		t.Errorf("the demo's times: interval %v startup %v window %v minTaskAge %v drain %v", a.Interval, a.StartupTimeout,
			a.ScaleDownStabilizationWindow, demo.Spec.MinTaskAge, demo.Spec.ScaleIn.DrainTimeout)
	}
	if demo.Spec.Template.Spec.GPU != vllmGPU || !slicesContainsEnv(demo.Spec.Template.Spec.Env) {
		t.Errorf("the demo's template: gpu %q env %v, want %s and %v", demo.Spec.Template.Spec.GPU, demo.Spec.Template.Spec.Env, vllmGPU, slowStartEnv)
	}
	if file.Spec.Autoscaling.Policy.SLO == nil || file.Spec.Autoscaling.Policy.SLO.SlotsPerTask != vllmSlots {
		t.Errorf("the file's slotsPerTask is not the fake pool's %d slots a worker", vllmSlots)
	}
	if _, err := vllmDemoSet([]byte(strings.ReplaceAll(string(raw), placeholderPrometheus, "http://elsewhere:9090")), promURL); err == nil {
		t.Error("a file without the placeholder address was accepted")
	}
}

func slicesContainsEnv(env []corev1.EnvVar) bool {
	for _, e := range env {
		if e == slowStartEnv {
			return true
		}
	}
	return false
}
