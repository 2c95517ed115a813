package autoscaler

import (
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/scaling"
)

func TestBuildInputsAppliesDefaultsAndSpec(t *testing.T) {
	set := newSet("web", 4)
	set.Spec.Autoscaling.MinReplicas = nil
	set.Status.HeldBackReplicas = 2
	set.Status.ConsecutiveFailures = 1
	in := scaling.InputsFor(set, t0, nil, nil, nil)
	want := scaling.Inputs{Now: t0, Current: 4, Min: scaling.DefaultMinReplicas, Max: 20,
		Policy:              scaling.Policy{StepUp: scaling.DefaultStepUp, StepDown: scaling.DefaultStepDown, Tolerance: scaling.DefaultTolerance},
		StabilizationWindow: scaling.DefaultStabilizationWindow, FailureThreshold: scaling.DefaultFailureThreshold,
		ConsecutiveFailures: 1, HeldBack: 2, Interval: scaling.DefaultInterval}
	if !reflect.DeepEqual(in, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", in, want)
	}

	as := set.Spec.Autoscaling
	as.MinReplicas = ptr.To[int32](2)
	as.Policy = gputaskv1.ScalingPolicy{Type: gputaskv1.ProportionalPolicy, StepUp: ptr.To[int32](5), StepDown: ptr.To[int32](2), Tolerance: ptr.To(resource.MustParse("0.2"))}
	as.ScaleDownStabilizationWindow = &gputaskv1.Duration{}
	as.ScaleUpLimit = &gputaskv1.ScaleUpLimit{Tasks: 4, Period: &gputaskv1.Duration{Duration: 2 * time.Minute}}
	as.FailureThreshold = ptr.To[int32](5)
	as.Fallback = &gputaskv1.Fallback{Replicas: 3}
	as.DryRun = true
	set.Spec.Replicas = nil
	set.Annotations = map[string]string{gputaskv1.AnnotationPaused: "true", gputaskv1.AnnotationStopped: "yes"}
	set.Status.LastScaleTime = ptr.To(metav1.NewTime(t0.Add(-time.Minute)))
	in = scaling.InputsFor(set, t0, nil, ptr.To[int32](9), nil)
	want = scaling.Inputs{Now: t0, Current: 1, Min: 2, Max: 20,
		Policy:       scaling.Policy{Type: gputaskv1.ProportionalPolicy, StepUp: 5, StepDown: 2, Tolerance: 0.2},
		ScaleUpLimit: &scaling.ScaleUpLimit{Tasks: 4, Period: 2 * time.Minute}, LastScaleTime: t0.Add(-time.Minute),
		FailureThreshold: 5, Fallback: ptr.To[int32](3), Capacity: ptr.To[int32](9),
		ConsecutiveFailures: 1, HeldBack: 2, Paused: true, DryRun: true, Interval: scaling.DefaultInterval}
	if !reflect.DeepEqual(in, want) {
		t.Errorf("spec:\n got %+v\nwant %+v", in, want)
	}
	if got := scaling.IntervalOf(&gputaskv1.AutoscalingSpec{Interval: &gputaskv1.Duration{Duration: time.Millisecond}}); got != scaling.MinInterval {
		t.Errorf("interval = %v, want the %v floor", got, scaling.MinInterval)
	}
}

func TestMetricInputDefaults(t *testing.T) {
	got := scaling.MetricFor(gputaskv1.MetricSpec{Name: "q", Target: ptr.To(resource.MustParse("500m"))})
	want := scaling.MetricInput{Name: "q", UpThreshold: 0.8, DownThreshold: 0.5, Target: 0.5}
	if got != want {
		t.Errorf("metricInput = %+v, want %+v", got, want)
	}
}
