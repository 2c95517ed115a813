package autoscaler

import (
	"context"

	corelisters "k8s.io/client-go/listers/core/v1"
)

// PodCache gives the capacity count the non-terminal pods of the cluster.
// A running controller's is a lazycache.Pods, which runs only while
// capacity-aware sets read it.
type PodCache interface {
	// Lister returns a lister of those pods once their cache has synced.
	Lister(ctx context.Context) (corelisters.PodLister, error)
	// Stop stops the cache, if it runs.
	Stop()
}
