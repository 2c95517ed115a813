package main

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/podspec"
	"github.com/gputask/gputask-controller/pkg/tombstone"
)

// errNoDRA is the create error of a DRA task where the API server serves no
// ResourceClaimTemplates.
var errNoDRA = errors.New("spec.gpuAllocation is DRA, but the API server does not serve resource.k8s.io/v1 ResourceClaimTemplates")

// ensureClaimTemplate makes sure that the ResourceClaimTemplate a DRA task's
// new pod refers to exists and asks for what the spec asks for now. It is
// owned by the task, never shared, and removed with it by the garbage
// collector. A template of that name that is not the task's is never
// touched: it is an error the task reports.
func (c *Controller) ensureClaimTemplate(ctx context.Context, task *gputaskv1.GPUTask) error {
	if c.claimTemplatesLister == nil {
		return errNoDRA
	}
	want, err := podspec.ClaimTemplate(task, c.podOpts)
	if err != nil {
		return err
	}
	templates := c.kubeclientset.ResourceV1().ResourceClaimTemplates(task.Namespace)
	have, err := c.claimTemplatesLister.ResourceClaimTemplates(task.Namespace).Get(want.Name)
	if apierrors.IsNotFound(err) {
		_, err = templates.Create(ctx, want, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		// The cache lags behind a template made earlier: read it.
		have, err = templates.Get(ctx, want.Name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("reading ResourceClaimTemplate %s/%s: %w", task.Namespace, want.Name, err)
	}
	if !isControlledBy(have, task) {
		return fmt.Errorf("ResourceClaimTemplate %s/%s exists and is not controlled by this GPUTask", task.Namespace, want.Name)
	}
	if equality.Semantic.DeepEqual(have.Spec, want.Spec) {
		return nil
	}
	// The spec changed since the template was made, and the pod that used
	// it is gone (a new one is about to be made): make it anew. Templates
	// are immutable.
	klog.FromContext(ctx).V(2).Info("Replacing the ResourceClaimTemplate of a changed spec", "template", klog.KObj(have))
	err = templates.Delete(ctx, have.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(have.UID)}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting ResourceClaimTemplate %s/%s: %w", task.Namespace, have.Name, err)
	}
	if _, err := templates.Create(ctx, want, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating ResourceClaimTemplate %s/%s: %w", task.Namespace, want.Name, err)
	}
	return nil
}

// allocatedDevices reads, from the claim made for the pod's GPU claim, the
// devices allocated to it (driver/pool/device) and the model they stand
// for; nothing while the claim is not allocated or not in the cache.
func (c *Controller) allocatedDevices(task *gputaskv1.GPUTask, pod *corev1.Pod) (devices []string, model string) {
	if c.claimsLister == nil {
		return nil, ""
	}
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.Name != podspec.ClaimName || s.ResourceClaimName == nil {
			continue
		}
		claim, err := c.claimsLister.ResourceClaims(pod.Namespace).Get(*s.ResourceClaimName)
		if err != nil || claim.Status.Allocation == nil {
			return nil, ""
		}
		return claimDevices(&task.Spec, claim)
	}
	return nil, ""
}

// claimDevices are the devices of claim's allocation that the task's GPU
// request got, and their model.
func claimDevices(spec *gputaskv1.GPUTaskSpec, claim *resourcev1.ResourceClaim) (devices []string, model string) {
	for _, r := range claim.Status.Allocation.Devices.Results {
		m := podspec.AllocatedModel(spec, r.Request)
		if r.Request != podspec.ClaimName && m == "" {
			continue
		}
		devices = append(devices, r.Driver+"/"+r.Pool+"/"+r.Device)
		if model == "" {
			model = m
		}
	}
	return devices, model
}

// enqueueTaskOfClaim queues the task whose label a ResourceClaimTemplate or
// a ResourceClaim carries: a claim's allocation is the task's status, and a
// template deleted by someone else is made again for the next pod.
func (c *Controller) enqueueTaskOfClaim(logger klog.Logger, obj any) {
	meta, ok := tombstone.Unwrap[metav1.Object](obj)
	if !ok {
		return
	}
	name := meta.GetLabels()[gputaskv1.LabelTask]
	if name == "" {
		return
	}
	logger.V(4).Info("Claim of a task changed", "object", klog.KObj(meta), "task", name)
	c.workqueue.Add(cache.ObjectName{Namespace: meta.GetNamespace(), Name: name})
}
