package e2e

// Tasks and sets made and read directly through the API, without a cache.

import (
	"context"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

// newTask returns a task asking for amount GPUs of model; edits adjust the spec.
func newTask(name, model string, amount int32, edits ...func(*gputaskv1.GPUTaskSpec)) *gputaskv1.GPUTask {
	a := intstr.FromInt32(amount)
	task := &gputaskv1.GPUTask{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       gputaskv1.GPUTaskSpec{GPU: model, GPUAmount: &a},
	}
	for _, edit := range edits {
		edit(&task.Spec)
	}
	return task
}

func createTask(t *testing.T, c *framework.ControlPlane, ns string, task *gputaskv1.GPUTask) {
	t.Helper()
	if _, err := c.GPUTask.GputaskV1().GPUTasks(ns).Create(context.Background(), task, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating gputask %s/%s: %v", ns, task.Name, err)
	}
}

func taskRunning(task *gputaskv1.GPUTask) bool {
	return task.Status.Phase == gputaskv1.GPUTaskRunning
}

// taskPod returns the task's pod (named like the task), or nil if there is none.
func taskPod(t *testing.T, c *framework.ControlPlane, ns, name string) *corev1.Pod {
	t.Helper()
	pod, err := c.Kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("getting pod %s/%s: %v", ns, name, err)
	}
	return pod
}

// podsOf returns the UIDs of the task's pods on the package's control plane.
func podsOf(t *testing.T, ns, task string) []string {
	t.Helper()
	list, err := cp.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: gputaskv1.LabelTask + "=" + task})
	if err != nil {
		t.Fatal(err)
	}
	uids := make([]string, 0, len(list.Items))
	for _, pod := range list.Items {
		uids = append(uids, string(pod.UID))
	}
	return uids
}

// unschedulableForGPUs reports whether the task's Scheduled condition carries
// the scheduler's verdict that no node has enough GPUs.
func unschedulableForGPUs(task *gputaskv1.GPUTask) bool {
	cond := meta.FindStatusCondition(task.Status.Conditions, gputaskv1.ConditionScheduled)
	return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == "Unschedulable" &&
		strings.Contains(cond.Message, "Insufficient nvidia.com/gpu")
}

// createSet creates the set poolName of replicas tasks of gpuModel, without
// autoscaling, on c.
func createSet(t *testing.T, c *framework.ControlPlane, ns string, replicas int32) {
	t.Helper()
	set := &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: poolName},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: &replicas,
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{GPU: gpuModel}},
		},
	}
	if _, err := c.GPUTask.GputaskV1().GPUTaskSets(ns).Create(context.Background(), set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// setTasks returns the sorted names of the set's tasks that are not being deleted.
func setTasks(t *testing.T, ns, set string) []string {
	t.Helper()
	list, err := cp.GPUTask.GputaskV1().GPUTasks(ns).List(context.Background(), metav1.ListOptions{LabelSelector: gputaskv1.LabelTaskSet + "=" + set})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, task := range list.Items {
		if task.DeletionTimestamp == nil {
			out = append(out, task.Name)
		}
	}
	sort.Strings(out)
	return out
}
