package autoscaler

import (
	"context"

	corelisters "k8s.io/client-go/listers/core/v1"
)

// cachedPods is a PodCache over a preloaded lister, for the fixture.
type cachedPods struct{ corelisters.PodLister }

func (p cachedPods) Lister(context.Context) (corelisters.PodLister, error) { return p.PodLister, nil }
func (cachedPods) Stop()                                                   {}
