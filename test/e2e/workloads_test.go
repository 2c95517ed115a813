package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/podspec"
	"github.com/gputask/gputask-controller/test/framework"
)

// TestWorkloads runs real GPU workloads on GPU nodes that carry the GPU taint,
// as node pools do: the examples of artifacts/examples/workloads, a task that
// falls back to another GPU model, a conflicting spec, a spec edit on a
// running task, and, last, the controller with the GPU toleration turned off.
func TestWorkloads(t *testing.T) {
	t.Parallel()
	c := startCluster(t,
		gpuNode{"a100-1", "A100", 8},
		gpuNode{"h100-1", "H100", 8},
		gpuNode{"l40s-1", "L40S", 8},
	)
	ctx := context.Background()
	for _, n := range []string{"a100-1", "h100-1", "l40s-1"} {
		if err := c.TaintGPUNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	controller := c.StartControllerT(t, "--workers=2")

	t.Run("examples", func(t *testing.T) { testWorkloadExamples(t, c) })
	t.Run("conflict", func(t *testing.T) { testWorkloadConflict(t, c) })
	t.Run("gpu alternatives", func(t *testing.T) { testGPUAlternatives(t, c) })
	t.Run("spec edit", func(t *testing.T) { testSpecEditOnRunningTask(t, c) })

	// A second controller on the same cluster would fight the first.
	controller.Stop()
	t.Run("toleration off", func(t *testing.T) {
		c.StartControllerT(t, "--workers=2", "--gpu-taint-toleration=false")
		testTolerationOff(t, c)
	})
}

// testWorkloadExamples applies each example with kubectl and compares its pod
// with the example's template, field by field.
func testWorkloadExamples(t *testing.T, c *framework.ControlPlane) {
	ns := c.NamespaceT(t)
	ctx := context.Background()
	// The API server refuses a pod whose RuntimeClass does not exist.
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "nvidia"}, Handler: "nvidia"}
	if _, err := c.Kube.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Kube.NodeV1().RuntimeClasses().Delete(context.Background(), "nvidia", metav1.DeleteOptions{})
	})

	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "artifacts", "examples", "workloads", "*.yaml"))
	if err != nil || len(files) != 4 {
		t.Fatalf("want the 4 workload examples, got %v (%v)", files, err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			c.KubectlT(t, "apply", "-n", ns, "-f", file)
			task := exampleTask(t, file)
			podName := task.Name
			if task.Kind == "GPUTaskSet" {
				podName = waitSetTaskName(t, c, ns, task.Name)
			}
			live := waitTask(t, c, ns, podName, "has a pod", func(tk *gputaskv1.GPUTask) bool { return tk.Status.PodName != "" })
			if cond := meta.FindStatusCondition(live.Status.Conditions, gputaskv1.ConditionSpecValid); cond == nil || cond.Status != metav1.ConditionTrue {
				t.Fatalf("SpecValid: %+v", cond)
			}
			pod := taskPod(t, c, ns, podName)
			checkPodCarriesTemplate(t, task, pod)
		})
	}

	out := c.KubectlT(t, "explain", "gputask.spec.template.spec.volumes")
	for _, want := range []string{"persistentVolumeClaim", "emptyDir"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl explain gputask.spec.template.spec.volumes does not show %s:\n%s", want, out)
		}
	}
}

// exampleTask reads an example as the GPUTask it makes: a GPUTaskSet's is its
// template. Kind says which it was.
func exampleTask(t *testing.T, file string) *gputaskv1.GPUTask {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	task := &gputaskv1.GPUTask{}
	if err := yaml.Unmarshal(raw, task); err != nil {
		t.Fatal(err)
	}
	if task.Kind == "GPUTaskSet" {
		set := &gputaskv1.GPUTaskSet{}
		if err := yaml.Unmarshal(raw, set); err != nil {
			t.Fatal(err)
		}
		task.Spec = set.Spec.Template.Spec
	}
	return task
}

func waitSetTaskName(t *testing.T, c *framework.ControlPlane, ns, set string) string {
	t.Helper()
	var name string
	framework.Poll(t, waitTimeout, "a task of set "+set, func(ctx context.Context) (bool, string) {
		list, err := c.GPUTask.GputaskV1().GPUTasks(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{gputaskv1.LabelTaskSet: set}.String()})
		if err != nil || len(list.Items) == 0 {
			return false, fmt.Sprint(err)
		}
		name = list.Items[0].Name
		return true, ""
	})
	return name
}

