package sim

import (
	"encoding/json"
	"fmt"
	"time"
)

// Placement is how the scheduler picks a node for a new worker.
type Placement string

const (
	// PlacementSpread is the default scheduler's scoring: NodeResourcesFit
	// LeastAllocated over cpu and memory, which never looks at GPUs, so a
	// new worker goes to the node with the fewest workers.
	PlacementSpread Placement = "spread"
	// PlacementPack is the packing profile (artifacts/scheduler):
	// MostAllocated weighted on the GPU resource, so a new worker goes to
	// the node with the most GPUs in use that still has one free.
	PlacementPack Placement = "pack"
)

// ParsePlacement reads --placement.
func ParsePlacement(s string) (Placement, error) {
	switch Placement(s) {
	case PlacementSpread, PlacementPack:
		return Placement(s), nil
	}
	return "", fmt.Errorf("unknown placement %q: want spread or pack", s)
}

// NodeModel is the nodes the workers run on, as a node autoscaler
// (Karpenter) keeps them: a node is launched when a worker fits on no
// node; it is removed Grace after its last worker left, and under
// WhenEmptyOrUnderutilized also when the workers on it fit on the other
// nodes (see consolidation.go).
type NodeModel struct {
	// GPUsPerNode is the GPUs of one node; each worker takes one.
	GPUsPerNode int
	Placement   Placement
	// Startup is how long a launched node takes before the workers placed
	// on it start their own start-up.
	Startup time.Duration
	// Grace is Karpenter's consolidateAfter: how long a node stays up
	// empty, and how long a node must go without a pod placed on it or
	// leaving it before it is consolidated as underutilized.
	Grace time.Duration
	// Consolidation is the NodePool's consolidationPolicy; empty means
	// ConsolidationWhenEmptyOrUnderutilized, Karpenter's default.
	Consolidation Consolidation
}

// MarshalJSON writes the model as the report's other settings are
// written: durations as Go strings.
func (m NodeModel) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		GPUsPerNode   int           `json:"gpus_per_node"`
		Placement     Placement     `json:"placement"`
		Startup       string        `json:"node_startup"`
		Grace         string        `json:"node_grace"`
		Consolidation Consolidation `json:"consolidation"`
	}{m.GPUsPerNode, m.Placement, m.Startup.String(), m.Grace.String(), m.consolidation()})
}

// DefaultNodeModel is the command line's: 8-GPU nodes, the default
// scheduler, 3 minutes to launch a node, 30 s of consolidateAfter and
// Karpenter's default consolidation policy.
var DefaultNodeModel = NodeModel{GPUsPerNode: 8, Placement: PlacementSpread, Startup: 3 * time.Minute, Grace: 30 * time.Second, Consolidation: ConsolidationWhenEmptyOrUnderutilized}

// Validate reports a model that cannot place a worker.
func (m NodeModel) Validate() error {
	if m.GPUsPerNode < 1 {
		return fmt.Errorf("GPUs per node must be at least 1, got %d", m.GPUsPerNode)
	}
	if _, err := ParsePlacement(string(m.Placement)); err != nil {
		return err
	}
	if m.Startup < 0 || m.Grace < 0 {
		return fmt.Errorf("node start-up %v and grace %v: want both >= 0", m.Startup, m.Grace)
	}
	if m.Consolidation != "" {
		if _, err := ParseConsolidation(string(m.Consolidation)); err != nil {
			return err
		}
	}
	return nil
}

// Node is one modelled node.
type Node struct {
	Name string
	// Created is when the node autoscaler launched it; Up when workers on
	// it may start.
	Created, Up time.Time
	// InUse is its GPUs in use: one for each worker placed on it that has
	// not exited.
	InUse int
	// emptySince is when its last worker left; zero while one is on it.
	emptySince time.Time
	// podEvent is when a worker was last placed on it or left it: a node
	// is consolidated as underutilized only consolidateAfter past it.
	podEvent time.Time
	// Disrupted is set when consolidation chose the node: it carries
	// Karpenter's karpenter.sh/disrupted:NoSchedule taint, takes no new
	// worker, and is removed once its last worker exits.
	Disrupted bool
	// removed is when consolidation removed it; zero while it lives.
	removed time.Time
}

// nodes places workers on nodes and keeps each node's life.
type nodes struct {
	model NodeModel
	all   []*Node
	alive []*Node // in launch order
	peak  int
}

func newNodes(m NodeModel) *nodes { return &nodes{model: m} }

