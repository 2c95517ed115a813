package podspec

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

func hashPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "render", Labels: map[string]string{"a": "1", "b": "2"},
			Annotations: map[string]string{"x": "y"},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: ContainerName, Image: "render:1"}}},
	}
}

func TestHash(t *testing.T) {
	base := Hash(hashPod())
	for _, tc := range []struct {
		name   string
		change func(*corev1.Pod)
		same   bool
	}{
		{"nothing", func(*corev1.Pod) {}, true},
		{"maps built in another order", func(p *corev1.Pod) { p.Labels = map[string]string{"b": "2", "a": "1"} }, true},
		{"an empty list for none", func(p *corev1.Pod) { p.Spec.Tolerations = []corev1.Toleration{} }, true},
		{"its own hash", func(p *corev1.Pod) { Stamp(p) }, true},
		{"the failure count", func(p *corev1.Pod) { p.Annotations[gputaskv1.AnnotationFailureCount] = "2" }, true},
		{"what only the API server sets", func(p *corev1.Pod) { p.UID, p.ResourceVersion, p.Status.Phase = "u", "7", corev1.PodRunning }, true},
		{"the image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "render:2" }, false},
		{"a label", func(p *corev1.Pod) { p.Labels["c"] = "3" }, false},
		{"an annotation", func(p *corev1.Pod) { p.Annotations["x"] = "z" }, false},
		{"the node", func(p *corev1.Pod) { p.Spec.NodeName = "gpu-1" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := hashPod()
			tc.change(p)
			if got := Hash(p); (got == base) != tc.same {
				t.Errorf("Hash = %q, unchanged pod %q; want equal: %v", got, base, tc.same)
			}
		})
	}
}

func TestStamp(t *testing.T) {
	p := hashPod()
	p.Annotations = nil
	if Stamped(p) != "" {
		t.Fatal("an unstamped pod has a hash")
	}
	hash := Stamp(p)
	if hash == "" || Stamped(p) != hash || Hash(p) != hash {
		t.Errorf("Stamp = %q, Stamped = %q, Hash after = %q", hash, Stamped(p), Hash(p))
	}
}

func TestTrim(t *testing.T) {
	start := metav1.Now()
	full := func() *corev1.Pod {
		p := hashPod()
		p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "m"}}
		p.OwnerReferences = []metav1.OwnerReference{{Name: "render"}}
		p.Finalizers = []string{"f"}
		p.Spec.NodeName = "gpu-1"
		p.Spec.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}}
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "g"}}
		p.Spec.Volumes = []corev1.Volume{{Name: "v"}}
		p.Status = corev1.PodStatus{
			Phase: corev1.PodFailed, Reason: "Evicted", Message: "m", StartTime: &start, NominatedNodeName: "gpu-2",
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue},
				{Type: corev1.PodReady, Status: corev1.ConditionFalse},
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: ContainerName, Image: "i", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 3, Reason: "Error", Message: "a long termination log", StartedAt: start, FinishedAt: start,
			}}}},
			PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}},
		}
		return p
	}

	stamped := full()
	Stamp(stamped)
	obj, err := Trim(stamped.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	got := obj.(*corev1.Pod)
	want := &corev1.Pod{
		ObjectMeta: stamped.ObjectMeta,
		Spec:       corev1.PodSpec{NodeName: "gpu-1"},
		Status: corev1.PodStatus{
			Phase: corev1.PodFailed, Reason: "Evicted", Message: "m", StartTime: &start, NominatedNodeName: "gpu-2",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}},
			// A Failed pod keeps when its containers ran, and how they ended,
			// for the back-off of its replacement.
			ContainerStatuses: []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 3, Reason: "Error", StartedAt: start, FinishedAt: start,
			}}}},
		},
	}
	want.ManagedFields = nil
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("Trim of a bound stamped pod:\n got %+v\nwant %+v", got, want)
	}

	// Until it is bound, what keeps the pod from a node is kept too.
	pending := stamped.DeepCopy()
	pending.Spec.NodeName = ""
	obj, err = Trim(pending.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	got = obj.(*corev1.Pod)
	if !equality.Semantic.DeepEqual(got.Spec, corev1.PodSpec{Tolerations: pending.Spec.Tolerations, SchedulingGates: pending.Spec.SchedulingGates}) {
		t.Errorf("Trim of a pending stamped pod kept spec %+v", got.Spec)
	}

	// A pod made before pods carried a hash keeps its spec and status.
	legacy := full()
	obj, err = Trim(legacy.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	want = legacy.DeepCopy()
	want.ManagedFields = nil
	if !equality.Semantic.DeepEqual(obj.(*corev1.Pod), want) {
		t.Errorf("Trim of an unstamped pod changed more than managedFields: %+v", obj)
	}

	tombstone := cache.DeletedFinalStateUnknown{Key: "ns/render", Obj: stamped}
	if obj, _ := Trim(tombstone); obj != tombstone {
		t.Errorf("Trim changed a tombstone: %+v", obj)
	}
	if _, ok := stamped.Annotations[gputaskv1.AnnotationPodSpecHash]; !ok {
		t.Fatal("the stamped pod has no hash")
	}
}
