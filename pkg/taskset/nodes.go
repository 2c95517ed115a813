package taskset

import (
	"fmt"
	"sort"
	"strings"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/podspec"
)

// This file holds the scale-in rule that frees whole nodes. A cloud bills a
// GPU pool by the node, and a node autoscaler (Karpenter's WhenEmpty
// consolidation, the cluster autoscaler) removes a node only once it is
// empty. The ReplicaSet controller does the opposite: it deletes the pods
// that share a node with more pods of their set first, which keeps every
// node half full. Here the node with the fewest of the set's GPUs in use is
// emptied first, one node at a time, so that a scale-in leaves as few nodes
// occupied as it can without touching busier work.

// NodeGPUs is the GPUs each node has in use by a set's tasks, by node name.
type NodeGPUs map[string]int64

// GPUsInUse counts, for each node, the GPUs of the tasks bound to it that
// still hold them: every phase but Failed and Succeeded. It reads the tasks
// only (status.nodeName and spec.gpu-amount), as the set controller's task
// lister shows them, so it costs no read of pods or nodes. A gpu-amount the
// API would refuse counts as 1, the default.
func GPUsInUse(tasks []*gputaskv1.GPUTask) NodeGPUs {
	use := NodeGPUs{}
	for _, t := range tasks {
		if !isPlaced(t) || t.Status.Phase == gputaskv1.GPUTaskFailed || t.Status.Phase == gputaskv1.GPUTaskSucceeded {
			continue
		}
		gpus, err := podspec.GPUAmount(t.Spec.GPUAmount)
		if err != nil {
			gpus = 1
		}
		use[t.Status.NodeName] += gpus
	}
	return use
}

// emptierNode compares the nodes of two placed tasks: negative when a's
// node should be emptied first, positive when b's, 0 on the same node. The
// node with the fewest GPUs in use goes first, and the node name breaks a
// tie, so that all the tasks of one node come before any of the next one.
func (use NodeGPUs) emptierNode(a, b *gputaskv1.GPUTask) int {
	na, nb := a.Status.NodeName, b.Status.NodeName
	if na == nb {
		return 0
	}
	if ua, ub := use[na], use[nb]; ua != ub {
		if ua < ub {
			return -1
		}
		return 1
	}
	return strings.Compare(na, nb)
}

// ExplainNodes says which nodes the victims leave and how many of the
// set's GPUs each had in use, in rank order, for the events that report a
// scale-in; empty when no victim was on a node.
func ExplainNodes(victims []*gputaskv1.GPUTask, use NodeGPUs) string {
	var nodes []string
	seen := map[string]bool{}
	for _, t := range victims {
		if n := t.Status.NodeName; n != "" && !seen[n] {
			seen[n] = true
			nodes = append(nodes, n)
		}
	}
	if len(nodes) == 0 {
		return ""
	}
	sort.SliceStable(nodes, func(i, j int) bool {
		if use[nodes[i]] != use[nodes[j]] {
			return use[nodes[i]] < use[nodes[j]]
		}
		return nodes[i] < nodes[j]
	})
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		parts[i] = fmt.Sprintf("%s (%d)", n, use[n])
	}
	return "fewest GPUs of the set in use first: " + strings.Join(parts, ", ")
}
