package framework

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/gputask/gputask-controller/test/kwok"
)

// TestControlPlane proves the harness end to end: every component comes up on
// loopback, a fake GPU node becomes Ready without the not-ready taint, the
// scheduler binds a GPU pod to it, kwok starts it, a pod with the fake exit
// code finishes, and a deleted pod goes away. After the control plane stops,
// no process it started is left.
func TestControlPlane(t *testing.T) {
	cp := StartT(t, Options{
		Scheduler: true, ControllerManager: true, Kwok: true,
		ExtraArgs: map[string][]string{BinScheduler: {"--v=2"}},
	})
	ctx := context.Background()

	scheduler := cp.Process(BinScheduler)
	if scheduler == nil {
		t.Fatal("no kube-scheduler process")
	}
	log, err := os.ReadFile(scheduler.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if firstLine, _, _ := strings.Cut(string(log), "\n"); !strings.HasSuffix(firstLine, "--v=1 --v=2") {
		t.Errorf("kube-scheduler command line %q does not end with the extra --v=2", firstLine)
	}

	if _, err = cp.CreateGPUNode(ctx, "gpu-node-1", "A100", 8); err != nil {
		t.Fatal(err)
	}
	node, err := cp.Kube.CoreV1().Nodes().Get(ctx, "gpu-node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(node.Spec.Taints) != 0 {
		t.Errorf("node taints = %v, want none", node.Spec.Taints)
	}
	if got := node.Status.Allocatable[GPUResourceName]; got.Value() != 8 {
		t.Errorf("allocatable GPUs = %s, want 8", got.String())
	}

	ns := cp.NamespaceT(t)
	running := gpuPod("runs", 2)
	if _, err := cp.Kube.CoreV1().Pods(ns).Create(ctx, running, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := waitPodPhase(t, cp, ns, "runs", corev1.PodRunning)
	if pod.Spec.NodeName != "gpu-node-1" || pod.Status.PodIP == "" {
		t.Errorf("pod node=%q ip=%q, want gpu-node-1 and an IP", pod.Spec.NodeName, pod.Status.PodIP)
	}

	exits := gpuPod("exits", 1)
	exits.Spec.Containers[0].Env = []corev1.EnvVar{{Name: kwok.FakeExitCodeEnv, Value: "3"}}
	if _, err := cp.Kube.CoreV1().Pods(ns).Create(ctx, exits, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod = waitPodPhase(t, cp, ns, "exits", corev1.PodFailed)
	if code := pod.Status.ContainerStatuses[0].State.Terminated.ExitCode; code != 3 {
		t.Errorf("exit code = %d, want 3", code)
	}

	if err := cp.Kube.CoreV1().Pods(ns).Delete(ctx, "runs", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cp.Kube.CoreV1().Pods(ns).Get(ctx, "runs", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("deleted pod still there: %v", err)
	}

	// RBAC is enforced: a ServiceAccount with no binding may not list pods,
	// through the client or through kubectl.
	user, groups := ServiceAccountUser(ns, "default")
	restricted, err := kubernetes.NewForConfig(cp.ConfigAs(user, groups...))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := restricted.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing pods as %s: got %v, want Forbidden", user, err)
	}
	kubeconfig, err := cp.KubeconfigAs("sa", user, groups...)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := cp.Kubectl(ctx, "--kubeconfig="+kubeconfig, "auth", "can-i", "list", "pods", "-n", ns); err == nil || !strings.Contains(out, "no") {
		t.Errorf("kubectl auth can-i as %s: %q, %v; want no", user, out, err)
	}

	out := cp.KubectlT(t, "get", "nodes", "-o", "name")
	if !strings.Contains(out, "node/gpu-node-1") {
		t.Errorf("kubectl get nodes = %q", out)
	}

	procs := cp.Processes()
	cp.Stop()
	for _, p := range procs {
		if !p.Exited() {
			t.Errorf("%s (pid %d) still runs after Stop", p.Name, p.Pid())
		}
	}
}

func gpuPod(name string, gpus int64) *corev1.Pod {
	limits := corev1.ResourceList{GPUResourceName: *resource.NewQuantity(gpus, resource.DecimalSI)}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Image: "fake", Resources: corev1.ResourceRequirements{Limits: limits}}},
		},
	}
}

func waitPodPhase(t *testing.T, cp *ControlPlane, ns, name string, phase corev1.PodPhase) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		pod, err = cp.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && pod.Status.Phase == phase, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s did not reach %s (last: %+v): %v", ns, name, phase, pod.Status, err)
	}
	return pod
}
