package podspec

import (
	"encoding/json"
	"hash/fnv"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// Hash returns a short hash of what pod asks for: its labels, its
// annotations other than the controller's own records on the pod (the hash
// itself, the failure count), and its spec. Like the Deployment
// controller's pod-template-hash it is an FNV-32a encoded with
// rand.SafeEncodeString, here of the JSON form, so that pods the API would
// store alike (whatever the order of their maps, an empty list or none)
// have equal hashes.
func Hash(pod *corev1.Pod) string {
	annotations := pod.Annotations
	_, hashed := annotations[gputaskv1.AnnotationPodSpecHash]
	_, counted := annotations[gputaskv1.AnnotationFailureCount]
	if hashed || counted {
		annotations = make(map[string]string, len(pod.Annotations))
		for k, v := range pod.Annotations {
			if k != gputaskv1.AnnotationPodSpecHash && k != gputaskv1.AnnotationFailureCount {
				annotations[k] = v
			}
		}
	}
	h := fnv.New32a()
	// Encoding a PodSpec cannot fail: it holds no channels, funcs or
	// non-finite floats.
	_ = json.NewEncoder(h).Encode(struct {
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
		Spec        *corev1.PodSpec   `json:"spec"`
	}{pod.Labels, annotations, &pod.Spec})
	return rand.SafeEncodeString(strconv.FormatUint(uint64(h.Sum32()), 10))
}

// Stamp records Hash(pod) on pod, in its gputask.io/pod-spec-hash
// annotation, and returns the hash.
func Stamp(pod *corev1.Pod) string {
	hash := Hash(pod)
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[gputaskv1.AnnotationPodSpecHash] = hash
	return hash
}

// Stamped is the hash a pod carries, "" for a pod made before pods carried
// one.
func Stamped(pod *corev1.Pod) string {
	return pod.Annotations[gputaskv1.AnnotationPodSpecHash]
}
