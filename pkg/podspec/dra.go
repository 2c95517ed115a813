package podspec

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/lru"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// DRA defaults: the DeviceClass and the model attribute of NVIDIA's DRA
// driver.
const (
	DefaultDeviceClass    = "gpu.nvidia.com"
	DefaultModelAttribute = "gpu.nvidia.com/productName"
)

// ClaimName is the name of the GPU claim in the pod's resourceClaims and in
// the main container's resources.claims, and of the claim's request.
const ClaimName = "gpus"

// claimTemplateSuffix ends the name of a task's ResourceClaimTemplate.
const claimTemplateSuffix = "-gpus"

// UsesDRA reports whether the task's GPUs come from a ResourceClaim: its
// spec.gpuAllocation, else the controller's default.
func UsesDRA(spec *gputaskv1.GPUTaskSpec, opts Options) bool {
	mode := spec.GPUAllocation
	if mode == "" {
		mode = opts.GPUAllocation
	}
	return mode == gputaskv1.GPUAllocationDRA
}

// ClaimTemplateName is the name of the ResourceClaimTemplate of the task's
// GPUs: one per task, never shared.
func ClaimTemplateName(task *gputaskv1.GPUTask) string {
	return task.Name + claimTemplateSuffix
}

// subrequestName is the name of the i-th accepted model's entry in the
// request's firstAvailable list.
func subrequestName(i int) string { return "model-" + strconv.Itoa(i) }

// ClaimTemplate returns the ResourceClaimTemplate that asks for the task's
// GPUs in DRA mode: exactly gpu-amount devices of the DeviceClass, selected
// by the model attribute (gpu, or gpu then gpuAlternatives as a
// firstAvailable list, in order of preference) and by spec.deviceSelectors.
// The claims made from it carry the task's label, so that the controller's
// claim cache selects them.
func ClaimTemplate(task *gputaskv1.GPUTask, opts Options) (*resourcev1.ResourceClaimTemplate, error) {
	opts = opts.withDRADefaults()
	count, err := GPUAmount(task.Spec.GPUAmount)
	if err != nil {
		return nil, err
	}
	name := ClaimTemplateName(task)
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("metadata.name: the ResourceClaimTemplate %q cannot be named after the task: %s", name, strings.Join(errs, "; "))
	}
	extra, err := DeviceSelectors(task.Spec.DeviceSelectors)
	if err != nil {
		return nil, err
	}
	selectors := func(model string) []resourcev1.DeviceSelector {
		var out []resourcev1.DeviceSelector
		if model != "" {
			out = append(out, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: ModelSelector(opts.ModelAttribute, model)}})
		}
		return append(out, extra...)
	}
	exact := func(model string) resourcev1.ExactDeviceRequest {
		return resourcev1.ExactDeviceRequest{
			DeviceClassName: opts.DeviceClass,
			AllocationMode:  resourcev1.DeviceAllocationModeExactCount,
			Count:           count,
			Selectors:       selectors(model),
		}
	}
	request := resourcev1.DeviceRequest{Name: ClaimName}
	models := Models(&task.Spec)
	if len(models) <= 1 {
		model := ""
		if len(models) == 1 {
			model = models[0]
		}
		e := exact(model)
		request.Exactly = &e
	} else {
		for i, m := range models {
			e := exact(m)
			request.FirstAvailable = append(request.FirstAvailable, resourcev1.DeviceSubRequest{
				Name: subrequestName(i), DeviceClassName: e.DeviceClassName, AllocationMode: e.AllocationMode,
				Count: e.Count, Selectors: e.Selectors,
			})
		}
	}
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Namespace:       task.Namespace,
			Labels:          map[string]string{gputaskv1.LabelTask: task.Name},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(task, GPUTaskKind)},
		},
		Spec: resourcev1.ResourceClaimTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{gputaskv1.LabelTask: task.Name}},
			Spec:       resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{request}}},
		},
	}, nil
}

// ModelSelector is the CEL expression that selects the devices whose model
// attribute (domain/name) is model.
func ModelSelector(attribute, model string) string {
	domain, name := attribute, attribute
	if i := strings.LastIndex(attribute, "/"); i >= 0 {
		domain, name = attribute[:i], attribute[i+1:]
	}
	return fmt.Sprintf("device.attributes[%s].%s == %s", strconv.Quote(domain), name, strconv.Quote(model))
}

