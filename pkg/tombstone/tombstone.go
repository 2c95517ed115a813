// Package tombstone unwraps the objects that informers hand to delete
// handlers. A delete the watch missed arrives on relist as a
// cache.DeletedFinalStateUnknown holding the last state the cache knew; every
// controller's delete handler must look inside it, and report anything else
// it did not expect instead of dropping it silently.
package tombstone

import (
	"fmt"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
)

// Unwrap returns obj, or the object inside its tombstone, as a T. An object
// of another type is reported through utilruntime.HandleError and ok is false.
func Unwrap[T any](obj any) (object T, ok bool) {
	if t, isTombstone := obj.(cache.DeletedFinalStateUnknown); isTombstone {
		obj = t.Obj
	}
	object, ok = obj.(T)
	if !ok {
		utilruntime.HandleError(fmt.Errorf("unexpected object in an informer event: got %T, want %T", obj, object))
	}
	return object, ok
}