// checkPodCarriesTemplate compares every field the example's template sets
// with the pod the API server stored, and then the parts the controller owns.
func checkPodCarriesTemplate(t *testing.T, task *gputaskv1.GPUTask, pod *corev1.Pod) {
	t.Helper()
	tmpl := task.Spec.Template
	want := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: tmpl.Metadata.Labels, Annotations: tmpl.Metadata.Annotations}}
	tmpl.Spec.DeepCopyInto(&want.Spec)
	// The toleration is the controller's, added to the template's own.
	want.Spec.Tolerations = append(want.Spec.Tolerations, corev1.Toleration{Key: string(framework.GPUResourceName), Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	if d := podspec.FirstDifference(want, pod); d != "" {
		t.Errorf("the pod does not carry the template's %s", d)
	}
	t.Logf("pod %s carries every field of the template: %d containers, %d init containers, %d volumes, %d labels, %d annotations",
		pod.Name, len(tmpl.Spec.Containers), len(tmpl.Spec.InitContainers), len(tmpl.Spec.Volumes), len(tmpl.Metadata.Labels), len(tmpl.Metadata.Annotations))

	main := pod.Spec.Containers[podspec.MainContainer(&pod.Spec)]
	gpus, _ := podspec.GPUAmount(task.Spec.GPUAmount)
	if got := main.Resources.Limits[framework.GPUResourceName]; got.Cmp(*resource.NewQuantity(gpus, resource.DecimalSI)) != 0 {
		t.Errorf("main container %s: GPU limit %s, want %d", main.Name, got.String(), gpus)
	}
	if task.Spec.Image != "" && main.Image != task.Spec.Image {
		t.Errorf("main container image %q, want %q", main.Image, task.Spec.Image)
	}
	if ref := metav1.GetControllerOf(pod); pod.Labels[gputaskv1.LabelTask] != pod.Name || ref == nil || ref.Kind != "GPUTask" || ref.Name != pod.Name {
		t.Errorf("pod labels %v owner %v: want the controller's", pod.Labels, pod.OwnerReferences)
	}
	if tmpl.Spec.RestartPolicy == "" && pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %s, want Never", pod.Spec.RestartPolicy)
	}
	if len(task.Spec.GPUAlternatives) > 0 {
		na := pod.Spec.Affinity.NodeAffinity
		if na == nil || na.RequiredDuringSchedulingIgnoredDuringExecution == nil || len(na.PreferredDuringSchedulingIgnoredDuringExecution) != 1+len(task.Spec.GPUAlternatives) {
			t.Errorf("node affinity %+v does not accept %s and %v", na, task.Spec.GPU, task.Spec.GPUAlternatives)
		}
	} else if pod.Spec.NodeSelector[framework.GPUProductLabel] != task.Spec.GPU {
		t.Errorf("node selector %v, want %s=%s", pod.Spec.NodeSelector, framework.GPUProductLabel, task.Spec.GPU)
	}
}

// testWorkloadConflict: a short field and the template that disagree are
// InvalidSpec, with both fields named, and no pod.
func testWorkloadConflict(t *testing.T, c *framework.ControlPlane) {
	ns := c.NamespaceT(t)
	task := newTask("conflict", "L40S", 2, func(s *gputaskv1.GPUTaskSpec) {
		s.Template = &gputaskv1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "task", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{framework.GPUResourceName: resource.MustParse("4")}},
		}}}}
	})
	createTask(t, c, ns, task)
	got := waitTask(t, c, ns, "conflict", "is InvalidSpec", func(tk *gputaskv1.GPUTask) bool {
		cond := meta.FindStatusCondition(tk.Status.Conditions, gputaskv1.ConditionSpecValid)
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == "InvalidSpec"
	})
	msg := meta.FindStatusCondition(got.Status.Conditions, gputaskv1.ConditionSpecValid).Message
	for _, field := range []string{"spec.gpu-amount", "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]"} {
		if !strings.Contains(msg, field) {
			t.Errorf("message %q does not name %s", msg, field)
		}
	}
	if pod := taskPod(t, c, ns, "conflict"); pod != nil {
		t.Errorf("a conflicting spec got pod %s", pod.Name)
	}
}

// testGPUAlternatives: with the only A100 node full, a task that accepts an
// H100 runs on the H100 node and says so in status.
func testGPUAlternatives(t *testing.T, c *framework.ControlPlane) {
	ns := c.NamespaceT(t)
	createTask(t, c, ns, newTask("fill-a100", "A100", 8))
	filler := waitTask(t, c, ns, "fill-a100", "runs", taskRunning)
	if filler.Status.NodeName != "a100-1" || filler.Status.GPUModel != "A100" {
		t.Fatalf("filler on %q model %q, want a100-1 and A100", filler.Status.NodeName, filler.Status.GPUModel)
	}
	createTask(t, c, ns, newTask("flexible", "A100", 1, func(s *gputaskv1.GPUTaskSpec) { s.GPUAlternatives = []string{"H100"} }))
	got := waitTask(t, c, ns, "flexible", "runs", func(tk *gputaskv1.GPUTask) bool { return taskRunning(tk) && tk.Status.GPUModel != "" })
	if got.Status.NodeName != "h100-1" || got.Status.GPUModel != "H100" {
		t.Errorf("task on node %q, gpuModel %q; want h100-1 and H100", got.Status.NodeName, got.Status.GPUModel)
	}
	t.Logf("kubectl get gt:\n%s", c.KubectlT(t, "get", "gt", "-n", ns, "-o", "custom-columns=NAME:.metadata.name,NODE:.status.nodeName,MODEL:.status.gpuModel"))
}

