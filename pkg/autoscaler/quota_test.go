package autoscaler

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/kueue"
	"github.com/gputask/gputask-controller/pkg/scaling"
)

// quotas is a Kueue whose LocalQueue "gpus" of the default namespace points
// at the ClusterQueue "team-a" with nominal GPUs in one flavor, reserved
// of them in use.
func quotas(t *testing.T, nominal, reserved int64) *kueue.Quotas {
	t.Helper()
	q, err := kueue.NewQuotas(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), schema.GroupVersion{Group: kueue.Group, Version: "v1beta2"}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	lq := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
		"metadata": map[string]any{"namespace": metav1.NamespaceDefault, "name": "gpus"},
		"spec":     map[string]any{"clusterQueue": "team-a"},
	}}
	cq := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
		"metadata": map[string]any{"name": "team-a"},
		"spec": map[string]any{"resourceGroups": []any{map[string]any{"flavors": []any{map[string]any{
			"name": "gpu-a100", "resources": []any{map[string]any{"name": "nvidia.com/gpu", "nominalQuota": nominal}}}}}}},
		"status": map[string]any{"flavorsReservation": []any{map[string]any{
			"name": "gpu-a100", "resources": []any{map[string]any{"name": "nvidia.com/gpu", "total": reserved}}}}},
	}}
	informers := q.Informers()
	if err := informers[0].GetIndexer().Add(lq); err != nil {
		t.Fatal(err)
	}
	if err := informers[1].GetIndexer().Add(cq); err != nil {
		t.Fatal(err)
	}
	return q
}

// queuedSet is a capacity-aware set of 2-GPU tasks whose pods name the
// LocalQueue "gpus".
func queuedSet(replicas int32) *gputaskv1.GPUTaskSet {
	set := newSet("web", replicas)
	set.Spec.Autoscaling.CapacityAware = true
	set.Spec.Autoscaling.Policy.StepUp = ptr.To[int32](8)
	set.Spec.Template.Spec.GPUAmount = ptr.To(intstr.FromInt32(2))
	set.Spec.Template.Metadata.Labels = map[string]string{kueue.LabelQueueName: "gpus"}
	return set
}

// gatedPod is a task's pod that waits for Kueue's admission.
func gatedPod(name string) *corev1.Pod {
	p := gpuPod(name, "", 2, corev1.PodPending)
	p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/admission"}}
	return p
}

// TestQuotaCapsCapacity is the case of a ClusterQueue with 4 GPUs on nodes
// with 16 free: the set counts what the quota admits, not the nodes' free
// GPUs, and names the quota.
func TestQuotaCapsCapacity(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	f.quotas = quotas(t, 4, 2)
	set := queuedSet(1)
	f.Add(gpuNode("a100-1", "A100", 8, false), gpuNode("a100-2", "A100", 8, false))
	f.Add(gpuPod("web-0", "a100-1", 2, corev1.PodRunning), task("web-0", set, "a100-1"))
	c := f.autoscale(ctx, set, fakeSource{value: 0.95})

	f.syncOK(ctx, c, "web")
	// (4 − 2 reserved) / 2 per task = 1 more, plus web-0, admitted = 2;
	// the nodes alone would take 7 + 1.
	if f.scaleReplicas != 2 {
		t.Errorf("scale replicas = %d, want the quota's 2", f.scaleReplicas)
	}
	got := f.lastStatus()
	if ptr.Deref(got.Status.CapacityReplicas, -1) != 2 {
		t.Errorf("status.capacityReplicas = %v, want 2", got.Status.CapacityReplicas)
	}
	assertCondition(t, got, gputaskv1.ConditionScalingLimited, metav1.ConditionTrue, scaling.ReasonCapacityLimited)
	if msg := got.Status.LastDecision.Message; !strings.Contains(msg, "the quota of ClusterQueue team-a (LocalQueue gpus: 2 nvidia.com/gpu not reserved)") {
		t.Errorf("decision message %q does not name the quota", msg)
	}
}

