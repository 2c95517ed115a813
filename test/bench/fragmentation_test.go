package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

// The fragmentation benchmark's pool: 8 nodes of 8 GPUs, a churn of 200
// creations and deletions of 1- and 2-GPU tasks drawn with seed 1 that
// keeps at most fragLimit GPUs in use, then as many 8-GPU tasks as there
// are nodes.
const (
	fragNodes    = 8
	fragGPUs     = 8
	fragOps      = 200
	fragSeed     = 1
	fragLimit    = 32
	packProfile  = "gputask-pack"
	fragWaitStep = 20 * time.Millisecond
)

// churnOp creates the task Name asking for GPUs, or deletes it.
type churnOp struct {
	Create bool
	Name   string
	GPUs   int
}

// fragmentationChurn draws ops creations and deletions from seed: a new
// task of 1 or 2 GPUs while fewer than limit GPUs are in use and a coin
// says so, else the deletion of a live task picked at random.
func fragmentationChurn(seed uint64, ops, limit int) []churnOp {
	r := rand.New(rand.NewPCG(seed, seed))
	var out []churnOp
	var live []churnOp
	inUse := 0
	for i := range ops {
		gpus := 1 + r.IntN(2)
		if len(live) == 0 || (inUse+gpus <= limit && r.IntN(100) < 60) {
			op := churnOp{Create: true, Name: fmt.Sprintf("churn-%d", i), GPUs: gpus}
			live = append(live, op)
			inUse += gpus
			out = append(out, op)
			continue
		}
		j := r.IntN(len(live))
		victim := live[j]
		live = append(live[:j], live[j+1:]...)
		inUse -= victim.GPUs
		out = append(out, churnOp{Name: victim.Name, GPUs: victim.GPUs})
	}
	return out
}

// The churn is the same in every run, and never asks for more than the
// limit.
func TestFragmentationChurnIsSeeded(t *testing.T) {
	a, b := fragmentationChurn(fragSeed, fragOps, fragLimit), fragmentationChurn(fragSeed, fragOps, fragLimit)
	if fmt.Sprint(a) != fmt.Sprint(b) || len(a) != fragOps {
		t.Fatalf("two draws differ or have %d ops", len(a))
	}
	inUse, creates, peak := 0, 0, 0
	for _, op := range a {
		if op.Create {
			inUse += op.GPUs
			creates++
		} else {
			inUse -= op.GPUs
		}
		peak = max(peak, inUse)
	}
	if peak > fragLimit || creates == 0 || creates == fragOps {
		t.Errorf("peak %d GPUs in use (limit %d), %d creations of %d ops", peak, fragLimit, creates, fragOps)
	}
}

// fragResult is one pool after the churn.
type fragResult struct {
	// Empty counts the nodes with no GPU in use; Free the GPUs free.
	Empty, Free int
	// Fit counts the 8-GPU tasks that the scheduler placed afterwards.
	Fit int
}

