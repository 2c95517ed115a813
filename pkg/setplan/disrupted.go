package setplan

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// This file holds what a set does when a node autoscaler takes a node away
// under its tasks. Karpenter taints a node karpenter.sh/disrupted:NoSchedule
// before it drains it, for every reason it has (consolidation, drift,
// expiry, a spot interruption, a deleted node), then evicts the pods. A busy
// worker's pod carries karpenter.sh/do-not-disrupt, so Karpenter does not
// choose its node for consolidation or drift; expiry, interruption and a
// manual delete take the node anyway, and Karpenter then deletes such a pod
// by the NodeClaim's terminationGracePeriod at the latest.
//
// The set does not wait for the eviction. A task on such a node no longer
// counts as serving, so the plan creates its replacement at once, and the
// task leaves as a scale-in victim does: a busy one is marked draining (its
// worker reads gputask.io/draining through the downward API and takes no new
// requests), an idle one, or one that is not running yet, is deleted. A
// drained task goes once idle or after drainTimeout, or when Karpenter's
// eviction takes its pod, whichever comes first; its pod gets its
// terminationGracePeriodSeconds in every case, and a worker that stopped
// taking requests at the mark has only its requests in flight to finish in
// it.
//
// The replacements are created above spec.replicas, as a Deployment's
// maxSurge creates pods above its count: the leaving tasks are gone within
// drainTimeout, and waiting for them first would leave the set short for a
// whole start-up. maxReplicas bounds spec.replicas, the serving tasks,
// not the ones leaving. A task on a leaving node is never taken back from
// draining by a scale-up, and never stays while a healthy task is chosen
// for scale-in, since it is never among the serving tasks scale-in chooses
// from. minTaskAge does not protect it: the node goes whatever its age.

// TaintDisrupted is the taint key Karpenter puts, with effect NoSchedule, on
// a node it is about to drain and remove.
const TaintDisrupted = "karpenter.sh/disrupted"

// DisruptedNodes names the nodes being taken away: a task placed on one of
// them is leaving.
type DisruptedNodes map[string]bool

// NodeDisrupted reports whether node is being taken away: it carries
// karpenter.sh/disrupted with effect NoSchedule, or it is being deleted. A
// deletion cannot be taken back, whoever asked for it (kubectl delete node,
// or Karpenter before its termination taint lands), so it counts as surely
// as the taint. The key with another effect is not what Karpenter sets,
// so someone else's taint counts for nothing. The cluster autoscaler's
// ToBeDeletedByClusterAutoscaler is not read: it evicts as soon as it
// taints, so there is no head start to take, and it never chooses a node
// whose pods say safe-to-evict "false".
func NodeDisrupted(node *corev1.Node) bool {
	if node == nil {
		return false
	}
	if node.DeletionTimestamp != nil {
		return true
	}
	for _, t := range node.Spec.Taints {
		if t.Key == TaintDisrupted && t.Effect == corev1.TaintEffectNoSchedule {
			return true
		}
	}
	return false
}

// Disruption is what one plan does about the serving tasks on disrupted
// nodes. Tasks there that were draining already are left to the drain rules.
type Disruption struct {
	// Drain are the busy ones, to mark draining now.
	Drain []*gputaskv1.GPUTask
	// Delete are the others, to delete now: idle, not running yet, or
	// busy with a drainTimeout of 0.
	Delete []*gputaskv1.GPUTask
}

// Nodes names the disrupted nodes of the tasks the disruption drains or
// deletes, sorted, for the event that reports them.
func (d Disruption) Nodes() []string {
	seen := map[string]bool{}
	var nodes []string
	for _, t := range append(slices.Clip(d.Drain), d.Delete...) {
		if n := t.Status.NodeName; !seen[n] {
			seen[n] = true
			nodes = append(nodes, n)
		}
	}
	slices.Sort(nodes)
	return nodes
}

// isLeaving reports whether t is placed on a disrupted node.
func (d DisruptedNodes) isLeaving(t *gputaskv1.GPUTask) bool {
	return len(d) > 0 && isPlaced(t) && d[t.Status.NodeName]
}

// staying is tasks without the ones on disrupted nodes.
func (d DisruptedNodes) staying(tasks []*gputaskv1.GPUTask) []*gputaskv1.GPUTask {
	if len(d) == 0 {
		return tasks
	}
	out := make([]*gputaskv1.GPUTask, 0, len(tasks))
	for _, t := range tasks {
		if !d.isLeaving(t) {
			out = append(out, t)
		}
	}
	return out
}

// leave takes up to burst of the serving tasks on disrupted nodes out of
// service: a busy one drains while drainTimeout allows, any other goes at
// once. The rest wait for the next plan; they are not serving meanwhile.
func leave(leaving []*gputaskv1.GPUTask, busy BusyFunc, drainTimeout time.Duration, burst int) Disruption {
	var d Disruption
	for _, t := range leaving[:min(len(leaving), max(burst, 0))] {
		if drainTimeout > 0 && busy(t) {
			d.Drain = append(d.Drain, t)
		} else {
			d.Delete = append(d.Delete, t)
		}
	}
	return d
}