// expire removes the nodes that have stayed empty for the grace by now.
func (n *nodes) expire(now time.Time) {
	kept := n.alive[:0]
	for _, node := range n.alive {
		if node.InUse == 0 && node.Disrupted {
			// Drained by consolidation: Karpenter deletes it at once.
			node.removed = node.emptySince
			continue
		}
		if node.InUse == 0 && !node.emptySince.Add(n.model.Grace).After(now) {
			node.removed = node.emptySince.Add(n.model.Grace)
			continue
		}
		kept = append(kept, node)
	}
	n.alive = kept
}

// place puts a worker created at now on a node and returns it. The nodes
// that are up are scored first, as the scheduler binds only to them; a
// worker that fits on none waits for a node that is still launching, the
// oldest with a free GPU, as the node autoscaler launches nodes for the
// pending pods and fills them; failing that a node is launched, up at
// once when up is set (the pool a policy starts with).
func (n *nodes) place(now time.Time, up bool) *Node {
	n.expire(now)
	var best *Node
	for _, node := range n.alive {
		if node.InUse >= n.model.GPUsPerNode || node.Up.After(now) || node.Disrupted {
			continue
		}
		if best == nil || n.better(node, best) {
			best = node
		}
	}
	if best == nil {
		for _, node := range n.alive {
			if node.InUse < n.model.GPUsPerNode && !node.Disrupted {
				best = node
				break
			}
		}
	}
	if best == nil {
		best = &Node{Name: fmt.Sprintf("node-%d", len(n.all)+1), Created: now, Up: now}
		if !up {
			best.Up = now.Add(n.model.Startup)
		}
		n.all = append(n.all, best)
		n.alive = append(n.alive, best)
		n.peak = max(n.peak, len(n.alive))
	}
	best.InUse++
	best.emptySince, best.podEvent = time.Time{}, now
	return best
}

// better reports whether the scheduler scores node a above node b; on a
// tie the node launched first wins, so that a run is repeatable.
func (n *nodes) better(a, b *Node) bool {
	if n.model.Placement == PlacementPack {
		return a.InUse > b.InUse
	}
	return a.InUse < b.InUse
}

// leave frees the GPU of a worker that exited at now.
func (n *nodes) leave(node *Node, now time.Time) {
	node.InUse--
	node.podEvent = now
	if node.InUse == 0 {
		node.emptySince = now
	}
	n.expire(now)
}

// hours is the time every node lived, from its launch to its removal, or
// until until for the ones still up (an empty one no longer than its
// grace).
func (n *nodes) hours(until time.Time) float64 {
	var total time.Duration
	for _, node := range n.all {
		end := node.removed
		if end.IsZero() {
			end = until
			if node.InUse == 0 {
				gone := node.emptySince.Add(n.model.Grace)
				if node.Disrupted {
					gone = node.emptySince
				}
				if gone.Before(end) {
					end = gone
				}
			}
		}
		total += max(end.Sub(node.Created), 0)
	}
	return total.Hours()
}

// SetNodes places the pool's workers on nodes of the model. Call it
// before the first worker is added.
func (p *Pool) SetNodes(m NodeModel) error {
	if err := m.Validate(); err != nil {
		return err
	}
	if len(p.all) > 0 {
		return fmt.Errorf("the pool already has workers: set its nodes first")
	}
	p.nodes = newNodes(m)
	p.nextConsolidation = p.now.Add(ConsolidationPoll)
	return nil
}

// NodeHours is the time every node lived, launch to removal, until until
// for the live ones; 0 when the pool models no nodes.
func (p *Pool) NodeHours(until time.Time) float64 {
	if p.nodes == nil {
		return 0
	}
	return p.nodes.hours(until)
}

// PeakNodes is the most nodes up or launching at once; 0 when the pool
// models no nodes.
func (p *Pool) PeakNodes() int {
	if p.nodes == nil {
		return 0
	}
	return p.nodes.peak
}

// Nodes are the nodes up or launching at the pool's time, in launch order;
// nil when the pool models none.
func (p *Pool) Nodes() []*Node {
	if p.nodes == nil {
		return nil
	}
	p.nodes.expire(p.now)
	return append([]*Node(nil), p.nodes.alive...)
}

// Bound reports whether the worker's pod is bound to a node at now: always
// when the pool models no nodes, else once its node is up.
func (w *Worker) Bound(now time.Time) bool { return w.Node == nil || !w.Node.Up.After(now) }

// NodeName is the node its pod runs on at now: "" while its node
// launches, and a node of its own when the pool models none.
func (w *Worker) NodeName(now time.Time) string {
	switch {
	case w.Node == nil:
		return "node-" + w.Name
	case !w.Bound(now):
		return ""
	}
	return w.Node.Name
}
