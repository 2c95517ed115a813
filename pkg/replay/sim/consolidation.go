package sim

import (
	"fmt"
	"time"
)

// Consolidation is a Karpenter NodePool's
// spec.disruption.consolidationPolicy.
type Consolidation string

const (
	// ConsolidationWhenEmpty removes a node consolidateAfter after its
	// last pod left.
	ConsolidationWhenEmpty Consolidation = "when-empty"
	// ConsolidationWhenEmptyOrUnderutilized, Karpenter v1's default, also
	// removes a node whose pods fit on the other nodes: it evicts them,
	// and their controllers create them again elsewhere.
	ConsolidationWhenEmptyOrUnderutilized Consolidation = "when-empty-or-underutilized"
)

// ParseConsolidation reads --consolidation.
func ParseConsolidation(s string) (Consolidation, error) {
	switch Consolidation(s) {
	case ConsolidationWhenEmpty, ConsolidationWhenEmptyOrUnderutilized:
		return Consolidation(s), nil
	}
	return "", fmt.Errorf("unknown consolidation policy %q: want %s or %s", s, ConsolidationWhenEmpty, ConsolidationWhenEmptyOrUnderutilized)
}

// consolidation is the model's policy, Karpenter's default when unset.
func (m NodeModel) consolidation() Consolidation {
	if m.Consolidation == "" {
		return ConsolidationWhenEmptyOrUnderutilized
	}
	return m.Consolidation
}

const (
	// ConsolidationPoll is how often Karpenter's disruption controller
	// looks for a node to consolidate.
	ConsolidationPoll = 10 * time.Second
	// ConsolidationValidation is how long Karpenter waits after choosing
	// a node before it checks the choice again and disrupts it, so that a
	// node that just filled up is spared.
	ConsolidationValidation = 15 * time.Second
)

// DeploymentVictims is the order in which the Deployment rows' ReplicaSet
// deletes pods on scale-in.
type DeploymentVictims string

const (
	// DeploymentVictimsReplicaSet is the ReplicaSet controller's own
	// order (package baseline), which thins the fullest nodes first.
	DeploymentVictimsReplicaSet DeploymentVictims = "replicaset"
	// DeploymentVictimsNodeAware is the set controller's order without
	// its knowledge of busy workers (a Deployment has none): the node
	// with the fewest workers is emptied first. It lets the node-hours a
	// scale-in order saves be told apart from what the autoscaler saves.
	DeploymentVictimsNodeAware DeploymentVictims = "node-aware"
)

// ParseDeploymentVictims reads --deployment-victims.
func ParseDeploymentVictims(s string) (DeploymentVictims, error) {
	switch DeploymentVictims(s) {
	case DeploymentVictimsReplicaSet, DeploymentVictimsNodeAware:
		return DeploymentVictims(s), nil
	}
	return "", fmt.Errorf("unknown deployment victim order %q: want %s or %s", s, DeploymentVictimsReplicaSet, DeploymentVictimsNodeAware)
}

// SetDeploymentVictims sets the order in which a Deployment deletes the
// pool's workers (the Deployment rows of package baseline).
func (p *Pool) SetDeploymentVictims(v DeploymentVictims) { p.deploymentVictims = v }

// DeploymentVictims is the order in which a Deployment deletes the pool's
// workers.
func (p *Pool) DeploymentVictims() DeploymentVictims { return p.deploymentVictims }

// SetDoNotDisrupt says whether a busy worker's pod carries
// karpenter.sh/do-not-disrupt, as the GPUTask controller marks the pods of
// busy tasks: consolidation then leaves its node alone.
func (p *Pool) SetDoNotDisrupt(busy bool) { p.doNotDisrupt = busy }

// Evictions counts the workers that consolidation evicted.
func (p *Pool) Evictions() int { return p.evictions }

// consolidate is one poll of Karpenter's disruption controller under
// WhenEmptyOrUnderutilized (an empty node goes by nodes.expire under
// either policy). It disrupts one node at a time: the candidate is the
// node with the fewest workers (the least eviction cost) among those that
// are up, have had no worker placed or leaving for consolidateAfter, carry
// no do-not-disrupt pod, and whose workers fit on the GPUs free on the
// other nodes; after ConsolidationValidation it is checked again and
// disrupted. Its workers are evicted (Delete: SIGTERM and the grace
// period), and each that was not draining is created again at once, as
// the ReplicaSet or the GPUTask controller replaces an evicted pod; the
// node goes when its last worker has exited.
func (p *Pool) consolidate() {
	n := p.nodes
	if n == nil || n.model.consolidation() != ConsolidationWhenEmptyOrUnderutilized {
		return
	}
	n.expire(p.now)
	for _, node := range n.alive {
		if node.Disrupted {
			return // one disruption at a time
		}
	}
	best := p.consolidationCandidate()
	switch {
	case best == nil:
		p.candidate = nil
	case best != p.candidate:
		p.candidate, p.candidateAt = best, p.now
	case !p.candidateAt.Add(ConsolidationValidation).After(p.now):
		p.candidate = nil
		p.disrupt(best)
	}
}

// consolidationCandidate is the node consolidation would disrupt now, or
// nil.
func (p *Pool) consolidationCandidate() *Node {
	n := p.nodes
	movable := map[*Node]int{}
	blocked := map[*Node]bool{}
	for _, w := range p.workers {
		if w.Node == nil {
			continue
		}
		movable[w.Node]++
		if p.doNotDisrupt && w.Busy() {
			blocked[w.Node] = true
		}
	}
	free := 0
	for _, node := range n.alive {
		if !node.Up.After(p.now) {
			free += n.model.GPUsPerNode - node.InUse
		}
	}
	var best *Node
	for _, node := range n.alive {
		switch {
		case node.InUse == 0, node.Up.After(p.now), blocked[node],
			node.podEvent.Add(n.model.Grace).After(p.now),
			// Its workers must fit on the other nodes' free GPUs.
			movable[node] > free-(n.model.GPUsPerNode-node.InUse):
			continue
		}
		if best == nil || node.InUse < best.InUse {
			best = node
		}
	}
	return best
}

// disrupt taints node, evicts its workers and replaces those that were
// serving.
func (p *Pool) disrupt(node *Node) {
	node.Disrupted = true
	var evicted []*Worker
	for _, w := range p.workers {
		if w.Node == node {
			evicted = append(evicted, w)
		}
	}
	replace := 0
	for _, w := range evicted {
		p.evictions++
		if !w.Draining {
			replace++
		}
		p.Delete(w)
	}
	p.Add(replace)
	p.nodes.expire(p.now)
}
