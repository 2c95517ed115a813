package autoscaler

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TrimPod is a cache.TransformFunc for the cluster-wide pod informer the
// capacity count reads. That informer holds every non-terminal pod of the
// cluster, so it keeps only what the count and the informer itself need:
// the pod's identity, its node, its phase and what the scheduler charges it
// (the containers' resources, init containers' restart policy, overhead and
// pod-level resources), and its scheduling gates, which tell a pod that waits
// for a queue's admission. Anything else, such as a tombstone, passes as it is.
func TrimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	trimmed := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:              pod.Name,
			Namespace:         pod.Namespace,
			UID:               pod.UID,
			ResourceVersion:   pod.ResourceVersion,
			DeletionTimestamp: pod.DeletionTimestamp,
		},
		Spec: corev1.PodSpec{
			NodeName:       pod.Spec.NodeName,
			Containers:     trimContainers(pod.Spec.Containers),
			InitContainers: trimContainers(pod.Spec.InitContainers),
			Overhead:       pod.Spec.Overhead,
			Resources:      pod.Spec.Resources,
			// A gated pod waits for a queue's admission and holds no quota.
			SchedulingGates: pod.Spec.SchedulingGates,
		},
		Status: corev1.PodStatus{Phase: pod.Status.Phase},
	}
	return trimmed, nil
}

func trimContainers(in []corev1.Container) []corev1.Container {
	if in == nil {
		return nil
	}
	out := make([]corev1.Container, len(in))
	for i, c := range in {
		out[i] = corev1.Container{Name: c.Name, Resources: c.Resources, RestartPolicy: c.RestartPolicy}
	}
	return out
}
