package setplan

import (
	"fmt"
	"strings"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/podspec"
)

// This file holds the scale-in rule that frees whole nodes. A cloud bills a
// GPU pool by the node, and a node autoscaler (Karpenter, the cluster
// autoscaler) removes an empty node without disturbing any work, where
// freeing a partly full one means evicting the pods still on it. The
// ReplicaSet controller does the opposite: it deletes the pods
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

// nodeOrder is what the ranking knows of the nodes: the set's GPUs in use
// on each, and the creation of the youngest candidate on each.
type nodeOrder struct {
	use    NodeGPUs
	newest map[string]time.Time
}

func newNodeOrder(candidates []*gputaskv1.GPUTask, use NodeGPUs) nodeOrder {
	newest := make(map[string]time.Time, len(use))
	for _, t := range candidates {
		if n := t.Status.NodeName; n != "" && t.CreationTimestamp.After(newest[n]) {
			newest[n] = t.CreationTimestamp.Time
		}
	}
	return nodeOrder{use: use, newest: newest}
}

// emptierNode compares the nodes of two placed tasks: negative when a's
// node should be emptied first, positive when b's, 0 on the same node. The
// node with the fewest GPUs in use goes first. Between nodes with as many,
// the one with the younger youngest task goes first, so that tasks alone on
// nodes of equal use keep the younger-first order of the rules after this
// one; the node name breaks what is left. Every key is the node's, so all
// the tasks of one node come before any of the next one.
func (o nodeOrder) emptierNode(a, b *gputaskv1.GPUTask) int {
	na, nb := a.Status.NodeName, b.Status.NodeName
	if na == nb {
		return 0
	}
	if ua, ub := o.use[na], o.use[nb]; ua != ub {
		if ua < ub {
			return -1
		}
		return 1
	}
	if ta, tb := o.newest[na], o.newest[nb]; !ta.Equal(tb) {
		if ta.After(tb) {
			return -1
		}
		return 1
	}
	return strings.Compare(na, nb)
}

// ExplainNodes says which nodes the victims leave and how many of the
// set's GPUs each had in use, in the order the ranking took them (victims
// are in rank order), for the events that report a scale-in; empty when no
// victim was on a node.
func ExplainNodes(victims []*gputaskv1.GPUTask, use NodeGPUs) string {
	var parts []string
	seen := map[string]bool{}
	for _, t := range victims {
		if n := t.Status.NodeName; n != "" && !seen[n] {
			seen[n] = true
			parts = append(parts, fmt.Sprintf("%s (%d)", n, use[n]))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "fewest GPUs of the set in use first: " + strings.Join(parts, ", ")
}
