// Package served tells whether the API server serves a resource, so that
// informers of optional APIs (Kueue's, Dynamic Resource Allocation's) start
// only where they can list.
package served

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// Resource reports whether the API server serves resource in gv. It asks as
// the discovery client does, on rc (a discovery client's RESTClient), but
// gives up when ctx ends. A group version that is not served is false, not
// an error.
func Resource(ctx context.Context, rc rest.Interface, gv schema.GroupVersion, resource string) (bool, error) {
	list := &metav1.APIResourceList{}
	path := []string{"/apis", gv.Group, gv.Version}
	if gv.Group == "" {
		path = []string{"/api", gv.Version}
	}
	err := rc.Get().AbsPath(path...).Do(ctx).Into(list)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovering %s: %w", gv, err)
	}
	for _, r := range list.APIResources {
		if r.Name == resource {
			return true, nil
		}
	}
	return false, nil
}
