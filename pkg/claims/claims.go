// Package claims creates a DRA task's ResourceClaimTemplate and reads which
// devices, and so which model, its pod's claim was allocated. The template itself is built by
// podspec.ClaimTemplate, from the task's spec alone.
package claims

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/podspec"
)

// ErrNotServed is the create error of a DRA task where the API server
// serves no ResourceClaimTemplates.
var ErrNotServed = errors.New("spec.gpuAllocation is DRA, but the API server does not serve resource.k8s.io/v1 ResourceClaimTemplates")

// Templates makes the ResourceClaimTemplates of DRA tasks.
type Templates struct {
	Client kubernetes.Interface
	// Lister holds the templates that carry a task's label.
	Lister  resourcelisters.ResourceClaimTemplateLister
	PodOpts podspec.Options
}

// Ensure makes sure that the ResourceClaimTemplate a DRA task's new pod
// refers to exists and asks for what the spec asks for now. It is owned by
// the task, never shared, and removed with it by the garbage collector. A
// template of that name that is not the task's is never touched: it is an
// error the task reports. A nil Templates means DRA is not served.
func (t *Templates) Ensure(ctx context.Context, task *gputaskv1.GPUTask) error {
	if t == nil {
		return ErrNotServed
	}
	want, err := podspec.ClaimTemplate(task, t.PodOpts)
	if err != nil {
		return err
	}
	templates := t.Client.ResourceV1().ResourceClaimTemplates(task.Namespace)
	have, err := t.Lister.ResourceClaimTemplates(task.Namespace).Get(want.Name)
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
	if !metav1.IsControlledBy(have, task) {
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

// Allocated reads, from the claim made for the pod's GPU claim, the
// devices allocated to it (driver/pool/device) and the model they stand
// for; nothing while the claim is not allocated or not in lister.
func Allocated(lister resourcelisters.ResourceClaimLister, task *gputaskv1.GPUTask, pod *corev1.Pod) (devices []string, model string) {
	if lister == nil {
		return nil, ""
	}
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.Name != podspec.ClaimName || s.ResourceClaimName == nil {
			continue
		}
		claim, err := lister.ResourceClaims(pod.Namespace).Get(*s.ResourceClaimName)
		if err != nil || claim.Status.Allocation == nil {
			return nil, ""
		}
		return Devices(&task.Spec, claim)
	}
	return nil, ""
}

// Devices are the devices of claim's allocation that the task's GPU
// request got, and their model.
func Devices(spec *gputaskv1.GPUTaskSpec, claim *resourcev1.ResourceClaim) (devices []string, model string) {
	if claim.Status.Allocation == nil {
		return nil, ""
	}
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
