package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// packingScheduler is the profile name of artifacts/scheduler/gputask-pack.yaml.
const packingScheduler = "gputask-pack"

// withNodeShare asks for the CPU and memory that go with one GPU of a fake
// node (64 CPUs and 512 GiB for 8 GPUs), as inference workers do: without
// requests every node scores the same for the default scheduler, which then
// picks among them at random instead of spreading.
func withNodeShare(s *gputaskv1.GPUTaskSpec) {
	cpu, memory := intstr.FromString("8"), intstr.FromString("64Gi")
	s.CPU, s.Memory = &cpu, &memory
}

// TestPackingProfile runs a second kube-scheduler with the packing profile
// shipped in artifacts/scheduler beside the default one. Four one-GPU
// tasks that select it with their template's schedulerName share one of
// three empty 8-GPU nodes; four that do not are spread by the default
// scheduler, which weighs cpu and memory only, over all three.
func TestPackingProfile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, err := cp.StartScheduler(ctx, filepath.Join(cp.Root, "artifacts", "scheduler", "gputask-pack.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)

	for _, tc := range []struct {
		name          string
		schedulerName string
		nodes         func(n int) bool
		want          string
	}{
		{"pack", packingScheduler, func(n int) bool { return n == 1 }, "one node"},
		{"default", "", func(n int) bool { return n == 3 }, "all three nodes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := cp.NamespaceT(t)
			model := createGPUNodes(t, ns, 3, gpusPerNode)
			for i := range 4 {
				task := newTask(fmt.Sprintf("worker-%d", i), model, 1, withNodeShare, func(s *gputaskv1.GPUTaskSpec) {
					s.Template = &gputaskv1.PodTemplate{Spec: corev1.PodSpec{SchedulerName: tc.schedulerName}}
				})
				createTask(t, cp, ns, task)
			}
			used := map[string]int{}
			for i := range 4 {
				task := waitTask(t, cp, ns, fmt.Sprintf("worker-%d", i), "running", taskRunning)
				used[task.Status.NodeName]++
			}
			var nodes []string
			for n, c := range used {
				nodes = append(nodes, fmt.Sprintf("%s:%d", n, c))
			}
			sort.Strings(nodes)
			t.Logf("%s: 4 one-GPU tasks on %v", tc.name, nodes)
			if !tc.nodes(len(used)) {
				t.Errorf("4 one-GPU tasks on %v, want %s", nodes, tc.want)
			}
			if tc.schedulerName != "" {
				if pod := taskPod(t, cp, ns, "worker-0"); pod == nil || pod.Spec.SchedulerName != tc.schedulerName {
					t.Errorf("pod of worker-0 does not name scheduler %s", tc.schedulerName)
				}
			}
		})
	}
}
