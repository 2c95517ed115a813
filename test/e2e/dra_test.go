package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

// draDriver is the driver, and the DeviceClass, of the test's devices, and
// a100 and h100 their models, as NVIDIA's DRA driver names them.
const (
	draDriver = framework.DRADriver
	a100      = "NVIDIA A100-SXM4-80GB"
	h100      = "NVIDIA H100 80GB HBM3"
)

// createDRANode creates a kwok node whose devices models are published
// in a ResourceSlice (framework.CreateDRANode), with a model label of the
// test's own, and removes both when the test ends.
func createDRANode(t *testing.T, name, ns, model string, devices int) {
	t.Helper()
	if _, err := cp.CreateDRANode(context.Background(), name, "dra-"+ns, model, devices); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.DeleteDRANode(context.Background(), name); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
}

// createDeviceClass applies the DeviceClass of the DRA examples
// (artifacts/examples/dra), removed when the test ends.
func createDeviceClass(t *testing.T) {
	t.Helper()
	cp.KubectlT(t, "apply", "-f", draExample(t, "deviceclass.yaml"))
	t.Cleanup(func() {
		if err := cp.Kube.ResourceV1().DeviceClasses().Delete(context.Background(), draDriver, metav1.DeleteOptions{}); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
}

func draExample(t *testing.T, name string) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "artifacts", "examples", "dra", name)
}

// draTask is a task asking for amount devices of model by DRA.
func draTask(name, model string, amount int32, alternatives ...string) *gputaskv1.GPUTask {
	return newTask(name, model, amount, func(s *gputaskv1.GPUTaskSpec) {
		s.GPUAllocation = gputaskv1.GPUAllocationDRA
		s.GPUAlternatives = alternatives
	})
}

// waitingForDevices reports whether the task's Scheduled condition carries
// the scheduler's verdict that its claim cannot be allocated.
func waitingForDevices(task *gputaskv1.GPUTask) bool {
	cond := meta.FindStatusCondition(task.Status.Conditions, gputaskv1.ConditionScheduled)
	return cond != nil && cond.Status == metav1.ConditionFalse && strings.Contains(cond.Message, "cannot allocate all claims")
}

