package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	resourcehelper "k8s.io/component-helpers/resource"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/kueue"
	"github.com/gputask/gputask-controller/pkg/podspec"
	"github.com/gputask/gputask-controller/pkg/taskindex"
)

// Capacity is how many of a capacity-aware set's tasks fit, and what
// limits them.
type Capacity struct {
	// Tasks is how many of the set's tasks fit.
	Tasks int32
	// Limit names what Tasks counts, for the decision's message; empty
	// means the GPU nodes.
	Limit string
	// waitsForAdmission reports whether a task's pod is gated: it waits for
	// a queueing system's admission.
	waitsForAdmission func(task *gputaskv1.GPUTask) bool
}

// capacity is how many of the set's tasks fit: on each schedulable node with
// one of the template's GPU models (gpu or one of gpuAlternatives; any GPU
// node when the template names none), the free GPUs divided by the GPUs per
// task, plus the set's tasks already bound to a node (their GPUs are already
// counted as used). For a set whose tasks name a Kueue LocalQueue, it is at
// most what the queue's ClusterQueue can still admit, plus the set's tasks
// already admitted (their quota is already counted as reserved).
func (c *Controller) capacity(ctx context.Context, set *gputaskv1.GPUTaskSet) (Capacity, error) {
	perTask, err := podspec.GPUAmount(set.Spec.Template.Spec.GPUAmount)
	if err != nil {
		// The set's tasks cannot be built either; they report InvalidSpec.
		return Capacity{}, fmt.Errorf("template: %w", err)
	}
	nodes, err := c.nodesLister.List(labels.Everything())
	if err != nil {
		return Capacity{}, fmt.Errorf("listing nodes: %w", err)
	}
	podsLister, err := c.pods.Lister(ctx)
	if err != nil {
		return Capacity{}, err
	}
	dra := podspec.UsesDRA(&set.Spec.Template.Spec, c.podOpts)
	var fit int64
	if dra {
		if fit, err = c.deviceFit(ctx, set); err != nil {
			return Capacity{}, err
		}
	} else {
		pods, err := podsLister.List(labels.Everything())
		if err != nil {
			return Capacity{}, fmt.Errorf("listing pods: %w", err)
		}
		used := gpusInUseByNode(pods, c.opts.GPUResourceName)
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
	}

	tasks, err := taskindex.OfSet(c.tasksIndexer, set)
	if err != nil {
		return Capacity{}, fmt.Errorf("listing tasks: %w", err)
	}
	// A task's pod holds quota once it is admitted: it is in the cache of
	// non-terminal pods and no longer gated.
	gated := func(t *gputaskv1.GPUTask) (gated, found bool) {
		pod, err := podsLister.Pods(t.Namespace).Get(t.Name)
		if err != nil {
			return false, false
		}
		return len(pod.Spec.SchedulingGates) > 0, true
	}
	var bound, admitted int64
	for _, t := range tasks {
		if t.Status.NodeName != "" {
			bound++
		}
		if g, found := gated(t); found && !g {
			admitted++
		}
	}
	out := Capacity{Tasks: clampInt32(fit + bound), waitsForAdmission: func(t *gputaskv1.GPUTask) bool {
		g, _ := gated(t)
		return g
	}}
	if dra {
		out.Limit = "the free devices of the ResourceSlices"
	}
	// Kueue charges DRA devices by its own mapping of device classes, which
	// this count does not read: a DRA set's cap is its devices only.
	if quota, queue, ok := c.queueQuota(set); ok && !dra {
		if n := quota.Fit(perTask) + admitted; n < fit+bound {
			out.Tasks = clampInt32(n)
			out.Limit = fmt.Sprintf("the quota of ClusterQueue %s (LocalQueue %s: %d %s not reserved)",
				quota.ClusterQueue, queue, quota.Free(), c.opts.GPUResourceName)
		}
	}
	return out, nil
}

// deviceFit is how many more of a DRA set's tasks the free devices hold:
// its template's claim request counted against the ResourceSlices.
func (c *Controller) deviceFit(ctx context.Context, set *gputaskv1.GPUTaskSet) (int64, error) {
	if c.opts.Devices == nil {
		return 0, errors.New("the template asks for GPUs by DRA, and the API server serves no resource.k8s.io/v1")
	}
	devices, err := c.opts.Devices.Devices(ctx)
	if err != nil {
		return 0, err
	}
	task := &gputaskv1.GPUTask{ObjectMeta: metav1.ObjectMeta{Name: set.Name, Namespace: set.Namespace}, Spec: set.Spec.Template.Spec}
	tmpl, err := podspec.ClaimTemplate(task, c.podOpts)
	if err != nil {
		return 0, fmt.Errorf("template: %w", err)
	}
	schedulable := func(name string) bool {
		node, err := c.nodesLister.Get(name)
		return err == nil && !node.Spec.Unschedulable
	}
	fit, err := DeviceFit(ctx, tmpl.Spec.Spec.Devices.Requests[0], devices, schedulable)
	if err != nil {
		return 0, fmt.Errorf("counting free devices: %w", err)
	}
	return fit, nil
}

// queueQuota is the GPU quota of the Kueue queue the set's tasks name, if
// Kueue is installed and the queue has one.
func (c *Controller) queueQuota(set *gputaskv1.GPUTaskSet) (kueue.Quota, string, bool) {
	if c.opts.Quotas == nil {
		return kueue.Quota{}, "", false
	}
	queue := QueueName(set)
	if queue == "" {
		return kueue.Quota{}, "", false
	}
	q, ok := c.opts.Quotas.For(set.Namespace, queue, c.opts.GPUResourceName)
	return q, queue, ok
}

// QueueName is the Kueue LocalQueue the set's pods name, from the task
// template's labels or its pod template's (podspec copies both to the pod).
func QueueName(set *gputaskv1.GPUTaskSet) string {
	if q := set.Spec.Template.Metadata.Labels[kueue.LabelQueueName]; q != "" {
		return q
	}
	if t := set.Spec.Template.Spec.Template; t != nil {
		return t.Metadata.Labels[kueue.LabelQueueName]
	}
	return ""
}

func clampInt32(n int64) int32 {
	return int32(min(max(n, 0), math.MaxInt32))
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
