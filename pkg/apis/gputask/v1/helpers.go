package v1

import (
	"strings"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// IsStopped reports whether the set's gputask.io/stopped annotation is "true".
func IsStopped(obj metav1.Object) bool { return annotationTrue(obj, AnnotationStopped) }

// IsPaused reports whether the set's gputask.io/paused annotation is
// "true": its autoscaler reads nothing and changes nothing.
func IsPaused(obj metav1.Object) bool { return annotationTrue(obj, AnnotationPaused) }

// AnnotationPodBusy on a GPUTask ("true") mirrors gputask.io/busy of its
// pod. The GPUTask controller writes it, and the set controller reads it,
// so that a worker may mark either its pod or its task, and only the GPUTask
// controller reads pods.
const AnnotationPodBusy = "gputask.io/pod-busy"

// AnnotationPodSpecHash on a task's pod is the hash of the pod the task's
// spec asked for when the pod was made, as a Deployment's pods carry
// pod-template-hash. The GPUTask controller compares it with the hash of the
// pod the spec asks for now to find drift without keeping pod specs cached.
const AnnotationPodSpecHash = "gputask.io/pod-spec-hash"

// AnnotationFailureCount on a task's pod is how many of the task's pods
// failed in a row before it was made, each within ten minutes of its start
// (pkg/reschedule's back-off). The GPUTask controller sets it on a pod that
// replaces a failed one, and reads it when that pod fails too, to know how
// long the next replacement waits.
const AnnotationFailureCount = "gputask.io/failure-count"

// The marks node autoscalers read before they move a pod: Karpenter
// disrupts no node that runs a pod with karpenter.sh/do-not-disrupt "true",
// and the cluster autoscaler removes no node that runs a pod with
// cluster-autoscaler.kubernetes.io/safe-to-evict "false". The GPUTask
// controller puts both on the pod of a busy worker and takes them off once
// it is idle, so that consolidation moves idle workers and interrupts no
// request; a task whose template sets either keeps what it sets.
const (
	AnnotationDoNotDisrupt = "karpenter.sh/do-not-disrupt"
	AnnotationSafeToEvict  = "cluster-autoscaler.kubernetes.io/safe-to-evict"
)

// DisruptionProtected reports whether a pod carries both marks that keep
// node autoscalers from evicting it.
func DisruptionProtected(obj metav1.Object) bool {
	a := obj.GetAnnotations()
	return a[AnnotationDoNotDisrupt] == "true" && a[AnnotationSafeToEvict] == "false"
}

// IsBusy reports whether a task or its pod carries gputask.io/busy "true":
// the worker is in the middle of work that a scale-in should not cut off.
func IsBusy(obj metav1.Object) bool { return annotationTrue(obj, AnnotationBusy) }

// WorkerBusy reports whether a task's worker is busy: gputask.io/busy on the
// task, or on its pod as the GPUTask controller mirrors it.
func WorkerBusy(task *GPUTask) bool {
	return IsBusy(task) || annotationTrue(task, AnnotationPodBusy)
}

// IsDraining reports whether a task or its pod carries gputask.io/draining
// "true": the set has chosen it for scale-in and waits for it to go idle.
func IsDraining(obj metav1.Object) bool { return annotationTrue(obj, AnnotationDraining) }

func annotationTrue(obj metav1.Object, key string) bool {
	return obj.GetAnnotations()[key] == "true"
}

// truncatedSuffix ends a message that was cut.
const truncatedSuffix = "... (truncated)"

// TruncateMessage cuts msg to at most limit bytes, on a rune boundary, and
// says that it did, so a condition or event message never exceeds what the
// API accepts.
func TruncateMessage(msg string, limit int) string {
	if len(msg) <= limit {
		return msg
	}
	cut := max(limit-len(truncatedSuffix), 0)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return strings.TrimRight(msg[:cut], " ") + truncatedSuffix
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
