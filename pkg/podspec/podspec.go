// Package podspec turns a GPUTask into the one Pod that runs it. The builder is
// pure, so that every field mapping, every merge rule and every invalid spec is
// covered by a table test instead of a controller test.
//
// The pod starts from spec.template (labels, annotations and a full PodSpec).
// The short fields (image, command, args, env, cpu, memory, gpu-amount,
// priority) apply to the main container: the one named "task", else the only
// container, else the first. A short field and the template that set the same
// thing to different values are an invalid spec: nothing is silently
// overridden. The controller owns the pod's name, owner reference, gputask.io
// labels, GPU limit and GPU-model placement.
package podspec

import (
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// ContainerName is the name of the main container, and of the container the
// controller adds when the template has none.
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
	// DefaultImage runs when neither the task nor its template names an image.
	DefaultImage string
	// GPUAllocation is how tasks that do not choose ask for GPUs; empty
	// means ExtendedResource.
	GPUAllocation gputaskv1.GPUAllocationMode
	// DeviceClass is the DeviceClass of the GPUs in DRA mode; empty means
	// DefaultDeviceClass.
	DeviceClass string
	// ModelAttribute is the device attribute, domain/name, that holds the
	// GPU model in DRA mode; empty means DefaultModelAttribute.
	ModelAttribute string
	// GPUTaintToleration adds a toleration for the taint GPU node pools carry
	// (key GPUResourceName, effect NoSchedule), as the ExtendedResourceToleration
	// admission plugin does.
	GPUTaintToleration bool
}

// GPUTaskKind is the kind written into the pod's controller reference.
var GPUTaskKind = gputaskv1.SchemeGroupVersion.WithKind("GPUTask")

// Build returns the pod that runs task. The error names the spec fields that
// cannot be turned into a pod, so it can be shown to the user as it is.
func Build(task *gputaskv1.GPUTask, opts Options) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	if t := task.Spec.Template; t != nil {
		t.Spec.DeepCopyInto(&pod.Spec)
		pod.Annotations = copyMap(t.Metadata.Annotations)
	}
	labels, err := podLabels(task)
	if err != nil {
		return nil, err
	}
	pod.ObjectMeta.Name = task.Name
	pod.ObjectMeta.Namespace = task.Namespace
	pod.ObjectMeta.Labels = labels
	pod.ObjectMeta.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(task, GPUTaskKind)}

	for _, step := range []func(*corev1.PodSpec, *gputaskv1.GPUTaskSpec, Options) error{
		mergeRestartPolicy,
		mergePriority,
		mergeMainContainer,
		checkOtherContainers,
		mergePlacement,
		mergeTolerations,
	} {
		if err := step(&pod.Spec, &task.Spec, opts); err != nil {
			return nil, err
		}
	}
	if err := mergeClaims(&pod.Spec, task, opts); err != nil {
		return nil, err
	}
	return pod, nil
}

// podLabels copies the template's and the task's labels, so that labels set on
// a task (or on its set's template) can select its pod too, and adds the label
// that the controller's filtered pod informer watches.
func podLabels(task *gputaskv1.GPUTask) (map[string]string, error) {
	labels := map[string]string{}
	if t := task.Spec.Template; t != nil {
		for k, v := range t.Metadata.Labels {
			if k == gputaskv1.LabelTask || k == gputaskv1.LabelTaskSet {
				return nil, fmt.Errorf("spec.template.metadata.labels[%s]: set by the controller", k)
			}
			labels[k] = v
		}
	}
	for k, v := range task.Labels {
		if tv, ok := labels[k]; ok && tv != v {
			return nil, conflict(fmt.Sprintf("metadata.labels[%s]", k), v, fmt.Sprintf("spec.template.metadata.labels[%s]", k), tv)
		}
		labels[k] = v
	}
	labels[gputaskv1.LabelTask] = task.Name
	return labels, nil
}

