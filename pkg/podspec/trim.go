package podspec

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gputask/gputask-controller/pkg/intern"
)

// Trim is a cache.TransformFunc for the GPUTask controller's pod informer.
// Of a pod that carries its spec's hash (Stamp) it keeps only what the
// task's status, rescheduling and the orphan and delete handling read: the
// metadata but managedFields; the node; until the pod is bound, its
// tolerations and scheduling gates (what keeps it from a node); the phase,
// reason, message and start time; the names of its ResourceClaims; the PodScheduled, Ready,
// DisruptionTarget and Kueue's TerminationTarget conditions; and of a Failed
// pod, when each container started and finished, with its exit code and
// reason (the back-off of its replacement runs from then). Drift is then found by the hash, and its first
// differing field from a read of the pod when the hash differs. A pod made
// before pods carried a hash keeps its spec, so that its drift is still found
// from the cache. The strings pods repeat (namespace, labels, owner, node,
// condition reasons) are interned. Anything else, such as a tombstone,
// passes as it is.
func Trim(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	pod.ManagedFields = nil
	intern.Meta(&pod.ObjectMeta)
	pod.Spec.NodeName = intern.String(pod.Spec.NodeName)
	if Stamped(pod) == "" {
		return pod, nil
	}
	trimmed := &corev1.Pod{
		TypeMeta:   pod.TypeMeta,
		ObjectMeta: pod.ObjectMeta,
		Spec:       corev1.PodSpec{NodeName: pod.Spec.NodeName},
		Status: corev1.PodStatus{
			Phase:             corev1.PodPhase(intern.String(string(pod.Status.Phase))),
			Reason:            intern.String(pod.Status.Reason),
			Message:           intern.String(pod.Status.Message),
			StartTime:         pod.Status.StartTime,
			NominatedNodeName: pod.Status.NominatedNodeName,
			// The claims made for the pod, where the task's devices are.
			ResourceClaimStatuses: pod.Status.ResourceClaimStatuses,
		},
	}
	if pod.Status.Phase == corev1.PodFailed {
		trimmed.Status.ContainerStatuses = terminations(pod.Status.ContainerStatuses)
	}
	if pod.Spec.NodeName == "" {
		trimmed.Spec.Tolerations = pod.Spec.Tolerations
		trimmed.Spec.SchedulingGates = pod.Spec.SchedulingGates
	}
	for _, c := range pod.Status.Conditions {
		if keptConditions[c.Type] {
			c.Type = corev1.PodConditionType(intern.String(string(c.Type)))
			c.Status = corev1.ConditionStatus(intern.String(string(c.Status)))
			c.Reason, c.Message = intern.String(c.Reason), intern.String(c.Message)
			trimmed.Status.Conditions = append(trimmed.Status.Conditions, c)
		}
	}
	return trimmed, nil
}

// keptConditions are the pod conditions a trimmed pod keeps.
var keptConditions = map[corev1.PodConditionType]bool{
	corev1.PodScheduled: true, corev1.PodReady: true, corev1.DisruptionTarget: true,
	// Kueue's, on a pod it stops (reschedule.ConditionTerminationTarget).
	"TerminationTarget": true,
}

// terminations keeps, of each container status, its name and its
// terminated state without the message, which may hold a whole
// termination log.
func terminations(statuses []corev1.ContainerStatus) []corev1.ContainerStatus {
	if len(statuses) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(statuses))
	for i, s := range statuses {
		out[i].Name = intern.String(s.Name)
		if t := s.State.Terminated; t != nil {
			out[i].State.Terminated = &corev1.ContainerStateTerminated{
				ExitCode: t.ExitCode, Signal: t.Signal, Reason: intern.String(t.Reason), StartedAt: t.StartedAt, FinishedAt: t.FinishedAt,
			}
		}
	}
	return out
}
