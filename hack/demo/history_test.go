package main

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

func TestSparkline(t *testing.T) {
	cases := []struct {
		values []float64
		top    float64
		want   string
	}{
		{nil, 1, ""},
		{[]float64{0, 0.5, 1}, 1, "▁▅█"},
		{[]float64{-1, 2}, 1, "▁█"},
		{[]float64{1, 4, 7, 8}, 8, "▂▅▇█"},
		{[]float64{3}, 0, "▁"},
	}
	for _, tc := range cases {
		if got := sparkline(tc.values, tc.top); got != tc.want {
			t.Errorf("sparkline(%v, %v) = %q, want %q", tc.values, tc.top, got, tc.want)
		}
	}
}

func TestHistory(t *testing.T) {
	var h []sample
	for i := range maxHistory + 5 {
		h = appendSample(h, sample{desired: int32(i)})
	}
	if len(h) != maxHistory || h[0].desired != 5 {
		t.Errorf("kept %d samples starting at %d, want %d starting at 5", len(h), h[0].desired, maxHistory)
	}
	if got := last(h, 3); len(got) != 3 || got[2].desired != maxHistory+4 {
		t.Errorf("last(3) = %v", got)
	}
	if got := last(h[:2], 3); len(got) != 2 {
		t.Errorf("last(3) of 2 = %d samples, want 2", len(got))
	}
}

func TestNewSample(t *testing.T) {
	replicas, capacity := int32(4), int32(7)
	set := &gputaskv1.GPUTaskSet{
		Spec: gputaskv1.GPUTaskSetSpec{Replicas: &replicas},
		Status: gputaskv1.GPUTaskSetStatus{
			Replicas: 4, RunningReplicas: 1, PendingReplicas: 3, LoadIndex: "0.93", CapacityReplicas: &capacity,
			LastDecision: &gputaskv1.ScalingDecision{From: 1, To: 4, Reason: "ScaleUpAboveThreshold"},
		},
	}
	got := newSample(10*time.Second, 0.95, "peak", set)
	want := sample{at: 10 * time.Second, served: 0.95, segment: "peak", read: "0.93", desired: 4, tasks: 4, running: 1, pending: 3,
		capacity: "7", decision: "1->4 ScaleUpAboveThreshold"}
	if got != want {
		t.Errorf("newSample = %+v, want %+v", got, want)
	}
	empty := newSample(0, 0.3, "low", &gputaskv1.GPUTaskSet{})
	if empty.desired != 1 || empty.read != "-" || empty.capacity != "-" || empty.decision != "-" {
		t.Errorf("sample of a new set = %+v, want defaults", empty)
	}
}

func TestConditionSummary(t *testing.T) {
	conds := []metav1.Condition{
		{Type: gputaskv1.ConditionAbleToScale, Status: metav1.ConditionTrue, Reason: "ReadyForNewScale"},
		{Type: gputaskv1.ConditionScalingActive, Status: metav1.ConditionFalse, Reason: "FailedGetLoadIndex"},
		{Type: gputaskv1.ConditionScalingLimited, Status: metav1.ConditionTrue, Reason: "CapacityLimited"},
	}
	want := "AbleToScale=True ScalingActive=False(FailedGetLoadIndex) ScalingLimited=True(CapacityLimited)"
	if got := conditionSummary(conds); got != want {
		t.Errorf("conditionSummary = %q, want %q", got, want)
	}
}