// testSpecEditOnRunningTask: a task runs on a tainted node by default; an edit
// of its spec turns PodUpToDate False, naming the field, and leaves the pod
// alone until a restart is asked for.
func testSpecEditOnRunningTask(t *testing.T, c *framework.ControlPlane) {
	ns := c.NamespaceT(t)
	ctx := context.Background()
	createTask(t, c, ns, newTask("worker", "L40S", 1))
	running := waitTask(t, c, ns, "worker", "runs on the tainted node", taskRunning)
	if running.Status.NodeName != "l40s-1" {
		t.Fatalf("task on %q, want l40s-1", running.Status.NodeName)
	}
	before := taskPod(t, c, ns, "worker")
	if before.Annotations[gputaskv1.AnnotationPodSpecHash] == "" {
		t.Errorf("the pod carries no %s: %v", gputaskv1.AnnotationPodSpecHash, before.Annotations)
	}
	waitTask(t, c, ns, "worker", "is PodUpToDate", func(tk *gputaskv1.GPUTask) bool {
		return meta.IsStatusConditionTrue(tk.Status.Conditions, gputaskv1.ConditionPodUpToDate)
	})

	patch := []byte(`{"spec":{"image":"busybox:1.37","env":[{"name":"MODE","value":"fast"}]}}`)
	if _, err := c.GPUTask.GputaskV1().GPUTasks(ns).Patch(ctx, "worker", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	stale := waitTask(t, c, ns, "worker", "is not PodUpToDate", func(tk *gputaskv1.GPUTask) bool {
		cond := meta.FindStatusCondition(tk.Status.Conditions, gputaskv1.ConditionPodUpToDate)
		return cond != nil && cond.Status == metav1.ConditionFalse && tk.Status.ObservedGeneration == tk.Generation
	})
	cond := meta.FindStatusCondition(stale.Status.Conditions, gputaskv1.ConditionPodUpToDate)
	if !strings.Contains(cond.Message, "spec.containers[task].image") {
		t.Errorf("PodUpToDate message %q does not name spec.containers[task].image", cond.Message)
	}
	t.Logf("PodUpToDate=%s reason=%s message=%q", cond.Status, cond.Reason, cond.Message)

	// The condition is written in the sync that saw the edit; that sync
	// left the pod as it was.
	if after := taskPod(t, c, ns, "worker"); after == nil || after.UID != before.UID || after.DeletionTimestamp != nil {
		t.Fatalf("the pod was touched by a spec edit: before %s, after %+v", before.UID, after)
	}

	// The request must be newer than the pod, at the whole second that an
	// RFC 3339 stamp and a creationTimestamp keep; the controller waits for
	// a time still ahead.
	at := before.CreationTimestamp.Add(time.Second).UTC().Format(time.RFC3339)
	restart := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, gputaskv1.AnnotationRestartedAt, at)
	if _, err := c.GPUTask.GputaskV1().GPUTasks(ns).Patch(ctx, "worker", types.MergePatchType, []byte(restart), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitTask(t, c, ns, "worker", "runs the new pod", func(tk *gputaskv1.GPUTask) bool {
		return taskRunning(tk) && meta.IsStatusConditionTrue(tk.Status.Conditions, gputaskv1.ConditionPodUpToDate)
	})
	after := taskPod(t, c, ns, "worker")
	if after == nil || after.UID == before.UID || after.Spec.Containers[0].Image != "busybox:1.37" {
		t.Errorf("after the restart: pod %+v, want a new pod with image busybox:1.37", after)
	}
}

// testTolerationOff: without the controller's toleration the task's pod stays
// Pending on tainted nodes, and the task's Scheduled condition says why.
func testTolerationOff(t *testing.T, c *framework.ControlPlane) {
	ns := c.NamespaceT(t)
	createTask(t, c, ns, newTask("untolerated", "L40S", 1))
	got := waitTask(t, c, ns, "untolerated", "is unschedulable", func(tk *gputaskv1.GPUTask) bool {
		cond := meta.FindStatusCondition(tk.Status.Conditions, gputaskv1.ConditionScheduled)
		return cond != nil && cond.Status == metav1.ConditionFalse && strings.Contains(cond.Message, framework.GPUTaint.ToString())
	})
	cond := meta.FindStatusCondition(got.Status.Conditions, gputaskv1.ConditionScheduled)
	if got.Status.Phase != gputaskv1.GPUTaskPending || !strings.Contains(cond.Message, "untolerated taint") || !strings.Contains(cond.Message, framework.GPUTaint.ToString()) {
		t.Errorf("phase %s, Scheduled message %q: want Pending and the untolerated taint %s", got.Status.Phase, cond.Message, framework.GPUTaint.ToString())
	}
	t.Logf("Scheduled=%s reason=%s message=%q", cond.Status, cond.Reason, cond.Message)
	if pod := taskPod(t, c, ns, "untolerated"); pod == nil || len(pod.Spec.Tolerations) != 2 {
		// The two are the not-ready and unreachable tolerations of admission.
		t.Errorf("pod tolerations: %+v, want only admission's", pod)
	}
}
