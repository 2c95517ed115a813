package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/kueue"
)

const quotaMessage = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu-a100, 2 more needed"

var workloadsResource = schema.GroupVersionResource{Group: kueue.Group, Version: "v1beta2", Resource: "workloads"}

// kueueWorkload is the Workload Kueue's pod integration makes for pod, with
// the conditions given as type, status, reason, message.
func kueueWorkload(pod *corev1.Pod, conds ...[4]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(kueue.Group + "/v1beta2")
	u.SetKind("Workload")
	u.SetNamespace(pod.Namespace)
	u.SetName("pod-" + pod.Name + "-3c1f2")
	u.SetUID("wl-" + pod.UID)
	u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}})
	var list []any
	for _, c := range conds {
		list = append(list, map[string]any{"type": c[0], "status": c[1], "reason": c[2], "message": c[3]})
	}
	_ = unstructured.SetNestedSlice(u.Object, list, "status", "conditions")
	return u
}

// TestScheduledShowsTheQueuesReason: a task whose pod waits in a Kueue
// queue shows, in its Scheduled condition, what its Workload says, and a
// change of the Workload queues the task.
func TestScheduledShowsTheQueuesReason(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{workloadsResource: "WorkloadList"})
	workloads, err := kueue.NewWorkloads(dyn, workloadsResource, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.opts.Workloads = workloads

	task := newTask("render")
	pod := podWith(task, corev1.PodPending, "")
	pod.Labels["kueue.x-k8s.io/managed"] = "true"
	pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/admission"}}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "SchedulingGated",
		Message: "Scheduling is blocked due to non-empty scheduling gates"}, {Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	f.Add(task, pod)
	wl := kueueWorkload(pod, [4]string{"QuotaReserved", "False", "Pending", quotaMessage})
	trimmed, _ := kueue.Trim(wl)
	if err := workloads.Informer().GetIndexer().Add(trimmed); err != nil {
		t.Fatal(err)
	}

	want := withStatus(task, gputaskv1.GPUTaskPending, "")
	want.Status.Conditions = append(want.Status.Conditions[:0:0], want.Status.Conditions...)
	for i := range want.Status.Conditions {
		if want.Status.Conditions[i].Type == gputaskv1.ConditionScheduled {
			want.Status.Conditions[i].Reason, want.Status.Conditions[i].Message = "Pending", quotaMessage
		}
	}
	f.ExpectApplyStatus(want)
	f.Run(ctx, key(task))

	// Kueue admits the workload: its update queues the task.
	for f.c.workqueue.Len() > 0 {
		k, _ := f.c.workqueue.Get()
		f.c.workqueue.Done(k)
	}
	admitted := kueueWorkload(pod, [4]string{"QuotaReserved", "True", "QuotaReserved", ""}, [4]string{"Admitted", "True", "Admitted", ""})
	f.c.addWorkload(klog.Background(), admitted)
	if n := f.c.workqueue.Len(); n != 1 {
		t.Errorf("queued %d keys on the Workload's change, want the task's", n)
	}
	// A Workload of a pod that is not a task's queues nothing.
	stranger := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "stranger", Namespace: pod.Namespace, UID: "stranger"}}
	f.c.addWorkload(klog.Background(), kueueWorkload(stranger))
	if n := f.c.workqueue.Len(); n != 1 {
		t.Errorf("queue length %d after a stranger's Workload, want 1", n)
	}
}
