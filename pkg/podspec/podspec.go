// Package podspec turns a GPUTask into the one Pod that runs it. The builder is
// pure, so that every field mapping and every invalid spec is covered by a
// table test instead of a controller test.
package podspec

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// ContainerName is the name of the single container of a task's pod.
const ContainerName = "task"

// MaxGPUAmount mirrors the CRD's validation, so a task created before the CRD
// gained the rule still gets a clear InvalidSpec rather than a pod that no
// node can ever run.
const MaxGPUAmount = 1024

// Options are the controller-wide settings that shape every pod.
type Options struct {
	// GPUResourceName is the extended resource that the pod's limit asks for.
	GPUResourceName corev1.ResourceName
	// GPULabelKey is the node label whose value is the GPU model.
	GPULabelKey string
	// DefaultImage runs when the task names no image.
	DefaultImage string
}

// GPUTaskKind is the kind written into the pod's controller reference.
var GPUTaskKind = gputaskv1.SchemeGroupVersion.WithKind("GPUTask")

// Build returns the pod that runs task. The error names the spec field that
// cannot be turned into a pod, so it can be shown to the user as it is.
func Build(task *gputaskv1.GPUTask, opts Options) (*corev1.Pod, error) {
	resources, err := buildResources(&task.Spec, opts.GPUResourceName)
	if err != nil {
		return nil, err
	}
	image := task.Spec.Image
	if image == "" {
		image = opts.DefaultImage
	}
	if image == "" {
		return nil, fmt.Errorf("spec.image: empty, and the controller has no default image")
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            task.Name,
			Namespace:       task.Namespace,
			Labels:          podLabels(task),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(task, GPUTaskKind)},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:     corev1.RestartPolicyNever,
			PriorityClassName: task.Spec.Priority,
			Containers: []corev1.Container{{
				Name:      ContainerName,
				Image:     image,
				Command:   copyStrings(task.Spec.Command),
				Args:      copyStrings(task.Spec.Args),
				Env:       copyEnv(task.Spec.Env),
				Resources: resources,
			}},
		},
	}
	if task.Spec.GPU != "" {
		pod.Spec.NodeSelector = map[string]string{opts.GPULabelKey: task.Spec.GPU}
	}
	return pod, nil
}

// podLabels copies the task's labels so that labels set on a task (or on its
// set's template) can select its pod too, and adds the label that the
// controller's filtered pod informer watches.
func podLabels(task *gputaskv1.GPUTask) map[string]string {
	labels := make(map[string]string, len(task.Labels)+1)
	for k, v := range task.Labels {
		labels[k] = v
	}
	labels[gputaskv1.LabelTask] = task.Name
	return labels
}

func buildResources(spec *gputaskv1.GPUTaskSpec, gpuResource corev1.ResourceName) (corev1.ResourceRequirements, error) {
	gpus, err := GPUAmount(spec.GPUAmount)
	if err != nil {
		return corev1.ResourceRequirements{}, err
	}
	// Extended resources cannot be overcommitted: a limit alone is enough and
	// the API server copies it into the request.
	limits := corev1.ResourceList{gpuResource: *resource.NewQuantity(gpus, resource.DecimalSI)}
	var requests corev1.ResourceList

	for _, r := range []struct {
		field string
		name  corev1.ResourceName
		value *intstr.IntOrString
	}{
		{"spec.cpu", corev1.ResourceCPU, spec.CPU},
		{"spec.memory", corev1.ResourceMemory, spec.Memory},
	} {
		if r.value == nil {
			continue
		}
		q, err := parseQuantity(r.field, *r.value)
		if err != nil {
			return corev1.ResourceRequirements{}, err
		}
		// Request equals limit, so a GPU pod that also sets CPU and memory
		// gets the Guaranteed QoS class and is evicted last.
		if requests == nil {
			requests = corev1.ResourceList{}
		}
		requests[r.name] = q
		limits[r.name] = q.DeepCopy()
	}
	return corev1.ResourceRequirements{Limits: limits, Requests: requests}, nil
}

// GPUAmount returns how many GPUs a task asks for: nil means 1, and both 2 and
// "2" mean 2.
func GPUAmount(v *intstr.IntOrString) (int64, error) {
	if v == nil {
		return 1, nil
	}
	var n int64
	switch v.Type {
	case intstr.Int:
		n = int64(v.IntVal)
	case intstr.String:
		parsed, err := strconv.ParseInt(v.StrVal, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("spec.gpu-amount: %q is not an integer from 1 to %d", v.StrVal, MaxGPUAmount)
		}
		n = parsed
	default:
		return 0, fmt.Errorf("spec.gpu-amount: unknown value type %d", v.Type)
	}
	if n < 1 || n > MaxGPUAmount {
		return 0, fmt.Errorf("spec.gpu-amount: %d is not an integer from 1 to %d", n, MaxGPUAmount)
	}
	return n, nil
}

func parseQuantity(field string, v intstr.IntOrString) (resource.Quantity, error) {
	var q resource.Quantity
	switch v.Type {
	case intstr.Int:
		q = *resource.NewQuantity(int64(v.IntVal), resource.DecimalSI)
	case intstr.String:
		parsed, err := resource.ParseQuantity(v.StrVal)
		if err != nil {
			return resource.Quantity{}, fmt.Errorf("%s: %q is not a quantity: %w", field, v.StrVal, err)
		}
		q = parsed
	default:
		return resource.Quantity{}, fmt.Errorf("%s: unknown value type %d", field, v.Type)
	}
	// A zero request and limit is accepted by the API server but would make
	// the pod BestEffort for that resource; the CRD rejects it too.
	if q.Sign() <= 0 {
		return resource.Quantity{}, fmt.Errorf("%s: %s is not a positive quantity", field, q.String())
	}
	return q, nil
}

func copyStrings(in []string) []string {
	if in == nil {
		return nil
	}
	return append([]string(nil), in...)
}

func copyEnv(in []corev1.EnvVar) []corev1.EnvVar {
	if in == nil {
		return nil
	}
	out := make([]corev1.EnvVar, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}