// mergeRestartPolicy defaults to Never: the controller, not the kubelet,
// decides when a failed task runs again. OnFailure restarts the container in
// place on the same node. Always would never let the task finish.
func mergeRestartPolicy(spec *corev1.PodSpec, _ *gputaskv1.GPUTaskSpec, _ Options) error {
	switch spec.RestartPolicy {
	case "":
		spec.RestartPolicy = corev1.RestartPolicyNever
	case corev1.RestartPolicyNever, corev1.RestartPolicyOnFailure:
	case corev1.RestartPolicyAlways:
		return fmt.Errorf("spec.template.spec.restartPolicy: Always is not supported: a GPUTask runs until its pod ends; use Never (the default) or OnFailure, and a GPUTaskSet to keep workers running")
	default:
		return fmt.Errorf("spec.template.spec.restartPolicy: %q is not Never or OnFailure", spec.RestartPolicy)
	}
	return nil
}

func mergePriority(spec *corev1.PodSpec, task *gputaskv1.GPUTaskSpec, _ Options) error {
	v, err := mergeString("spec.priority", task.Priority, "spec.template.spec.priorityClassName", spec.PriorityClassName)
	spec.PriorityClassName = v
	return err
}

// MainContainer returns the index of the container the short fields apply to:
// the one named "task", else the only one, else the first. It is -1 when the
// spec has no container.
func MainContainer(spec *corev1.PodSpec) int {
	for i := range spec.Containers {
		if spec.Containers[i].Name == ContainerName {
			return i
		}
	}
	if len(spec.Containers) == 0 {
		return -1
	}
	return 0
}

func mergeMainContainer(spec *corev1.PodSpec, task *gputaskv1.GPUTaskSpec, opts Options) error {
	i := MainContainer(spec)
	if i < 0 {
		spec.Containers = []corev1.Container{{Name: ContainerName}}
		i = 0
	}
	c := &spec.Containers[i]
	path := fmt.Sprintf("spec.template.spec.containers[%d]", i)

	image, err := mergeString("spec.image", task.Image, path+".image", c.Image)
	if err != nil {
		return err
	}
	if image == "" {
		image = opts.DefaultImage
	}
	if image == "" {
		return fmt.Errorf("spec.image: empty, and the controller has no default image")
	}
	c.Image = image
	if c.Command, err = mergeStrings("spec.command", task.Command, path+".command", c.Command); err != nil {
		return err
	}
	if c.Args, err = mergeStrings("spec.args", task.Args, path+".args", c.Args); err != nil {
		return err
	}
	if c.Env, err = mergeEnv(task.Env, path+".env", c.Env); err != nil {
		return err
	}
	gpuResource := opts.GPUResourceName
	if UsesDRA(task, opts) {
		// The GPUs come from the claim mergeClaims adds.
		gpuResource = ""
	}
	return mergeResources(&c.Resources, task, path+".resources", gpuResource)
}

// checkOtherContainers keeps the GPUs with the main container: the GPU count
// is spec.gpu-amount, which is what capacity-aware scaling counts.
func checkOtherContainers(spec *corev1.PodSpec, _ *gputaskv1.GPUTaskSpec, opts Options) error {
	main := MainContainer(spec)
	for i := range spec.Containers {
		if i != main && asksFor(&spec.Containers[i].Resources, opts.GPUResourceName) {
			return fmt.Errorf("spec.template.spec.containers[%d].resources: asks for %s; only the main container gets GPUs, from spec.gpu-amount", i, opts.GPUResourceName)
		}
	}
	for i := range spec.InitContainers {
		if asksFor(&spec.InitContainers[i].Resources, opts.GPUResourceName) {
			return fmt.Errorf("spec.template.spec.initContainers[%d].resources: asks for %s; only the main container gets GPUs, from spec.gpu-amount", i, opts.GPUResourceName)
		}
	}
	return nil
}

func asksFor(r *corev1.ResourceRequirements, name corev1.ResourceName) bool {
	_, limit := r.Limits[name]
	_, request := r.Requests[name]
	return limit || request
}

