// Package integration tests the API, the GPUTask controller and the
// autoscaler in-process against a real control plane. That is
// kube-apiserver, kube-scheduler, kube-controller-manager (garbage
// collector) and kwok fake GPU nodes. One
// control plane serves the whole package; each test works in its own
// namespace.
package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/utils/clock"

	"github.com/gputask/gputask-controller/pkg/autoscaler"
	informers "github.com/gputask/gputask-controller/pkg/generated/informers/externalversions"
	"github.com/gputask/gputask-controller/pkg/lazycache"
	"github.com/gputask/gputask-controller/test/framework"
)

// The fake GPU nodes of the package: two nodes with 8 A100 each.
const (
	gpuModel    = "A100"
	gpusPerNode = 8
)

var nodeNames = []string{"a100-1", "a100-2"}

// cp is the package's control plane, set by TestMain.
var cp *framework.ControlPlane

func TestMain(m *testing.M) {
	framework.RunMain(m, framework.Options{Scheduler: true, ControllerManager: true, Kwok: true},
		func(ctx context.Context, started *framework.ControlPlane) error {
			cp = started
			for _, name := range nodeNames {
				if _, err := cp.CreateGPUNode(ctx, name, gpuModel, gpusPerNode); err != nil {
					return err
				}
			}
			return createPriorityClass(ctx, "high", 1000)
		})
}

func createPriorityClass(ctx context.Context, name string, value int32) error {
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
	if _, err := cp.Kube.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating PriorityClass %s: %w", name, err)
	}
	return nil
}

// controller is the package's gputask-controller.
var controller struct {
	sync.Mutex
	started bool
	proc    *framework.Process
	err     error
}

// needController starts the gputask-controller for the package, on the
// first test that needs it, so that the API tests run even while the
// controller does not build. It stops with the control plane, or when a
// test calls withoutController.
func needController(t *testing.T) {
	t.Helper()
	controller.Lock()
	defer controller.Unlock()
	if !controller.started {
		controller.proc, controller.err = cp.StartController(context.Background(), "--workers=4")
		controller.started = true
	}
	if controller.err != nil {
		t.Fatalf("starting gputask-controller: %v", controller.err)
	}
	if controller.proc.Exited() {
		t.Fatalf("gputask-controller is not running: %v; log %s:\n%s",
			controller.proc.ExitError(), controller.proc.LogPath, controller.proc.LogTail(30))
	}
}

// withoutController stops the package's gputask-controller if it runs, for a
// test that runs controllers of its own in-process: the controller acts on
// every namespace, and would act on the test's objects too. The next test
// that calls needController starts a new one. The package's tests do not run
// in parallel, so none loses its controller midway.
func withoutController(t *testing.T) {
	t.Helper()
	controller.Lock()
	defer controller.Unlock()
	if controller.proc != nil {
		controller.proc.Stop()
		controller.started, controller.proc, controller.err = false, nil, nil
	}
}

// eventually polls cond every 100ms until it returns true or the timeout ends.
func eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, cond)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// taskPods lists the pods of a task by the well-known task label.
func taskPods(ctx context.Context, ns, task string) ([]corev1.Pod, error) {
	list, err := cp.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "gputask.io/task=" + task})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// runAutoscaler runs the autoscaler, with 2 workers, on inf (a
// namespace's GPUTask informers, started here) and the cluster's Nodes
// until the test ends; it then stops it, says if Run failed, and shuts
// the informers down.
func runAutoscaler(ctx context.Context, t *testing.T, inf informers.SharedInformerFactory, opts autoscaler.Options) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	kinf := kubeinformers.NewSharedInformerFactory(cp.Kube, 0)
	c := autoscaler.NewController(ctx, cp.Kube, cp.GPUTask,
		inf.Gputask().V1().GPUTaskSets(), inf.Gputask().V1().GPUTasks(),
		kinf.Core().V1().Nodes(), lazycache.NewPods(cp.Kube, 0, clock.RealClock{}), opts)
	inf.Start(ctx.Done())
	kinf.Start(ctx.Done())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 2) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		inf.Shutdown()
		kinf.Shutdown()
	})
}
