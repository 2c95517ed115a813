package autoscaler

import (
	"context"
	"fmt"
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	resourcehelper "k8s.io/component-helpers/resource"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/podspec"
	"github.com/gputask/gputask-controller/pkg/taskindex"
)

// capacity is how many of the set's tasks fit: on each schedulable node with
// one of the template's GPU models (gpu or one of gpuAlternatives; any GPU
// node when the template names none), the free GPUs divided by the GPUs per
// task, plus the set's tasks already bound to a node (their GPUs are already
// counted as used).
func (c *Controller) capacity(ctx context.Context, set *gputaskv1.GPUTaskSet) (int32, error) {
	perTask, err := podspec.GPUAmount(set.Spec.Template.Spec.GPUAmount)
	if err != nil {
		// The set's tasks cannot be built either; they report InvalidSpec.
		return 0, fmt.Errorf("template: %w", err)
	}
	nodes, err := c.nodesLister.List(labels.Everything())
	if err != nil {
		return 0, fmt.Errorf("listing nodes: %w", err)
	}
	podsLister, err := c.pods.Lister(ctx)
	if err != nil {
		return 0, err
	}
	pods, err := podsLister.List(labels.Everything())
	if err != nil {
		return 0, fmt.Errorf("listing pods: %w", err)
	}
	used := gpusInUseByNode(pods, c.opts.GPUResourceName)

	var fit int64
	for _, node := range nodes {
		if !c.nodeMatches(node, podspec.Models(&set.Spec.Template.Spec)) {
			continue
		}
		allocatable := node.Status.Allocatable[c.opts.GPUResourceName]
		free := allocatable.Value() - used[node.Name]
		if free > 0 {
			fit += free / perTask
		}
	}

	bound, err := c.boundTasks(set)
	if err != nil {
		return 0, err
	}
	return int32(min(fit+bound, math.MaxInt32)), nil
}

// nodeMatches reports whether new tasks of a set accepting models (gpu,
// then gpuAlternatives; none means any) could land on node. Cordoned nodes
// take no new pods, so they add no capacity.
func (c *Controller) nodeMatches(node *corev1.Node, models []string) bool {
	if node.Spec.Unschedulable {
		return false
	}
	if len(models) > 0 && !slices.Contains(models, node.Labels[c.opts.GPULabelKey]) {
		return false
	}
	allocatable, ok := node.Status.Allocatable[c.opts.GPUResourceName]
	return ok && allocatable.Sign() > 0
}

// boundTasks counts the set's live tasks that have a node.
func (c *Controller) boundTasks(set *gputaskv1.GPUTaskSet) (int64, error) {
	tasks, err := taskindex.OfSet(c.tasksIndexer, set)
	if err != nil {
		return 0, fmt.Errorf("listing tasks: %w", err)
	}
	var n int64
	for _, t := range tasks {
		if t.Status.NodeName != "" {
			n++
		}
	}
	return n, nil
}

// gpusInUseByNode sums the GPUs of the non-terminal pods bound to each node.
func gpusInUseByNode(pods []*corev1.Pod, gpu corev1.ResourceName) map[string]int64 {
	used := map[string]int64{}
	for _, pod := range pods {
		if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		used[pod.Spec.NodeName] += podGPUs(pod, gpu)
	}
	return used
}

// podGPUs is what the scheduler charges a pod, as
// k8s.io/component-helpers computes it: containers and sidecar init
// containers summed, the largest regular init container if that is more, and
// pod overhead and pod-level resources. Extended resources such as GPUs get
// their request from their limit through API defaulting, so requests are what
// a pod from the informer carries.
func podGPUs(pod *corev1.Pod, gpu corev1.ResourceName) int64 {
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	q := requests[gpu]
	return q.Value()
}