// mergeResources sets the GPU limit from spec.gpu-amount and cpu and memory
// from spec.cpu and spec.memory (request equals limit). The template may say
// the same values, never others.
func mergeResources(r *corev1.ResourceRequirements, task *gputaskv1.GPUTaskSpec, path string, gpuResource corev1.ResourceName) error {
	gpus, err := GPUAmount(task.GPUAmount)
	if err != nil {
		return err
	}
	// Extended resources cannot be overcommitted: a limit alone is enough and
	// the API server copies it into the request. No GPU resource means DRA.
	if gpuResource != "" {
		if err := setResource(r, gpuResource, *resource.NewQuantity(gpus, resource.DecimalSI), "spec.gpu-amount", path, false); err != nil {
			return err
		}
	}
	for _, s := range []struct {
		field string
		name  corev1.ResourceName
		value *intstr.IntOrString
	}{
		{"spec.cpu", corev1.ResourceCPU, task.CPU},
		{"spec.memory", corev1.ResourceMemory, task.Memory},
	} {
		if s.value == nil {
			continue
		}
		q, err := parseQuantity(s.field, *s.value)
		if err != nil {
			return err
		}
		// Request equals limit, so a GPU pod that also sets CPU and memory
		// gets the Guaranteed QoS class and is evicted last.
		if err := setResource(r, s.name, q, s.field, path, true); err != nil {
			return err
		}
	}
	return nil
}

// setResource sets the limit (and the request, if withRequest) of name to q,
// unless the template already has a different value there.
func setResource(r *corev1.ResourceRequirements, name corev1.ResourceName, q resource.Quantity, field, path string, withRequest bool) error {
	for _, l := range []struct {
		list *corev1.ResourceList
		kind string
		set  bool
	}{
		{&r.Limits, "limits", true},
		{&r.Requests, "requests", withRequest},
	} {
		if have, ok := (*l.list)[name]; ok {
			if have.Cmp(q) != 0 {
				return conflict(field, q.String(), fmt.Sprintf("%s.%s[%s]", path, l.kind, name), have.String())
			}
			continue
		}
		if !l.set {
			continue
		}
		if *l.list == nil {
			*l.list = corev1.ResourceList{}
		}
		(*l.list)[name] = q.DeepCopy()
	}
	return nil
}

// mergeEnv puts the template's variables first and then spec.env's, so that
// spec.env may refer to the template's with $(NAME). A name in both must have
// the same definition.
func mergeEnv(short []corev1.EnvVar, path string, tmpl []corev1.EnvVar) ([]corev1.EnvVar, error) {
	out := tmpl
	for i := range short {
		e := &short[i]
		j := envIndex(tmpl, e.Name)
		if j < 0 {
			out = append(out, *e.DeepCopy())
			continue
		}
		if !equality.Semantic.DeepEqual(*e, tmpl[j]) {
			return nil, fmt.Errorf("spec.env[%s] and %s[%s] differ: set the variable in one place only", e.Name, path, e.Name)
		}
	}
	return out, nil
}

func envIndex(env []corev1.EnvVar, name string) int {
	for i := range env {
		if env[i].Name == name {
			return i
		}
	}
	return -1
}

// mergeString returns the value set in either place, and a conflict when both
// are set to different values.
func mergeString(field, value, tmplField, tmplValue string) (string, error) {
	switch {
	case value == "":
		return tmplValue, nil
	case tmplValue == "" || tmplValue == value:
		return value, nil
	default:
		return "", conflict(field, value, tmplField, tmplValue)
	}
}

func mergeStrings(field string, value []string, tmplField string, tmplValue []string) ([]string, error) {
	switch {
	case len(value) == 0:
		return tmplValue, nil
	case len(tmplValue) == 0 || slices.Equal(value, tmplValue):
		return append([]string(nil), value...), nil
	default:
		return nil, conflict(field, fmt.Sprintf("%q", value), tmplField, fmt.Sprintf("%q", tmplValue))
	}
}

func conflict(field, value, tmplField, tmplValue string) error {
	return fmt.Errorf("%s (%s) and %s (%s) differ: set it in one place only", field, value, tmplField, tmplValue)
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

func copyMap(in map[string]string) map[string]string {
	if in == nil {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}
