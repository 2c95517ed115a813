package autoscaler

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

func TestInvalidSpecStatus(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	before := &gputaskv1.GPUTaskSetStatus{
		Replicas:        3,
		LoadIndex:       "0.9",
		DesiredReplicas: ptr.To[int32](5),
		Conditions: []metav1.Condition{
			{Type: gputaskv1.ConditionScalingActive, Status: metav1.ConditionTrue, Reason: ReasonValidMetricFound, LastTransitionTime: t0},
			{Type: gputaskv1.ConditionReplicaFailure, Status: metav1.ConditionTrue, Reason: "FailedCreate", LastTransitionTime: t0},
		},
	}
	got := invalidSpecStatus(before, "spec.autoscaling.interval: Invalid value", t1)

	if got.LoadIndex != "" || got.DesiredReplicas != nil {
		t.Errorf("autoscaler fields kept: %+v", got)
	}
	if got.Replicas != 3 || meta.FindStatusCondition(got.Conditions, gputaskv1.ConditionReplicaFailure) == nil {
		t.Errorf("the set controller's fields changed: %+v", got)
	}
	for _, ct := range []string{gputaskv1.ConditionSpecValid, gputaskv1.ConditionScalingActive} {
		c := meta.FindStatusCondition(got.Conditions, ct)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != gputaskv1.ReasonInvalidSpec || c.LastTransitionTime != t1 {
			t.Errorf("%s = %+v, want False/InvalidSpec at t1", ct, c)
		}
	}
	// Once written, the next pass finds nothing to write.
	again := invalidSpecStatus(got, "spec.autoscaling.interval: Invalid value", metav1.NewTime(t1.Add(time.Minute)))
	if !sameIgnoringTimes(got, again) {
		t.Errorf("a second pass changes the status:\n%+v\n%+v", got, again)
	}
	if c := meta.FindStatusCondition(again.Conditions, gputaskv1.ConditionSpecValid); c.LastTransitionTime != t1 {
		t.Errorf("SpecValid moved its transition time to %v", c.LastTransitionTime)
	}
	// A valid spec's status has no SpecValid: the autoscaler owns it.
	if cleared := withoutAutoscalerStatus(got); meta.FindStatusCondition(cleared.Conditions, gputaskv1.ConditionSpecValid) != nil {
		t.Error("SpecValid is not one of the autoscaler's conditions")
	}
}
