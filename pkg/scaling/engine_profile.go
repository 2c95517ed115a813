package scaling

import (
	"fmt"

	"github.com/gputask/gputask-controller/pkg/gpuprofile"
)

// ProfileEngine is the engine the SLO policy sizes a set by when
// slo.engine gives profile p: the profile as the model, with the tokens
// its KV cache holds. The autoscaler and the replay both build Inputs.Engine
// here, so that a replayed decision sizes by the engine the controller's
// would.
func ProfileEngine(p *gpuprofile.Profile) *Engine {
	return &Engine{Model: p, KVTokens: float64(p.KVTokensFit)}
}

// LookupProfile is the profile slo.engine.profile names among those built
// into the controller. The error says which names there are, in words fit
// for a condition.
func LookupProfile(name string) (*gpuprofile.Profile, error) {
	p, err := gpuprofile.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("slo.engine.profile %q is not a profile of this controller (%v)", name, gpuprofile.Names())
	}
	return p, nil
}
