package e2e

import (
	"context"
	"fmt"
	"sort"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

// TestScaleInEmptiesNodes: a set of 16 one-GPU tasks, spread by the default
// scheduler over four 8-GPU nodes, scaled in to 4 keeps its tasks on one
// node, so the other three are empty for a node autoscaler; the
// SuccessfulDelete event names the three nodes it emptied. The
// ReplicaSet's ranking (the most pods of the set on a node first) would
// keep one task on each node.
func TestScaleInEmptiesNodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := cp.NamespaceT(t)
	model := createGPUNodes(t, ns, 4, gpusPerNode)
	one := intstr.FromInt32(1)
	set := &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: poolName},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To[int32](16),
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{GPU: model, GPUAmount: &one}},
		},
	}
	withNodeShare(&set.Spec.Template.Spec)
	if _, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := waitNodesOfRunningTasks(t, ns, 16)
	t.Logf("16 tasks on %v", before)

	patch := []byte(`{"spec":{"replicas":4}}`)
	if _, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Patch(ctx, poolName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitExact(t, cp, ns, 4)
	after := waitNodesOfRunningTasks(t, ns, 4)
	t.Logf("4 tasks on %v", after)
	if len(after) != 1 {
		t.Errorf("4 tasks left on %d nodes (%v), want 1: scale-in should empty whole nodes", len(after), after)
	}
	waitEvents(t, ns, gputaskv1.ReasonSuccessfulDelete, "Normal", "Deleted 12 tasks; fewest GPUs of the set in use first: ")
}

// waitNodesOfRunningTasks waits until ns holds n Running tasks, each on a
// node, and returns how many are on each node.
func waitNodesOfRunningTasks(t *testing.T, ns string, n int) map[string]int {
	t.Helper()
	var onNode map[string]int
	framework.Poll(t, waitTimeout, fmt.Sprintf("%d Running tasks on nodes", n), func(ctx context.Context) (bool, string) {
		list, err := cp.GPUTask.GputaskV1().GPUTasks(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		onNode = map[string]int{}
		running := 0
		for _, task := range list.Items {
			if task.DeletionTimestamp == nil && task.Status.Phase == gputaskv1.GPUTaskRunning && task.Status.NodeName != "" {
				running++
				onNode[task.Status.NodeName]++
			}
		}
		var nodes []string
		for node, c := range onNode {
			nodes = append(nodes, fmt.Sprintf("%s:%d", node, c))
		}
		sort.Strings(nodes)
		return running == n && len(list.Items) == n, fmt.Sprintf("%d Running of %d tasks on %v", running, len(list.Items), nodes)
	})
	return onNode
}
