//go:build realnode

// Package node runs the controller's tasks on a real node: containerd, runc
// and a kubelet on this machine, with the project's device plugin giving it
// fake GPUs. It needs root and changes the host (a bridge, a FORWARD rule,
// sysctls), all restored at the end. It is built only with the realnode
// tag (`go test -tags realnode ./test/node/`, as root). See docs/node.md.
package node

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

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

// setUpTimeout bounds the image build, the control plane, the node and the
// controller's installation; the build compiles the controller in a
// container.
const setUpTimeout = 15 * time.Minute

// timeoutMargin is how long before go test's -timeout the node is taken
// down: the teardown uninstalls the chart and stops the pods and the kubelet.
const timeoutMargin = 2 * time.Minute

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), setUpTimeout)
	defer cancel()
	root, err := framework.RepoRoot()
	if err != nil {
		logf("FAIL: %v", err)
		return 1
	}
	// The controller's image builds while the control plane and the node
	// come up.
	images := make(chan controllerImage, 1)
	go func() { images <- buildControllerImage(ctx, root, logf) }()
	image := func() controllerImage {
		img := <-images
		images <- img
		return img
	}
	defer func() {
		if err := image().close(); err != nil {
			logf("cleanup: %v", err)
		}
	}()

	started, err := framework.Start(ctx, framework.Options{
		Scheduler: true, ControllerManager: true, KubeletClient: true, Kwok: true, Logf: logf,
		// The chart's Deployment needs its controllers; a stopped kubelet
		// needs the node lifecycle and taint eviction controllers, with a
		// grace period of seconds, not the default 50 s, before the node
		// is NotReady. Node leases are renewed every 2 s (kubelet and kwok)
		// so that a live node never misses it.
		Controllers: append(slices.Clone(framework.DefaultControllers), "deployment-controller", "replicaset-controller",
			"node-lifecycle-controller", "taint-eviction-controller"),
		ExtraArgs: map[string][]string{
			framework.BinControllerManager: {"--node-monitor-grace-period=10s", "--node-monitor-period=1s"},
			framework.BinKwok:              {"--node-lease-duration-seconds=8"},
		},
	})
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
	stopNode := sync.OnceFunc(func() {
		if node == nil {
			return
		}
		uninstallController()
		_ = cp.GPUTask.GputaskV1().GPUTasks(metav1.NamespaceAll).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
		node.Stop(context.Background())
	})
	defer stopNode()
	if err := setUp(ctx); err != nil {
		logf("FAIL: %v", err)
		framework.CleanupNodeHost(logf)
		return 1
	}
	img := image()
	if img.err != nil {
		logf("FAIL: %v", img.err)
		return 1
	}
	if err := node.ImportImage(img.archive); err != nil {
		logf("FAIL: importing the controller's image: %v", err)
		return 1
	}
	if err := installController(ctx); err != nil {
		logf("FAIL: %v", err)
		return 1
	}
	// go test's -timeout ends the binary with a panic, which runs no
	// deferred call: the node is taken down shortly before, so that the
	// host gets its settings back on that path too.
	flag.Parse()
	if d := flag.Lookup("test.timeout").Value.(flag.Getter).Get().(time.Duration); d > timeoutMargin {
		alarm := time.AfterFunc(d-timeoutMargin, func() {
			logf("FAIL: the -timeout of %s is near; taking the node down", d)
			stopNode()
			framework.CleanupNodeHost(logf)
			os.Exit(1)
		})
		defer alarm.Stop()
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
	worker, err := framework.BuildGoImage(cp.Root, dir, framework.WorkerImage, "./test/node/worker")
	if err != nil {
		return err
	}
	if err := node.ImportImage(worker); err != nil {
		return fmt.Errorf("importing the worker's image: %w", err)
	}
	if err := createWitnessNode(ctx); err != nil {
		return err
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
	return nil
}

// witnessNode is a kwok node beside the real one, tainted so that nothing
// is placed on it. With the real node as the only node, the node lifecycle
// controller would read a stopped kubelet as a disruption of the whole
// cluster, and evict nothing; with one node of two NotReady it taints the
// node and evicts its pods.
const witnessNode = "witness-0"

func createWitnessNode(ctx context.Context) error {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        witnessNode,
			Labels:      map[string]string{"type": "kwok", corev1.LabelHostname: witnessNode},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "gputask.io/witness", Effect: corev1.TaintEffectNoSchedule}}},
	}
	if _, err := cp.Kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the witness node: %w", err)
	}
	_, err := cp.WaitNodeReady(ctx, witnessNode)
	return err
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
	pod := runTask(t, ns, newTask("two-gpus", 2))
	var devices []string
	framework.Poll(t, time.Minute, "the container's devices in its log", func(ctx context.Context) (bool, string) {
		var err error
		devices, err = node.PodDevices(ctx, pod)
		return err == nil, fmt.Sprint(err)
	})
	if len(devices) != 2 || devices[0] == devices[1] {
		t.Fatalf("container got devices %q, want 2 distinct", devices)
	}
	t.Logf("pod %s got devices %v", pod.Name, devices)
}

func intOrString(n int32) intstr.IntOrString { return intstr.FromInt32(n) }

func smallRequests() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("128Mi"),
	}}
}