// TestQueuedTasksDoNotHoldScaleUp: tasks that wait for admission are
// queued, not starting. When the quota frees, the set scales up at once
// instead of waiting for them to start.
func TestQueuedTasksDoNotHoldScaleUp(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	// Two tasks admitted (4 GPUs reserved of 12 now), two queued.
	f.quotas = quotas(t, 12, 4)
	set := queuedSet(4)
	f.Add(gpuNode("a100-1", "A100", 8, false), gpuNode("a100-2", "A100", 8, false))
	f.Add(gpuPod("web-0", "a100-1", 2, corev1.PodRunning), gpuPod("web-1", "a100-1", 2, corev1.PodRunning),
		gatedPod("web-2"), gatedPod("web-3"))
	young := func(name, node string) *gputaskv1.GPUTask {
		tk := task(name, set, node)
		tk.CreationTimestamp = metav1.NewTime(t0.Add(-30 * 1e9))
		return tk
	}
	ready := func(tk *gputaskv1.GPUTask) *gputaskv1.GPUTask {
		tk.Status.Conditions = []metav1.Condition{{Type: gputaskv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "PodReady"}}
		return tk
	}
	f.Add(ready(task("web-0", set, "a100-1")), ready(task("web-1", set, "a100-1")), young("web-2", ""), young("web-3", ""))
	c := f.autoscale(ctx, set, fakeSource{value: 0.95})

	f.syncOK(ctx, c, "web")
	got := f.lastStatus()
	if got.Status.StartingReplicas != 0 || got.Status.QueuedReplicas != 2 {
		t.Errorf("startingReplicas %d, queuedReplicas %d; want 0 and 2", got.Status.StartingReplicas, got.Status.QueuedReplicas)
	}
	// (12 − 4) / 2 = 4 more, plus the 2 admitted = 6.
	if f.scaleReplicas != 6 || got.Status.LastDecision.Reason != scaling.ReasonCapacityLimited {
		t.Errorf("scale replicas = %d, decision %+v; want 6 and %s", f.scaleReplicas, got.Status.LastDecision, scaling.ReasonCapacityLimited)
	}
}

// TestQuotaOnlyWhereTasksNameAQueue: a set whose tasks name no queue, or a
// queue Kueue does not know, counts the nodes only.
func TestQuotaOnlyWhereTasksNameAQueue(t *testing.T) {
	for _, queue := range []string{"", "unknown"} {
		t.Run("queue="+queue, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			f.quotas = quotas(t, 4, 4)
			set := queuedSet(1)
			set.Spec.Template.Metadata.Labels = nil
			if queue != "" {
				set.Spec.Template.Spec.Template = &gputaskv1.PodTemplate{Metadata: gputaskv1.PodTemplateMeta{Labels: map[string]string{kueue.LabelQueueName: queue}}}
			}
			f.Add(gpuNode("a100-1", "A100", 8, false))
			c := f.newController(ctx)
			n, err := c.capacity(ctx, set)
			if err != nil {
				t.Fatal(err)
			}
			if n.Tasks != 4 || n.Limit != "" {
				t.Errorf("capacity = %+v, want the nodes' 4", n)
			}
		})
	}
}

// TestQueueNameOfTheExample: the Kueue example's set names its LocalQueue
// where the autoscaler reads it.
func TestQueueNameOfTheExample(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "artifacts", "examples", "kueue", "gputaskset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var set gputaskv1.GPUTaskSet
	if err := yaml.UnmarshalStrict(raw, &set); err != nil {
		t.Fatal(err)
	}
	if got := QueueName(&set); got != "gpus" || !set.Spec.Autoscaling.CapacityAware {
		t.Errorf("QueueName = %q, capacityAware %v; want gpus, true", got, set.Spec.Autoscaling.CapacityAware)
	}
}
