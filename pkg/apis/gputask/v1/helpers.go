package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ReasonInvalidRestartedAt is the Warning event reason, on a GPUTask or a
// GPUTaskSet, for a gputask.io/restartedAt annotation that is not an RFC 3339
// time.
const ReasonInvalidRestartedAt = "InvalidRestartedAt"

// IsStopped reports whether the set's gputask.io/stopped annotation is "true".
func IsStopped(set *GPUTaskSet) bool {
	return set.Annotations[AnnotationStopped] == "true"
}

// IsRefTo reports whether ref names an object of kind in the gputask.io
// group, at any version, so that a reference written by a later API version
// still resolves. It checks neither name nor UID.
func IsRefTo(ref *metav1.OwnerReference, kind string) bool {
	if ref == nil || ref.Kind != kind {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == SchemeGroupVersion.Group
}
