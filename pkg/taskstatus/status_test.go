package taskstatus

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

func TestTaskPhase(t *testing.T) {
	tests := []struct {
		name  string
		pod   *corev1.Pod
		phase gputaskv1.GPUTaskPhase
	}{
		{"no pod", nil, gputaskv1.GPUTaskPending},
		{"unbound pending", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, gputaskv1.GPUTaskPending},
		{"bound pending", &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}, gputaskv1.GPUTaskScheduled},
		{"running", &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}, gputaskv1.GPUTaskRunning},
		{"succeeded", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, gputaskv1.GPUTaskSucceeded},
		{"failed", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed}}, gputaskv1.GPUTaskFailed},
		{"no phase yet", &corev1.Pod{}, gputaskv1.GPUTaskPending},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Phase(tc.pod); got != tc.phase {
				t.Errorf("Phase() = %s, want %s", got, tc.phase)
			}
		})
	}
}

func TestMirrorPodCondition(t *testing.T) {
	pod := func(conds ...corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Conditions: conds}}
	}
	long := strings.Repeat("x", maxConditionMessage+10)
	tests := []struct {
		name       string
		pod        *corev1.Pod
		wantStatus metav1.ConditionStatus
		wantReason string
		wantMsgLen int
	}{
		{"absent", pod(), metav1.ConditionFalse, "PodNotReady", 0},
		{"true without reason", pod(corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}), metav1.ConditionTrue, "PodReady", 0},
		{"kubelet reason kept", pod(corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady", Message: "m"}), metav1.ConditionFalse, "ContainersNotReady", 1},
		{"reason that is not CamelCase replaced", pod(corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "not ready!"}), metav1.ConditionFalse, "PodNotReady", 0},
		{"unknown status kept", pod(corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionUnknown}), metav1.ConditionUnknown, "PodNotReady", 0},
		{"long message cut", pod(corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Message: long}), metav1.ConditionFalse, "PodNotReady", maxConditionMessage},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, reason, msg := MirrorPodCondition(tc.pod, corev1.PodReady, "PodReady", "PodNotReady")
			if s != tc.wantStatus || reason != tc.wantReason || len(msg) != tc.wantMsgLen {
				t.Errorf("MirrorPodCondition() = (%s, %s, %d chars), want (%s, %s, %d chars)", s, reason, len(msg), tc.wantStatus, tc.wantReason, tc.wantMsgLen)
			}
		})
	}
}

func TestPodCreateFailureMessage(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantReason string
		wantPrefix string
	}{
		{"forbidden", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "render", errors.New("exceeded quota: gpu")),
			"Forbidden", `pods "render" is forbidden: exceeded quota: gpu`},
		{"invalid, 64 KiB", apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "render", field.ErrorList{
			field.Invalid(field.NewPath("metadata", "labels"), strings.Repeat("ü", 32*1024), "too long")}),
			"Invalid", `Pod "render" is invalid: metadata.labels: Invalid value:`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reason, msg := PodCreateFailure(tc.err)
			if reason != tc.wantReason || !strings.HasPrefix(msg, tc.wantPrefix) {
				t.Errorf("PodCreateFailure() = %q, %q; want %q, %q...", reason, msg, tc.wantReason, tc.wantPrefix)
			}
			if len(msg) > maxPodCreateMessage || !utf8.ValidString(msg) {
				t.Errorf("message of %d bytes (valid UTF-8: %v), want at most %d", len(msg), utf8.ValidString(msg), maxPodCreateMessage)
			}
		})
	}
}

// TestScheduledCarriesTheQueuesReason: while a pod waits for admission, the
// task's Scheduled condition says what the queue says; once the pod is
// placed, or when the queue has nothing usable to say, the pod's own
// condition shows.
func TestScheduledCarriesTheQueuesReason(t *testing.T) {
	task := &gputaskv1.GPUTask{ObjectMeta: metav1.ObjectMeta{Name: "render", Generation: 1}}
	gated := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "render"},
		Spec:       corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/admission"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "SchedulingGated", Message: "Scheduling is blocked due to non-empty scheduling gates",
		}}},
	}
	placed := gated.DeepCopy()
	placed.Spec.SchedulingGates, placed.Spec.NodeName = nil, "gpu-node-1"
	placed.Status.Conditions[0] = corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}
	quota := &QueueWait{Reason: "Pending", Message: "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu-a100, 2 more needed"}
	tests := []struct {
		name                string
		pod                 *corev1.Pod
		queue               *QueueWait
		wantStatus          metav1.ConditionStatus
		wantReason, wantMsg string
	}{
		{"waiting, the queue's word", gated, quota, metav1.ConditionFalse, "Pending", quota.Message},
		{"waiting, no word from the queue", gated, nil, metav1.ConditionFalse, "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates"},
		{"a reason the API would refuse", gated, &QueueWait{Reason: "no quota!", Message: "m"}, metav1.ConditionFalse, "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates"},
		{"long message cut", gated, &QueueWait{Reason: "Pending", Message: strings.Repeat("q", maxConditionMessage+1)}, metav1.ConditionFalse, "Pending", ""},
		{"placed", placed, quota, metav1.ConditionTrue, "PodScheduled", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := Compute(task, View{Pod: tc.pod, Queue: tc.queue}, time.Unix(1, 0))
			c := meta.FindStatusCondition(st.Conditions, gputaskv1.ConditionScheduled)
			if c == nil || c.Status != tc.wantStatus || c.Reason != tc.wantReason {
				t.Fatalf("Scheduled = %+v, want %s %s", c, tc.wantStatus, tc.wantReason)
			}
			if tc.wantMsg != "" && c.Message != tc.wantMsg {
				t.Errorf("message = %q, want %q", c.Message, tc.wantMsg)
			}
			if len(c.Message) > maxConditionMessage {
				t.Errorf("message of %d bytes, over %d", len(c.Message), maxConditionMessage)
			}
		})
	}
}
