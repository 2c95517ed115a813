package main

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

func TestShortSchedulerMessage(t *testing.T) {
	cases := []struct {
		name, msg, want string
	}{{
		name: "a shortage sorted behind a selector mismatch comes first",
		msg: "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 Insufficient nvidia.com/gpu. " +
			"preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod.",
		want: "2 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node affinity/selector (0/3 nodes)",
	}, {
		name: "as kube-scheduler v1.36 writes it, with a DRA part",
		msg: "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 Insufficient nvidia.com/gpu. " +
			"no new claims to deallocate, preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, " +
			"2 No preemption victims found for incoming pod.",
		want: "2 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node affinity/selector (0/3 nodes)",
	}, {
		name: "shortages first even when fewer nodes report them",
		msg:  "0/8 nodes are available: 2 Insufficient nvidia.com/gpu, 6 node(s) didn't match Pod's node affinity/selector.",
		want: "2 Insufficient nvidia.com/gpu, 6 node(s) didn't match Pod's node affinity/selector (0/8 nodes)",
	}, {
		name: "several shortages and other reasons, larger counts first within each",
		msg: "0/9 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, " +
			"3 Insufficient nvidia.com/gpu, 4 node(s) didn't match Pod's node affinity/selector.",
		want: "3 Insufficient nvidia.com/gpu, 1 Insufficient cpu, 4 node(s) didn't match Pod's node affinity/selector, " +
			"1 node(s) had untolerated taint {node.kubernetes.io/not-ready: } (0/9 nodes)",
	}, {
		name: "too many pods is a shortage",
		msg:  "0/2 nodes are available: 1 node(s) were unschedulable, 1 Too many pods.",
		want: "1 Too many pods, 1 node(s) were unschedulable (0/2 nodes)",
	}, {
		name: "a comma inside a reason stays with it",
		msg:  "0/2 nodes are available: 2 node(s) didn't satisfy plugin(s) [A, B].",
		want: "2 node(s) didn't satisfy plugin(s) [A, B] (0/2 nodes)",
	}, {
		name: "a PreFilter message without counts",
		msg:  `0/3 nodes are available: persistentvolumeclaim "data" not found. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.`,
		want: `persistentvolumeclaim "data" not found (0/3 nodes)`,
	}, {
		name: "no nodes at all",
		msg:  "no nodes available to schedule pods",
		want: "no nodes available to schedule pods",
	}, {
		name: "empty",
		msg:  "",
		want: "",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := shortSchedulerMessage(tc.msg); got != tc.want {
				t.Errorf("shortSchedulerMessage(%q)\n got %q\nwant %q", tc.msg, got, tc.want)
			}
		})
	}
}

func TestWhy(t *testing.T) {
	unschedulable := "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 Insufficient nvidia.com/gpu. " +
		"preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
	cond := func(t, reason, msg string, s metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg}
	}
	cases := []struct {
		name       string
		conditions []metav1.Condition
		want       string
	}{{
		name: "running",
		conditions: []metav1.Condition{
			cond(gputaskv1.ConditionSpecValid, "Valid", "", metav1.ConditionTrue),
			cond(gputaskv1.ConditionScheduled, "PodScheduled", "", metav1.ConditionTrue),
		},
		want: "",
	}, {
		name: "unschedulable: the shortage fits in the column",
		conditions: []metav1.Condition{
			cond(gputaskv1.ConditionScheduled, "Unschedulable", unschedulable, metav1.ConditionFalse),
		},
		want: "Unschedulable: 2 Insufficient nvidia.com/gpu, 1 node(s) didn't matc...",
	}, {
		name: "an invalid spec wins over scheduling",
		conditions: []metav1.Condition{
			cond(gputaskv1.ConditionScheduled, "PodNotCreated", "", metav1.ConditionFalse),
			cond(gputaskv1.ConditionSpecValid, "InvalidSpec", "spec.gpu-amount: must be at least 1", metav1.ConditionFalse),
		},
		want: "InvalidSpec: spec.gpu-amount: must be at least 1",
	}, {
		name: "a reason without a message",
		conditions: []metav1.Condition{
			cond(gputaskv1.ConditionScheduled, "PodNotCreated", "", metav1.ConditionFalse),
		},
		want: "PodNotCreated",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			task := &gputaskv1.GPUTask{Status: gputaskv1.GPUTaskStatus{Conditions: tc.conditions}}
			got := why(task)
			if got != tc.want {
				t.Errorf("why = %q, want %q", got, tc.want)
			}
			if len(got) > whyWidth {
				t.Errorf("why is %d characters, more than the column's %d", len(got), whyWidth)
			}
		})
	}
}
