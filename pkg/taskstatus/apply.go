package taskstatus

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	applyv1 "github.com/gputask/gputask-controller/pkg/generated/applyconfiguration/gputask/v1"
)

// Apply is status as the apply configuration the GPUTask controller sends:
// the fields that are set, and no empty ones, so that a task shows the
// same status as the Update this write replaced did. The controller is the
// status's only writer, so a field it leaves out is removed.
func Apply(status *gputaskv1.GPUTaskStatus) *applyv1.GPUTaskStatusApplyConfiguration {
	out := applyv1.GPUTaskStatus()
	if status.Phase != "" {
		out.WithPhase(status.Phase)
	}
	if status.PodName != "" {
		out.WithPodName(status.PodName)
	}
	if status.NodeName != "" {
		out.WithNodeName(status.NodeName)
	}
	if status.GPUModel != "" {
		out.WithGPUModel(status.GPUModel)
	}
	if len(status.Devices) > 0 {
		out.WithDevices(status.Devices...)
	}
	if status.Reschedules != 0 {
		out.WithReschedules(status.Reschedules)
	}
	if status.LastRescheduleTime != nil {
		out.WithLastRescheduleTime(*status.LastRescheduleTime)
	}
	if status.ObservedGeneration != 0 {
		out.WithObservedGeneration(status.ObservedGeneration)
	}
	for _, c := range status.Conditions {
		out.WithConditions(ConditionApply(c))
	}
	return out
}

// ConditionApply is c as an apply configuration; an observedGeneration of
// 0 is left out, as the condition's JSON leaves it out.
func ConditionApply(c metav1.Condition) *metav1apply.ConditionApplyConfiguration {
	out := metav1apply.Condition().
		WithType(c.Type).WithStatus(c.Status).WithReason(c.Reason).WithMessage(c.Message).
		WithLastTransitionTime(c.LastTransitionTime)
	if c.ObservedGeneration != 0 {
		out.WithObservedGeneration(c.ObservedGeneration)
	}
	return out
}
