package autoscaler

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/gpuprofile"
	"github.com/gputask/gputask-controller/pkg/scaling"
)

// engineOf is the engine the SLO policy sizes a set by: the profile
// slo.engine names, with its KV cache, or nil without slo.engine (the
// policy then learns the engine from the workers' metrics). The error says
// why the profile cannot be read, in words fit for a condition: never the
// ConfigMap's text.
func (c *Controller) engineOf(ctx context.Context, set *gputaskv1.GPUTaskSet, state *setState) (*scaling.Engine, error) {
	as := set.Spec.Autoscaling
	if as.Policy.Type != gputaskv1.SLOPolicy || as.Policy.SLO == nil || as.Policy.SLO.Engine == nil {
		state.profile, state.profileFrom = nil, ""
		return nil, nil
	}
	p, err := c.profileOf(ctx, set, as.Policy.SLO.Engine, state)
	if err != nil {
		return nil, err
	}
	return scaling.ProfileEngine(p), nil
}

// profileOf reads the profile, parsing a ConfigMap's once per version of
// it: a set reads its profile at every evaluation.
func (c *Controller) profileOf(ctx context.Context, set *gputaskv1.GPUTaskSet, e *gputaskv1.EngineSpec, state *setState) (*gpuprofile.Profile, error) {
	if e.Profile != "" {
		return scaling.LookupProfile(e.Profile)
	}
	ref := e.ConfigMapRef
	if ref == nil {
		return nil, fmt.Errorf("slo.engine names no profile")
	}
	if c.configMaps == nil {
		return nil, fmt.Errorf("slo.engine.configMapRef: this controller reads no ConfigMaps")
	}
	// The set's own namespace only: a set never reads another
	// namespace's data.
	cm, err := c.configMaps.ConfigMaps(set.Namespace).Get(ref.Name)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("ConfigMap %q of slo.engine.configMapRef not found in namespace %s with the label %s=true",
			ref.Name, set.Namespace, gputaskv1.LabelEngineProfile)
	case err != nil:
		return nil, fmt.Errorf("reading ConfigMap %q of slo.engine.configMapRef: %w", ref.Name, err)
	}
	from := string(cm.UID) + "/" + cm.ResourceVersion + "/" + ref.Key
	if state.profile != nil && state.profileFrom == from {
		return state.profile, nil
	}
	data, ok := cm.Data[ref.Key]
	if !ok {
		return nil, fmt.Errorf("ConfigMap %q of slo.engine.configMapRef has no key %q", ref.Name, ref.Key)
	}
	p, err := gpuprofile.Parse([]byte(data))
	if err != nil {
		// The parser quotes the text it failed on: the detail is for the
		// operator's log, not for a status every reader of the set sees.
		klog.FromContext(ctx).V(2).Info("Engine profile does not parse", "configMap", ref.Name, "key", ref.Key, "err", err)
		return nil, fmt.Errorf("key %q of ConfigMap %q of slo.engine.configMapRef is not an engine profile (the format of gpuprofile: decode and prefill points, kv_tokens_fit)",
			ref.Key, ref.Name)
	}
	p.Name = set.Namespace + "/" + ref.Name + "/" + ref.Key
	state.profile, state.profileFrom = p, from
	return p, nil
}