// selectorChecks keeps what checkSelector found of each expression: every
// sync of a task checks its selectors, and the tasks of a set share them.
var selectorChecks = lru.New(256)

// DeviceSelectors turns spec.deviceSelectors into device selectors, and
// refuses an expression that the scheduler's CEL environment for device
// selectors does not compile to a bool, or whose estimated cost is above
// the limit the API server sets for a claim's selectors (capacity-aware
// sets evaluate it on every device, too).
func DeviceSelectors(exprs []string) ([]resourcev1.DeviceSelector, error) {
	var out []resourcev1.DeviceSelector
	for i, expr := range exprs {
		if err := checkSelector(expr); err != nil {
			return nil, fmt.Errorf("spec.deviceSelectors[%d]: %w", i, err)
		}
		out = append(out, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: expr}})
	}
	return out, nil
}

func checkSelector(expr string) error {
	if found, ok := selectorChecks.Get(expr); ok {
		err, _ := found.(error)
		return err
	}
	var err error
	r := dracel.GetCompiler(dracel.Features{}).CompileCELExpression(expr, dracel.Options{})
	switch {
	case r.Error != nil:
		err = errors.New(r.Error.Detail)
	case r.MaxCost > resourcev1.CELSelectorExpressionMaxCost:
		err = fmt.Errorf("estimated cost %d exceeds the limit of %d; make it simpler", r.MaxCost, resourcev1.CELSelectorExpressionMaxCost)
	}
	selectorChecks.Add(expr, err)
	return err
}

// AllocatedModel is the model that a claim's allocation result for request
// (the request, or request/subrequest with firstAvailable) stands for: the
// subrequest's model, or spec.gpu for a single model. Empty when it is not
// the task's GPU request or names no model.
func AllocatedModel(spec *gputaskv1.GPUTaskSpec, request string) string {
	models := Models(spec)
	if request == ClaimName {
		if len(models) == 1 {
			return models[0]
		}
		return ""
	}
	sub, ok := strings.CutPrefix(request, ClaimName+"/")
	if !ok {
		return ""
	}
	for i, m := range models {
		if sub == subrequestName(i) {
			return m
		}
	}
	return ""
}

// mergeClaims, in DRA mode, refers the pod and its main container to the
// claim made from the task's ResourceClaimTemplate. Claims the template
// declares itself are kept; one of the same name, or a GPU limit in DRA
// mode, is a conflict.
func mergeClaims(spec *corev1.PodSpec, task *gputaskv1.GPUTask, opts Options) error {
	if !UsesDRA(&task.Spec, opts) {
		if len(task.Spec.DeviceSelectors) > 0 {
			return fmt.Errorf("spec.deviceSelectors: only used with spec.gpuAllocation DRA")
		}
		return nil
	}
	// The claim template must be buildable too: its errors are the spec's.
	if _, err := ClaimTemplate(task, opts); err != nil {
		return err
	}
	for i, c := range spec.ResourceClaims {
		if c.Name == ClaimName {
			return fmt.Errorf("spec.template.spec.resourceClaims[%d]: the claim %q holds the GPUs of spec.gpu-amount in DRA mode; name the template's claim otherwise", i, ClaimName)
		}
	}
	main := MainContainer(spec)
	c := &spec.Containers[main]
	path := fmt.Sprintf("spec.template.spec.containers[%d].resources", main)
	for i, rc := range c.Resources.Claims {
		if rc.Name == ClaimName {
			return fmt.Errorf("%s.claims[%d]: %q is the GPU claim the controller adds in DRA mode", path, i, ClaimName)
		}
	}
	if asksFor(&c.Resources, opts.GPUResourceName) {
		return fmt.Errorf("%s: asks for %s; in DRA mode the GPUs of spec.gpu-amount come from a ResourceClaim", path, opts.GPUResourceName)
	}
	spec.ResourceClaims = append(spec.ResourceClaims, corev1.PodResourceClaim{
		Name: ClaimName, ResourceClaimTemplateName: ptr.To(ClaimTemplateName(task)),
	})
	c.Resources.Claims = append(c.Resources.Claims, corev1.ResourceClaim{Name: ClaimName})
	return nil
}

func (o Options) withDRADefaults() Options {
	if o.DeviceClass == "" {
		o.DeviceClass = DefaultDeviceClass
	}
	if o.ModelAttribute == "" {
		o.ModelAttribute = DefaultModelAttribute
	}
	return o
}
