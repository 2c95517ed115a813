package lazycache

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// NonTerminalPods is the field selector of the pods that still hold
// resources: the ones the capacity count subtracts from the nodes.
var NonTerminalPods = fields.AndSelectors(
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
).String()

// Pods is the cache of every non-terminal pod of the cluster, trimmed by
// TrimPod. Only sets with capacityAware read it: it starts with the first
// capacity-aware evaluation and stops once none has happened for IdleStop.
type Pods struct {
	lazyInformer
}

// NewPods returns a Pods that lists and watches through client.
func NewPods(client kubernetes.Interface, resync time.Duration, clk clock.WithDelayedExecution) *Pods {
	return &Pods{newLazyInformer("cluster-wide pod cache", clk, func() cache.SharedIndexInformer {
		return coreinformers.NewFilteredPodInformer(client, metav1.NamespaceAll, resync, cache.Indexers{},
			func(o *metav1.ListOptions) { o.FieldSelector = NonTerminalPods })
	}, TrimPod)}
}

// Lister starts the cache if it does not run, and waits until it has synced.
func (p *Pods) Lister(ctx context.Context) (corelisters.PodLister, error) {
	indexer, err := p.indexer(ctx)
	if err != nil {
		return nil, err
	}
	return corelisters.NewPodLister(indexer), nil
}

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
