package podspec

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// Models returns the GPU models a task accepts, in order of preference:
// spec.gpu, then spec.gpuAlternatives. It is empty when any GPU will do.
func Models(spec *gputaskv1.GPUTaskSpec) []string {
	if spec.GPU == "" {
		return nil
	}
	models := []string{spec.GPU}
	for _, m := range spec.GPUAlternatives {
		if m != "" && !slices.Contains(models, m) {
			models = append(models, m)
		}
	}
	return models
}

// PreferenceWeight is the preferred node affinity weight of the i-th of n
// accepted models: 100 for the first, falling evenly, never below 1.
func PreferenceWeight(i, n int) int32 {
	return int32(max(1, 100*(n-i)/n))
}

// mergePlacement places the pod on the accepted GPU models. One model is a
// node selector, as before alternatives existed; several are a required node
// affinity on the model label (added to every term the template has, since
// terms are ORed) plus preferred terms weighted in the order given. The
// template must not place by the model label itself: the controller owns it.
func mergePlacement(spec *corev1.PodSpec, task *gputaskv1.GPUTaskSpec, opts Options) error {
	if UsesDRA(task, opts) {
		// The claim's selectors pick the model, device by device.
		return nil
	}
	key := opts.GPULabelKey
	if v, ok := spec.NodeSelector[key]; ok {
		if task.GPU == "" || v != task.GPU || len(task.GPUAlternatives) > 0 {
			return fmt.Errorf("spec.template.spec.nodeSelector[%s] (%q): the GPU model is placed by spec.gpu and spec.gpuAlternatives (%q); remove it from the template", key, v, strings.Join(Models(task), ","))
		}
	}
	if err := checkAffinityKey(spec.Affinity, key); err != nil {
		return err
	}
	models := Models(task)
	for i, m := range models {
		if errs := validation.IsValidLabelValue(m); len(errs) > 0 {
			field := "spec.gpu"
			if i > 0 {
				field = fmt.Sprintf("spec.gpuAlternatives[%d]", slices.Index(task.GPUAlternatives, m))
			}
			return fmt.Errorf("%s: %q is not a value of the node label %s (%s); a model with spaces is matched in DRA mode only", field, m, key, strings.Join(errs, "; "))
		}
	}
	switch len(models) {
	case 0:
		return nil
	case 1:
		if spec.NodeSelector == nil {
			spec.NodeSelector = map[string]string{}
		}
		spec.NodeSelector[key] = models[0]
		return nil
	}

	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := spec.Affinity.NodeAffinity
	accepted := corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: models}
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	required := na.RequiredDuringSchedulingIgnoredDuringExecution
	if len(required.NodeSelectorTerms) == 0 {
		required.NodeSelectorTerms = []corev1.NodeSelectorTerm{{}}
	}
	for i := range required.NodeSelectorTerms {
		t := &required.NodeSelectorTerms[i]
		t.MatchExpressions = append(t.MatchExpressions, *accepted.DeepCopy())
	}
	for i, m := range models {
		na.PreferredDuringSchedulingIgnoredDuringExecution = append(na.PreferredDuringSchedulingIgnoredDuringExecution, corev1.PreferredSchedulingTerm{
			Weight: PreferenceWeight(i, len(models)),
			Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{m}},
			}},
		})
	}
	return nil
}

func checkAffinityKey(a *corev1.Affinity, key string) error {
	if a == nil || a.NodeAffinity == nil {
		return nil
	}
	const path = "spec.template.spec.affinity.nodeAffinity"
	reject := func(where string) error {
		return fmt.Errorf("%s.%s: uses the GPU model label %s, which is placed by spec.gpu and spec.gpuAlternatives; remove it from the template", path, where, key)
	}
	if r := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution; r != nil {
		for i := range r.NodeSelectorTerms {
			if usesKey(&r.NodeSelectorTerms[i], key) {
				return reject(fmt.Sprintf("requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[%d]", i))
			}
		}
	}
	for i := range a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		if usesKey(&a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution[i].Preference, key) {
			return reject(fmt.Sprintf("preferredDuringSchedulingIgnoredDuringExecution[%d]", i))
		}
	}
	return nil
}

func usesKey(t *corev1.NodeSelectorTerm, key string) bool {
	for _, e := range t.MatchExpressions {
		if e.Key == key {
			return true
		}
	}
	return false
}

// GPUTaint is the taint GPU node pools carry, which the toleration added by
// default tolerates.
func GPUTaint(gpuResource corev1.ResourceName) corev1.Taint {
	return corev1.Taint{Key: string(gpuResource), Value: "present", Effect: corev1.TaintEffectNoSchedule}
}

// mergeTolerations keeps the template's tolerations and adds one for the GPU
// taint, as the ExtendedResourceToleration admission plugin does, unless one
// of them already tolerates it.
func mergeTolerations(spec *corev1.PodSpec, _ *gputaskv1.GPUTaskSpec, opts Options) error {
	if !opts.GPUTaintToleration {
		return nil
	}
	want := corev1.Toleration{Key: string(opts.GPUResourceName), Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	for i := range spec.Tolerations {
		if spec.Tolerations[i].MatchToleration(&want) {
			return nil
		}
	}
	spec.Tolerations = append(spec.Tolerations, want)
	return nil
}

// UntoleratedTaints names, as key=value:effect and sorted, the NoSchedule and
// NoExecute taints that pod does not tolerate on the nodes it could run on:
// nodes with GPUs of one of models (any model when empty). The scheduler's
// message only says "had untolerated taint(s)"; this says which.
func UntoleratedTaints(pod *corev1.Pod, nodes []*corev1.Node, labelKey string, models []string, gpuResource corev1.ResourceName) []string {
	seen := map[string]bool{}
	for _, node := range nodes {
		if _, ok := node.Status.Allocatable[gpuResource]; !ok {
			continue
		}
		if len(models) > 0 && !slices.Contains(models, node.Labels[labelKey]) {
			continue
		}
		for i := range node.Spec.Taints {
			taint := &node.Spec.Taints[i]
			if taint.Effect == corev1.TaintEffectPreferNoSchedule || tolerates(pod.Spec.Tolerations, taint) {
				continue
			}
			seen[taint.ToString()] = true
		}
	}
	out := make([]string, 0, len(seen))
	for t := range seen {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

func tolerates(tolerations []corev1.Toleration, taint *corev1.Taint) bool {
	for i := range tolerations {
		if tolerations[i].ToleratesTaint(klog.Background(), taint, false) {
			return true
		}
	}
	return false
}