// TestDRATasks runs GPUTasks whose GPUs come from Dynamic Resource
// Allocation, beside the extended-resource tasks of the other tests (the
// controller's default): one node of two A100s, one of two H100s, published
// as ResourceSlices; kube-controller-manager's resourceclaim-controller
// makes each pod's claim from the task's ResourceClaimTemplate, and the
// scheduler allocates it.
func TestDRATasks(t *testing.T) {
	t.Parallel()
	ns := cp.NamespaceT(t)
	ctx := context.Background()
	createDeviceClass(t)
	a100Node, h100Node := ns+"-a100", ns+"-h100"
	createDRANode(t, a100Node, ns, a100, 2)
	createDRANode(t, h100Node, ns, h100, 2)

	// Two A100s: the whole A100 node.
	createTask(t, cp, ns, draTask("first", a100, 2))
	first := waitTask(t, cp, ns, "first", "Running on the A100 node with its devices", func(tk *gputaskv1.GPUTask) bool {
		return taskRunning(tk) && tk.Status.GPUModel == a100 && len(tk.Status.Devices) == 2
	})
	if first.Status.NodeName != a100Node {
		t.Errorf("first runs on %s, want %s", first.Status.NodeName, a100Node)
	}
	for _, d := range first.Status.Devices {
		if !strings.HasPrefix(d, draDriver+"/"+a100Node+"/gpu-") {
			t.Errorf("first got device %s, want one of the A100 node's", d)
		}
	}
	pod := taskPod(t, cp, ns, "first")
	if pod == nil || len(pod.Spec.ResourceClaims) != 1 || ptr.Deref(pod.Spec.ResourceClaims[0].ResourceClaimTemplateName, "") != "first-gpus" {
		t.Fatalf("first's pod claims %+v, want the template first-gpus", pod)
	}
	if _, ok := pod.Spec.Containers[0].Resources.Limits[framework.GPUResourceName]; ok {
		t.Errorf("first's pod asks for %s as well", framework.GPUResourceName)
	}

	// The A100s are taken: the next task, which accepts H100s, gets them
	// through firstAvailable.
	createTask(t, cp, ns, draTask("second", a100, 2, h100))
	second := waitTask(t, cp, ns, "second", "Running on H100s", func(tk *gputaskv1.GPUTask) bool {
		return taskRunning(tk) && tk.Status.GPUModel == h100
	})
	if second.Status.NodeName != h100Node || len(second.Status.Devices) != 2 {
		t.Errorf("second on %s with devices %v, want %s and two devices", second.Status.NodeName, second.Status.Devices, h100Node)
	}

	// No device is left: the third waits with the scheduler's reason, and
	// runs once the first is gone and its claim deallocated.
	createTask(t, cp, ns, draTask("third", a100, 1))
	waitTask(t, cp, ns, "third", "waiting for devices", waitingForDevices)
	if err := cp.GPUTask.GputaskV1().GPUTasks(ns).Delete(ctx, "first", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	third := waitTask(t, cp, ns, "third", "Running on an A100", func(tk *gputaskv1.GPUTask) bool {
		return taskRunning(tk) && tk.Status.GPUModel == a100 && len(tk.Status.Devices) == 1
	})
	t.Logf("first %s %s %v; second %s %s %v; third %s %s %v", first.Status.NodeName, first.Status.GPUModel, first.Status.Devices, second.Status.NodeName, second.Status.GPUModel, second.Status.Devices, third.Status.NodeName, third.Status.GPUModel, third.Status.Devices)
	if third.Status.Reschedules != 0 {
		t.Errorf("third was placed again %d times while it waited for a device, want 0", third.Status.Reschedules)
	}

	// A set's tasks each get a template of their own: the set of two A100
	// tasks takes the A100 node's last device and waits for the next.
	set := &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: "pool"},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To[int32](2),
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: draTask("", a100, 1).Spec},
		},
	}
	if _, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, waitTimeout, "one task of the set Running and one waiting for a device", func(ctx context.Context) (bool, string) {
		tasks, err := cp.GPUTask.GputaskV1().GPUTasks(ns).List(ctx, metav1.ListOptions{LabelSelector: gputaskv1.LabelTaskSet + "=pool"})
		if err != nil {
			return false, err.Error()
		}
		var running, waiting int
		for i := range tasks.Items {
			switch tk := &tasks.Items[i]; {
			case taskRunning(tk) && tk.Status.GPUModel == a100:
				running++
			case waitingForDevices(tk):
				waiting++
			}
		}
		return running == 1 && waiting == 1, fmt.Sprintf("%d running, %d waiting", running, waiting)
	})
	// The garbage collector removes the first task's.
	framework.Poll(t, waitTimeout, "one ResourceClaimTemplate per live task (4)", func(ctx context.Context) (bool, string) {
		templates, err := cp.Kube.ResourceV1().ResourceClaimTemplates(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var names []string
		for _, o := range templates.Items {
			names = append(names, o.Name)
		}
		return len(names) == 4, strings.Join(names, ", ")
	})

	// Deleting the tasks and the set leaves no template and no claim behind.
	for _, name := range []string{"second", "third"} {
		if err := cp.GPUTask.GputaskV1().GPUTasks(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Delete(ctx, "pool", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, waitTimeout, "no ResourceClaimTemplate and no ResourceClaim left", func(ctx context.Context) (bool, string) {
		templates, err := cp.Kube.ResourceV1().ResourceClaimTemplates(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		claims, err := cp.Kube.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var left []string
		for _, o := range templates.Items {
			left = append(left, "template "+o.Name)
		}
		for _, o := range claims.Items {
			left = append(left, "claim "+o.Name)
		}
		slices.Sort(left)
		return len(left) == 0, strings.Join(left, ", ")
	})
	// A capacity-aware DRA set under high load stops at the free A100
	// devices (2), whatever the nodes' extended resources say (none).
	load := newLoadServer(t, loadHigh)
	elastic := httpSet("elastic", a100, load.URL(), 8, time.Second)
	elastic.Spec.Template.Spec = draTask("", a100, 1).Spec
	elastic.Spec.Autoscaling.CapacityAware = true
	elastic.Spec.Autoscaling.Policy.StepUp = ptr.To[int32](4)
	if _, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Create(ctx, elastic, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, waitTimeout, "the elastic set capped at the 2 free A100s", func(ctx context.Context) (bool, string) {
		s, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Get(ctx, "elastic", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return ptr.Deref(s.Spec.Replicas, 0) == 2 && ptr.Deref(s.Status.CapacityReplicas, -1) == 2 && s.Status.ReadyReplicas == 2 &&
			conditionIs(s, gputaskv1.ConditionScalingLimited, metav1.ConditionTrue, "CapacityLimited"), describeStatus(s)
	})
	if err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Delete(ctx, "elastic", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// The example task runs as it is written: an A100 of at least 40Gi.
	cp.KubectlT(t, "apply", "-n", ns, "-f", draExample(t, "gputask.yaml"))
	example := waitTask(t, cp, ns, "dra-task", "Running on an A100", func(tk *gputaskv1.GPUTask) bool {
		return taskRunning(tk) && tk.Status.GPUModel == a100 && len(tk.Status.Devices) == 1
	})
	if example.Status.NodeName != a100Node {
		t.Errorf("the example runs on %s, want %s", example.Status.NodeName, a100Node)
	}
	pods, err := cp.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Name != "dra-task" && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			t.Errorf("pod %s is left", p.Name)
		}
	}
}