// BenchmarkFragmentation plays the same seeded churn of 1- and 2-GPU tasks
// through the controller on two pools of 8 kwok nodes side by side, one
// scheduled by the default profile and one by the packing profile of
// artifacts/scheduler, then counts the empty nodes and how many 8-GPU
// tasks still run. The churn runs once; the loop only reports it.
func BenchmarkFragmentation(b *testing.B) {
	cp := controlPlane(b)
	ctx := context.Background()
	sched, err := cp.StartScheduler(ctx, filepath.Join(cp.Root, "artifacts", "scheduler", "gputask-pack.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	defer sched.Stop()
	ops := fragmentationChurn(fragSeed, fragOps, fragLimit)

	results := make([]fragResult, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, scheduler := range []string{"", packProfile} {
		wg.Go(func() { results[i], errs[i] = runFragmentation(ctx, cp, fmt.Sprintf("frag-%d", i), scheduler, ops) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
	}
	def, pack := results[0], results[1]
	b.ReportMetric(float64(def.Fit), "fit8-default")
	b.ReportMetric(float64(pack.Fit), "fit8-pack")
	b.ReportMetric(float64(def.Empty), "empty-nodes-default")
	b.ReportMetric(float64(pack.Empty), "empty-nodes-pack")
	fmt.Printf("fragmentation after %d ops (seed %d) on %d nodes of %d GPUs:\n", fragOps, fragSeed, fragNodes, fragGPUs)
	fmt.Printf("  profile  empty nodes  free GPUs  8-GPU tasks placed\n")
	fmt.Printf("  default  %11d  %9d  %18d\n", def.Empty, def.Free, def.Fit)
	fmt.Printf("  pack     %11d  %9d  %18d\n", pack.Empty, pack.Free, pack.Fit)
}

// runFragmentation plays ops in a namespace of its own on nodes of its own,
// with tasks whose pods name scheduler ("" for the default), one op at a
// time: each creation waits until the pod is bound, each deletion until
// the pod is gone, so every placement sees the one before.
func runFragmentation(ctx context.Context, cp *framework.ControlPlane, ns, scheduler string, ops []churnOp) (fragResult, error) {
	var res fragResult
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		return res, err
	}
	model := "gpu-" + ns
	var nodeNames []string
	for i := range fragNodes {
		name := fmt.Sprintf("%s-%d", ns, i)
		if _, err := cp.CreateGPUNode(ctx, name, model, fragGPUs); err != nil {
			return res, err
		}
		nodeNames = append(nodeNames, name)
	}
	tasks := cp.GPUTask.GputaskV1().GPUTasks(ns)
	for _, op := range ops {
		if !op.Create {
			if err := tasks.Delete(ctx, op.Name, metav1.DeleteOptions{}); err != nil {
				return res, fmt.Errorf("deleting %s/%s: %w", ns, op.Name, err)
			}
			if err := waitPod(ctx, cp, ns, op.Name, func(p *corev1.Pod) bool { return p == nil }); err != nil {
				return res, err
			}
			continue
		}
		if _, err := tasks.Create(ctx, fragTask(op.Name, model, scheduler, op.GPUs), metav1.CreateOptions{}); err != nil {
			return res, fmt.Errorf("creating %s/%s: %w", ns, op.Name, err)
		}
		if err := waitPod(ctx, cp, ns, op.Name, func(p *corev1.Pod) bool { return p != nil && p.Spec.NodeName != "" }); err != nil {
			return res, err
		}
	}

	inUse, err := gpusInUse(ctx, cp, ns)
	if err != nil {
		return res, err
	}
	for _, n := range nodeNames {
		res.Free += fragGPUs - inUse[n]
		if inUse[n] == 0 {
			res.Empty++
		}
	}
	for i := range fragNodes {
		if _, err := tasks.Create(ctx, fragTask(fmt.Sprintf("whole-%d", i), model, scheduler, fragGPUs), metav1.CreateOptions{}); err != nil {
			return res, err
		}
	}
	// Each 8-GPU pod ends bound or marked unschedulable by its scheduler.
	for i := range fragNodes {
		var bound bool
		err := waitPod(ctx, cp, ns, fmt.Sprintf("whole-%d", i), func(p *corev1.Pod) bool {
			if p == nil {
				return false
			}
			bound = p.Spec.NodeName != ""
			return bound || unschedulable(p)
		})
		if err != nil {
			return res, err
		}
		if bound {
			res.Fit++
		}
	}
	return res, nil
}

// fragTask asks for gpus GPUs with the CPU and memory that go with them on
// a fake node (64 CPUs and 512 GiB for 8 GPUs), so that the default
// scheduler's cpu and memory scores tell the nodes apart, as they do for
// real workers.
func fragTask(name, model, scheduler string, gpus int) *gputaskv1.GPUTask {
	amount := intstr.FromInt(gpus)
	cpu, memory := intstr.FromInt(8*gpus), intstr.FromString(fmt.Sprintf("%dGi", 64*gpus))
	task := &gputaskv1.GPUTask{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       gputaskv1.GPUTaskSpec{GPU: model, GPUAmount: &amount, CPU: &cpu, Memory: &memory},
	}
	if scheduler != "" {
		task.Spec.Template = &gputaskv1.PodTemplate{Spec: corev1.PodSpec{SchedulerName: scheduler}}
	}
	return task
}

// waitPod polls the pod of the task name (named like it; nil when it does
// not exist) until ok.
func waitPod(ctx context.Context, cp *framework.ControlPlane, ns, name string, ok func(*corev1.Pod) bool) error {
	err := wait.PollUntilContextTimeout(ctx, fragWaitStep, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pod, err := cp.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return ok(nil), nil
		case err != nil:
			return false, nil
		}
		return ok(pod), nil
	})
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", ns, name, err)
	}
	return nil
}

func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// gpusInUse sums the GPU requests of the namespace's bound pods by node.
func gpusInUse(ctx context.Context, cp *framework.ControlPlane, ns string) (map[string]int, error) {
	pods, err := cp.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Spec.Containers {
			q := c.Resources.Limits[framework.GPUResourceName]
			out[p.Spec.NodeName] += int(q.Value())
		}
	}
	return out, nil
}
