// Package bench measures the controller end to end on the real local control
// plane: how fast GPUTasks become Running pods on fake GPU nodes, and how fast
// a GPUTaskSet grows. It starts a control plane only when a benchmark runs:
//
//	go test -run '^$' -bench . -benchtime 3x ./test/bench/
package bench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

const (
	gpuModel  = "A100"
	nodes     = 4
	gpusEach  = 8
	batchSize = 24 // fits the 32 GPUs, so every task can run
)

var (
	cpOnce  sync.Once
	cp      *framework.ControlPlane
	cpError error
)

// controlPlane starts the cluster and the controller on first use.
func controlPlane(b *testing.B) *framework.ControlPlane {
	b.Helper()
	cpOnce.Do(func() {
		ctx := context.Background()
		cp, cpError = framework.Start(ctx, framework.Options{Scheduler: true, ControllerManager: true, Kwok: true})
		if cpError != nil {
			return
		}
		for i := range nodes {
			if _, cpError = cp.CreateGPUNode(ctx, fmt.Sprintf("a100-%d", i), gpuModel, gpusEach); cpError != nil {
				return
			}
		}
		_, cpError = cp.StartController(ctx, "--workers=4", "--kube-api-qps=200", "--kube-api-burst=400")
	})
	if cpError != nil {
		b.Fatalf("starting the control plane: %v", cpError)
	}
	return cp
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cp != nil {
		if kept := cp.Cleanup(code != 0); kept != "" {
			fmt.Fprintf(os.Stderr, "control plane logs kept in %s\n", kept)
		}
	}
	os.Exit(code)
}

// BenchmarkTasksToRunning creates a batch of one-GPU GPUTasks and waits until
// every one has a Running pod: controller, scheduler and kwok together.
func BenchmarkTasksToRunning(b *testing.B) {
	cp := controlPlane(b)
	ctx := context.Background()
	amount := intstr.FromInt32(1)
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		ns := fmt.Sprintf("bench-tasks-%d", i)
		if err := cp.CreateNamespace(ctx, ns); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for j := range batchSize {
			_, err := cp.GPUTask.GputaskV1().GPUTasks(ns).Create(ctx, &gputaskv1.GPUTask{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("task-%d", j)},
				Spec:       gputaskv1.GPUTaskSpec{GPU: gpuModel, GPUAmount: &amount},
			}, metav1.CreateOptions{})
			if err != nil {
				b.Fatal(err)
			}
		}
		waitRunning(b, ns, nil, batchSize)
		b.StopTimer()
		cleanup(b, ns)
		b.StartTimer()
	}
	b.ReportMetric(float64(batchSize), "tasks/op")
}

// BenchmarkTaskSetScaleUp scales a GPUTaskSet from 0 to a full batch and waits
// until every task runs: set controller, task controller, scheduler, kwok.
func BenchmarkTaskSetScaleUp(b *testing.B) {
	cp := controlPlane(b)
	ctx := context.Background()
	amount := intstr.FromInt32(1)
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		ns := fmt.Sprintf("bench-set-%d", i)
		if err := cp.CreateNamespace(ctx, ns); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		_, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Create(ctx, &gputaskv1.GPUTaskSet{
			ObjectMeta: metav1.ObjectMeta{Name: "pool"},
			Spec: gputaskv1.GPUTaskSetSpec{
				Replicas: ptr.To[int32](batchSize),
				Template: gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{GPU: gpuModel, GPUAmount: &amount}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		waitRunning(b, ns, labels.SelectorFromSet(labels.Set{gputaskv1.LabelTaskSet: "pool"}), batchSize)
		b.StopTimer()
		cleanup(b, ns)
		b.StartTimer()
	}
	b.ReportMetric(float64(batchSize), "tasks/op")
}

// waitRunning polls until want tasks in ns (matching selector, if any) are Running.
func waitRunning(b *testing.B, ns string, selector labels.Selector, want int) {
	b.Helper()
	opts := metav1.ListOptions{}
	if selector != nil {
		opts.LabelSelector = selector.String()
	}
	var running int
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := cp.GPUTask.GputaskV1().GPUTasks(ns).List(ctx, opts)
		if err != nil {
			return false, nil
		}
		running = 0
		for _, t := range list.Items {
			if t.Status.Phase == gputaskv1.GPUTaskRunning {
				running++
			}
		}
		return running == want, nil
	})
	if err != nil {
		b.Fatalf("%d of %d tasks Running in %s: %v", running, want, ns, err)
	}
}

// cleanup deletes the namespace's tasks and waits for their pods to go, so the
// next iteration finds every GPU free.
func cleanup(b *testing.B, ns string) {
	b.Helper()
	ctx := context.Background()
	if err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		b.Fatal(err)
	}
	if err := cp.GPUTask.GputaskV1().GPUTasks(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		b.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cp.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, nil
	})
	if err != nil {
		b.Fatalf("pods of %s not gone: %v", ns, err)
	}
}
