package integration

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

const runTimeout = 60 * time.Second

// waitTaskPhase waits until the task's status reports phase and returns it.
func waitTaskPhase(t *testing.T, ns, name string, phase gputaskv1.GPUTaskPhase) *gputaskv1.GPUTask {
	t.Helper()
	var task *gputaskv1.GPUTask
	eventually(t, runTimeout, "task "+ns+"/"+name+" reaching "+string(phase), func(ctx context.Context) (bool, error) {
		var err error
		task, err = cp.GPUTask.GputaskV1().GPUTasks(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return task.Status.Phase == phase, nil
	})
	return task
}

// onlyPod returns the task's single pod, failing unless there is exactly one.
func onlyPod(t *testing.T, ns, task string) *corev1.Pod {
	t.Helper()
	pods, err := taskPods(context.Background(), ns, task)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 {
		t.Fatalf("task %s has %d pods, want exactly 1", task, len(pods))
	}
	return &pods[0]
}

// TestGPUTaskLifecycle follows one task from creation to deletion: the pod it
// gets, the status the controller writes, the status subresource's guard,
// and the garbage collector removing the pod with the task.
func TestGPUTaskLifecycle(t *testing.T) {
	needController(t)
	ns := cp.NamespaceT(t)
	ctx := context.Background()
	tasks := cp.GPUTask.GputaskV1().GPUTasks(ns)

	amount := intstr.FromInt32(2)
	cpu := intstr.FromString("1")
	memory := intstr.FromString("2Gi")
	created, err := tasks.Create(ctx, &gputaskv1.GPUTask{
		ObjectMeta: metav1.ObjectMeta{Name: "train"},
		Spec:       gputaskv1.GPUTaskSpec{GPU: gpuModel, GPUAmount: &amount, CPU: &cpu, Memory: &memory},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	task := waitTaskPhase(t, ns, "train", gputaskv1.GPUTaskRunning)
	pod := onlyPod(t, ns, "train")

	t.Run("pod", func(t *testing.T) {
		owner := metav1.GetControllerOf(pod)
		if owner == nil || owner.APIVersion != "gputask.io/v1" || owner.Kind != "GPUTask" ||
			owner.Name != "train" || owner.UID != created.UID {
			t.Errorf("controller owner = %+v, want GPUTask train uid %s", owner, created.UID)
		}
		if len(pod.Spec.Containers) != 1 {
			t.Fatalf("pod has %d containers, want 1", len(pod.Spec.Containers))
		}
		res := pod.Spec.Containers[0].Resources
		wantLimits := map[corev1.ResourceName]string{framework.GPUResourceName: "2", corev1.ResourceCPU: "1", corev1.ResourceMemory: "2Gi"}
		for name, want := range wantLimits {
			if got := res.Limits[name]; got.Cmp(resource.MustParse(want)) != 0 {
				t.Errorf("limit %s = %s, want %s", name, got.String(), want)
			}
		}
		if got := pod.Spec.NodeSelector[framework.GPUProductLabel]; got != gpuModel {
			t.Errorf("node selector %s = %q, want %q", framework.GPUProductLabel, got, gpuModel)
		}
		if !slices.Contains(nodeNames, pod.Spec.NodeName) {
			t.Errorf("pod runs on %q, want one of %v", pod.Spec.NodeName, nodeNames)
		}
	})

	t.Run("status", func(t *testing.T) {
		if task.Status.PodName != pod.Name || task.Status.NodeName != pod.Spec.NodeName {
			t.Errorf("status podName=%q nodeName=%q, want %q %q", task.Status.PodName, task.Status.NodeName, pod.Name, pod.Spec.NodeName)
		}
		if task.Status.ObservedGeneration != task.Generation {
			t.Errorf("observedGeneration = %d, want %d", task.Status.ObservedGeneration, task.Generation)
		}
		for _, cond := range []string{gputaskv1.ConditionScheduled, gputaskv1.ConditionReady} {
			if !meta.IsStatusConditionTrue(task.Status.Conditions, cond) {
				t.Errorf("condition %s is not True: %+v", cond, task.Status.Conditions)
			}
		}
	})

	t.Run("status-ignored-on-main-resource", func(t *testing.T) {
		current, err := tasks.Get(ctx, "train", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		current.Status.Phase = gputaskv1.GPUTaskFailed
		current.Status.NodeName = "elsewhere"
		if current.Labels == nil {
			current.Labels = map[string]string{}
		}
		current.Labels["touched"] = "yes"
		updated, err := tasks.Update(ctx, current, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if updated.Labels["touched"] != "yes" {
			t.Errorf("label not updated: %v", updated.Labels)
		}
		if updated.Status.Phase != gputaskv1.GPUTaskRunning || updated.Status.NodeName != pod.Spec.NodeName {
			t.Errorf("status changed through the main resource: phase %q node %q", updated.Status.Phase, updated.Status.NodeName)
		}
	})

	t.Run("delete-removes-pod", func(t *testing.T) {
		if err := tasks.Delete(ctx, "train", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, runTimeout, "the garbage collector deleting pod "+pod.Name, func(ctx context.Context) (bool, error) {
			_, err := cp.Kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	})
}

// TestSeedGPUTask applies the example GPUTask exactly as users write it (all
// quantities as strings, a model, a PriorityClass) and expects it to run.
func TestSeedGPUTask(t *testing.T) {
	needController(t)
	ns := cp.NamespaceT(t)
	cp.KubectlT(t, "apply", "-n", ns, "-f", filepath.Join(cp.Root, "artifacts", "examples", "gputask.yaml"))

	task := waitTaskPhase(t, ns, "a100-task", gputaskv1.GPUTaskRunning)
	pod := onlyPod(t, ns, "a100-task")
	if pod.Spec.PriorityClassName != "high" || pod.Spec.Priority == nil || *pod.Spec.Priority != 1000 {
		t.Errorf("pod priority class %q priority %v, want high 1000", pod.Spec.PriorityClassName, pod.Spec.Priority)
	}
	res := pod.Spec.Containers[0].Resources
	for name, want := range map[corev1.ResourceName]string{framework.GPUResourceName: "2", corev1.ResourceCPU: "2", corev1.ResourceMemory: "4Gi"} {
		if got := res.Limits[name]; got.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("limit %s = %s, want %s", name, got.String(), want)
		}
	}
	if !slices.Contains(nodeNames, task.Status.NodeName) {
		t.Errorf("task runs on %q, want a kwok node of %v", task.Status.NodeName, nodeNames)
	}
	out := cp.KubectlT(t, "get", "gt", "a100-task", "-n", ns, "--no-headers")
	for _, want := range []string{"A100", "Running", task.Status.NodeName} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl get gt lacks %q: %s", want, out)
		}
	}
}

// TestExamplesValid proves every example manifest passes the apiserver's
// validation, so the documentation cannot drift from the CRDs.
// Kueue's own kinds (kueue/queues.yaml) need Kueue's CRDs, which this
// control plane does not serve: pkg/kueue's TestQueuesExample reads them as
// the controller does. The Kueue GPUTaskSet names its team's namespace,
// which is dropped to validate it in the test's own.
func TestExamplesValid(t *testing.T) {
	ns := cp.NamespaceT(t)
	dir := filepath.Join(cp.Root, "artifacts", "examples")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"apply", "--dry-run=server", "-R", "-n", ns}
	for _, e := range entries {
		// Karpenter's NodePool and node class need Karpenter's CRDs, which
		// this control plane does not serve: TestKarpenter (test/e2e)
		// applies them to a real Karpenter.
		if e.Name() != "kueue" && e.Name() != "karpenter" {
			args = append(args, "-f", filepath.Join(dir, e.Name()))
		}
	}
	out := cp.KubectlT(t, args...)
	t.Logf("kubectl apply --dry-run=server:\n%s", out)

	raw, err := os.ReadFile(filepath.Join(dir, "kueue", "gputaskset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	raw = regexp.MustCompile(`(?m)^  namespace: .*\n`).ReplaceAll(raw, nil)
	if out, err := cp.KubectlWithInput(t.Context(), raw, "apply", "--dry-run=server", "-n", ns, "-f", "-"); err != nil {
		t.Errorf("kueue/gputaskset.yaml: %v: %s", err, out)
	}
}
