package main

import (
	"strings"
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
	workers := workerCounts{starting: 3, ready: 1, busy: 1}
	got := newSample(10*time.Second, 0.95, "peak", set, workers)
	want := sample{at: 10 * time.Second, served: 0.95, segment: "peak", read: "0.93", desired: 4, tasks: 4, workers: workers,
		capacity: "7", decision: "1->4 ScaleUpAboveThreshold"}
	if got != want {
		t.Errorf("newSample = %+v, want %+v", got, want)
	}
	empty := newSample(0, 0.3, "low", &gputaskv1.GPUTaskSet{}, workerCounts{})
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

func TestHistoryRow(t *testing.T) {
	cases := []struct {
		name string
		s    sample
		want string
	}{{
		name: "tasks starting after a step up",
		s: sample{at: 41600 * time.Millisecond, served: 0.91, segment: "ramp", read: "0.87", desired: 4, tasks: 4,
			workers: workerCounts{starting: 3, ready: 1}, capacity: "16", decision: "1->4 ScaleUpAboveThreshold"},
		want: "42s\t0.91 ramp\t0.87\t4\t4\t3\t1\t0\t0\t16\t1->4 ScaleUpAboveThreshold",
	}, {
		name: "busy tasks draining after a step down",
		s: sample{at: 150 * time.Second, served: 0.2, segment: "drop", read: "0.2", desired: 5, tasks: 7,
			workers: workerCounts{ready: 7, busy: 4, draining: 2}, capacity: "-", decision: "6->5 ScaleDownBelowThreshold"},
		want: "2m30s\t0.20 drop\t0.2\t5\t7\t0\t7\t4\t2\t-\t6->5 ScaleDownBelowThreshold",
	}}
	for _, tc := range cases {
		if got := historyRow(tc.s); got != tc.want {
			t.Errorf("%s: historyRow = %q, want %q", tc.name, got, tc.want)
		}
		if cols, header := strings.Count(historyRow(tc.s), "\t"), strings.Count(historyHeader, "\t"); cols != header {
			t.Errorf("%s: %d columns, header has %d", tc.name, cols+1, header+1)
		}
	}
}

func TestStatusCounts(t *testing.T) {
	set := &gputaskv1.GPUTaskSet{Status: gputaskv1.GPUTaskSetStatus{
		ReadyReplicas: 5, StartingReplicas: 3, DrainingReplicas: 2, RunningReplicas: 5, PendingReplicas: 3,
	}}
	want := "set status: ready 5, starting 3, draining 2, running 5, pending 3"
	if got := statusCounts(set); got != want {
		t.Errorf("statusCounts = %q, want %q", got, want)
	}
}
