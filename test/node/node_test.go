//go:build realnode

// Package node runs the controller's tasks on a real node: containerd, runc
// and a kubelet on this machine, with the project's device plugin giving it
// fake GPUs. It needs root and changes the host (a bridge, a FORWARD rule,
// sysctls), all restored at the end. It is built only with the realnode
// tag (`go test -tags realnode ./test/node/`, as root). See docs/node.md.
package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

const (
	nodeName = "real-node-0"
	gpuModel = "A100"
	gpus     = 8
)

var (
	cp   *framework.ControlPlane
	node *framework.Node
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "node: "+format+"\n", args...) }
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	started, err := framework.Start(ctx, framework.Options{Scheduler: true, ControllerManager: true, KubeletClient: true, Logf: logf})
	if err != nil {
		logf("FAIL: starting the control plane: %v", err)
		return 1
	}
	cp = started
	code := 1
	defer func() {
		if dir := cp.Cleanup(code != 0); dir != "" {
			logf("control plane logs kept in %s", dir)
		}
	}()
	// Owners go first, or the controller would place their pods again
	// while the node is taken down.
	defer func() {
		if node == nil {
			return
		}
		_ = cp.GPUTask.GputaskV1().GPUTasks(metav1.NamespaceAll).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
		node.Stop(context.Background())
	}()
	if err := setUp(ctx); err != nil {
		logf("FAIL: %v", err)
		framework.CleanupNodeHost(logf)
		return 1
	}
	code = m.Run()
	return code
}

func setUp(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "gputask-node-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	image, err := framework.BuildNodeImage(cp.Root, dir)
	if err != nil {
		return err
	}
	node, err = framework.StartNode(ctx, cp, framework.NodeOptions{
		Name:   nodeName,
		Labels: map[string]string{framework.GPUProductLabel: gpuModel},
		Image:  image,
	})
	if err != nil {
		node = nil
		return fmt.Errorf("starting the node: %w", err)
	}
	plugin := filepath.Join(node.Dir, "gputask-device-plugin")
	build := exec.Command("go", "build", "-o", plugin, "./cmd/gputask-device-plugin")
	build.Dir = cp.Root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building the device plugin: %w: %s", err, out)
	}
	p, err := framework.StartProcess("device-plugin", filepath.Join(node.LogDir, "device-plugin.log"), plugin,
		[]string{"--count=" + fmt.Sprint(gpus), "--id-seed=" + nodeName, "--check-interval=200ms"})
	if err != nil {
		return err
	}
	node.Own(p)
	if _, err := cp.StartController(ctx); err != nil {
		return err
	}
	return nil
}

// TestNodeHasDevicePluginGPUs: the node is Ready, labelled as an A100 node,
// and its GPUs are those the device plugin advertises.
func TestNodeHasDevicePluginGPUs(t *testing.T) {
	framework.Poll(t, 2*time.Minute, "node with 8 allocatable nvidia.com/gpu", func(ctx context.Context) (bool, string) {
		n, err := cp.Kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		q := n.Status.Allocatable[corev1.ResourceName("nvidia.com/gpu")]
		return framework.NodeReady(n) && q.Value() == gpus && n.Labels[framework.GPUProductLabel] == gpuModel,
			fmt.Sprintf("ready=%t gpus=%s label=%q", framework.NodeReady(n), q.String(), n.Labels[framework.GPUProductLabel])
	})
}

// TestTaskGetsTwoDistinctDevices: a GPUTask asking for 2 GPUs runs, and its
// container was given two different devices of the node.
func TestTaskGetsTwoDistinctDevices(t *testing.T) {
	TestNodeHasDevicePluginGPUs(t)
	ns := cp.NamespaceT(t)
	two := intstr.FromInt32(2)
	noToken := false
	task := &gputaskv1.GPUTask{
		ObjectMeta: metav1.ObjectMeta{Name: "two-gpus"},
		Spec: gputaskv1.GPUTaskSpec{
			GPU:       gpuModel,
			GPUAmount: &two,
			Template: &gputaskv1.PodTemplate{Spec: corev1.PodSpec{
				AutomountServiceAccountToken:  &noToken,
				TerminationGracePeriodSeconds: ptr.To(int64(5)),
				Containers: []corev1.Container{{
					Name:            "task",
					Image:           framework.NodeImage,
					ImagePullPolicy: corev1.PullNever,
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("128Mi"),
					}},
				}},
			}},
		},
	}
	ctx := context.Background()
	if _, err := cp.GPUTask.GputaskV1().GPUTasks(ns).Create(ctx, task, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	framework.Poll(t, 2*time.Minute, "the task's pod Running on the real node", func(ctx context.Context) (bool, string) {
		pods, err := cp.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		if len(pods.Items) != 1 {
			return false, fmt.Sprintf("%d pods", len(pods.Items))
		}
		pod = &pods.Items[0]
		return pod.Status.Phase == corev1.PodRunning && pod.Spec.NodeName == nodeName,
			fmt.Sprintf("phase=%s node=%s", pod.Status.Phase, pod.Spec.NodeName)
	})
	var devices []string
	framework.Poll(t, time.Minute, "the container's devices in its log", func(ctx context.Context) (bool, string) {
		var err error
		devices, err = node.PodDevices(ctx, pod)
		return err == nil, fmt.Sprint(err)
	})
	if len(devices) != 2 || devices[0] == devices[1] {
		t.Fatalf("container got devices %q, want 2 distinct", devices)
	}
	framework.Poll(t, time.Minute, "the GPUTask Running", func(ctx context.Context) (bool, string) {
		got, err := cp.GPUTask.GputaskV1().GPUTasks(ns).Get(ctx, task.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == gputaskv1.GPUTaskRunning, string(got.Status.Phase)
	})
	t.Logf("pod %s got devices %v", pod.Name, devices)
}
