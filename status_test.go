package main

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
)

func TestUpdatesStatusWhenPodChanges(t *testing.T) {
	tests := []struct {
		name      string
		podPhase  corev1.PodPhase
		node      string
		wantPhase gputaskv1.GPUTaskPhase
	}{
		{"bound but pending is Scheduled", corev1.PodPending, "gpu-1", gputaskv1.GPUTaskScheduled},
		{"running", corev1.PodRunning, "gpu-1", gputaskv1.GPUTaskRunning},
		{"running on another node", corev1.PodRunning, "gpu-2", gputaskv1.GPUTaskRunning},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			task := withStatus(newTask("render"), gputaskv1.GPUTaskPending, "")
			f.Add(task)
			f.Add(podWith(task, tc.podPhase, tc.node))
			f.Add(controllertest.Node("gpu-1"))
			f.Add(controllertest.Node("gpu-2"))

			f.ExpectApplyStatus(withStatus(task, tc.wantPhase, tc.node))
			f.Run(ctx, key(task))
		})
	}
}

func TestMirrorsUnschedulable(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task := withStatus(newTask("render"), gputaskv1.GPUTaskPending, "")
	f.Add(task)
	pod := podWith(task, corev1.PodPending, "")
	msg := "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
	pod.Status.Conditions = []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: msg, LastTransitionTime: metav1.NewTime(testNow.Add(-time.Minute)),
	}}
	f.Add(pod)

	want := task.DeepCopy()
	want.Status.Conditions[2] = cond(gputaskv1.ConditionScheduled, metav1.ConditionFalse, "Unschedulable", msg)
	f.ExpectApplyStatus(want)
	f.Run(ctx, key(task))
}

func TestFinalPods(t *testing.T) {
	tests := []struct {
		name      string
		phase     corev1.PodPhase
		policy    gputaskv1.ReschedulePolicy
		wantPhase gputaskv1.GPUTaskPhase
	}{
		{"succeeded is final", corev1.PodSucceeded, "", gputaskv1.GPUTaskSucceeded},
		{"succeeded is final even when Periodic", corev1.PodSucceeded, gputaskv1.ReschedulePeriodic, gputaskv1.GPUTaskSucceeded},
		{"failed stays failed under Never", corev1.PodFailed, gputaskv1.RescheduleNever, gputaskv1.GPUTaskFailed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			task := withStatus(newTask("render"), gputaskv1.GPUTaskRunning, "gpu-1")
			task.Spec.ReschedulePolicy = tc.policy
			f.Add(task)
			f.Add(podWith(task, tc.phase, "gpu-1"))
			// No node in the cache: a lost node must not revive a final pod.

			f.ExpectApplyStatus(withStatus(task, tc.wantPhase, "gpu-1"))
			f.Run(ctx, key(task))
			f.ExpectEvents()
		})
	}
}

// TestSpecEditMarksPodOutOfDate: an edit of a running task's spec is shown
// in PodUpToDate, naming the first field that differs, and the pod is left
// alone; once the status says so, further syncs write nothing.
func TestSpecEditMarksPodOutOfDate(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task := withStatus(newTask("render"), gputaskv1.GPUTaskRunning, "gpu-1")
	pod := podWith(task, corev1.PodRunning, "gpu-1")
	task.Generation = 2
	task.Spec.Image = "render:2"
	f.Add(task)
	f.Add(pod)
	f.Add(controllertest.Node("gpu-1"))

	want := imageChangedStatus(task)
	f.ExpectApplyStatus(want)
	f.Run(ctx, key(task))

	f.Update(want)
	f.Run(ctx, key(task))
	f.ExpectEvents()
}

// TestStatusNamesGPUModel: status.gpuModel is the model label of the node the
// pod runs on.
func TestStatusNamesGPUModel(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task := newTask("render")
	task.Spec.GPUAlternatives = []string{"NVIDIA-H100-80GB-HBM3"}
	pod := podWith(task, corev1.PodRunning, "gpu-1")
	pod.Spec.NodeSelector = nil
	pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "nvidia.com/gpu.product", Operator: corev1.NodeSelectorOpIn, Values: []string{"NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"}}},
		}}},
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
			{Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "nvidia.com/gpu.product", Operator: corev1.NodeSelectorOpIn, Values: []string{"NVIDIA-A100-SXM4-80GB"}}}}},
			{Weight: 50, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "nvidia.com/gpu.product", Operator: corev1.NodeSelectorOpIn, Values: []string{"NVIDIA-H100-80GB-HBM3"}}}}},
		},
	}}
	task = withStatus(task, gputaskv1.GPUTaskPending, "")
	node := controllertest.Node("gpu-1")
	node.Labels = map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
	f.Add(task)
	f.Add(pod)
	f.Add(node)

	want := withStatus(task, gputaskv1.GPUTaskRunning, "gpu-1")
	want.Status.GPUModel = "NVIDIA-H100-80GB-HBM3"
	f.ExpectApplyStatus(want)
	f.Run(ctx, key(task))
}

// TestUnschedulableNamesUntoleratedTaints: the scheduler only says that
// nodes "had untolerated taint(s)"; the task's condition says which.
func TestUnschedulableNamesUntoleratedTaints(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task := withStatus(newTask("render"), gputaskv1.GPUTaskPending, "")
	f.Add(task)
	pod := podWith(task, corev1.PodPending, "")
	msg := "0/1 nodes are available: 1 node(s) had untolerated taint(s)."
	pod.Status.Conditions = []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: msg, LastTransitionTime: metav1.NewTime(testNow.Add(-time.Minute)),
	}}
	f.Add(pod)
	node := controllertest.Node("gpu-1")
	node.Labels = map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
	node.Spec.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}
	node.Status.Allocatable = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}
	f.Add(node)

	want := task.DeepCopy()
	want.Status.Conditions[2] = cond(gputaskv1.ConditionScheduled, metav1.ConditionFalse, "Unschedulable",
		msg+" Untolerated taints on the task's GPU nodes: nvidia.com/gpu=present:NoSchedule.")
	f.ExpectApplyStatus(want)
	f.Run(ctx, key(task))
}
