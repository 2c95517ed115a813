package baseline

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// inUse is the GPUs in use on each of the pool's nodes.
func inUse(p *sim.Pool) []int {
	var out []int
	for _, n := range p.Nodes() {
		out = append(out, n.InUse)
	}
	return out
}

// The Deployment's scale-in takes the ReplicaSet's order, which thins the
// fullest node, or the set's node-aware order, which empties the node
// with the fewest workers.
func TestDeploymentVictims(t *testing.T) {
	for _, tc := range []struct {
		victims sim.DeploymentVictims
		want    []int
	}{
		{sim.DeploymentVictimsReplicaSet, []int{2, 1}},
		{"", []int{2, 1}},
		{sim.DeploymentVictimsNodeAware, []int{3}},
	} {
		p := sim.NewPool(workload.Trace{}, t0, 1, 2*time.Minute)
		if err := p.SetNodes(sim.NodeModel{GPUsPerNode: 4, Placement: sim.PlacementSpread, Startup: 3 * time.Minute, Grace: 0}); err != nil {
			t.Fatal(err)
		}
		p.SetDeploymentVictims(tc.victims)
		ws := p.AddReady(5)
		p.Remove(ws[3]) // [3 1]
		scaleDeployment(p, 3)
		if got := inUse(p); !slices.Equal(got, tc.want) {
			t.Errorf("%q: nodes = %v, want %v", tc.victims, got, tc.want)
		}
	}
}

// controller_utils.go, ActivePodsWithRanks.Less with the ranks of
// getPodsRankedByRelatedPodsOnSameNode: unbound before bound, not Ready
// before Ready, more pods of the set on the node first, then the more
// recently Ready, then the newer.
func TestReplicaSetVictimsByNode(t *testing.T) {
	now := t0.Add(10 * time.Hour)
	up := &sim.Node{Name: "full", Created: t0, Up: t0}
	other := &sim.Node{Name: "half", Created: t0, Up: t0}
	launching := &sim.Node{Name: "new", Created: now.Add(-time.Minute), Up: now.Add(2 * time.Minute)}
	w := func(name string, n *sim.Node, created, ready time.Duration) *sim.Worker {
		return &sim.Worker{Name: name, Node: n, Created: t0.Add(created), ReadyAt: t0.Add(ready)}
	}
	workers := []*sim.Worker{
		w("half-old", other, 0, 0),
		w("full-old", up, 0, 0),
		w("full-mid", up, time.Hour, time.Hour),
		w("unbound", launching, 10*time.Hour-time.Minute, 10*time.Hour+4*time.Minute),
		w("full-starting", up, 10*time.Hour-time.Minute, 10*time.Hour+time.Minute),
		w("half-young", other, 9*time.Hour+50*time.Minute, 9*time.Hour+52*time.Minute),
		w("full-young", up, 9*time.Hour+50*time.Minute, 9*time.Hour+52*time.Minute),
	}
	got := names(replicaSetVictims(workers, now))
	// "full" has 4 pods of the set, "half" 2: the ReplicaSet thins "full"
	// before it touches the younger pod on "half".
	want := []string{"unbound", "full-starting", "full-young", "full-mid", "full-old", "half-young", "half-old"}
	if !slices.Equal(got, want) {
		t.Errorf("order = %v, want %v", got, want)
	}
}

func names(ws []*sim.Worker) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.Name
	}
	return out
}

// The oracle's levels packed on nodes: levels 1–2 on node 1, level 3 on
// node 2; a node is launched its start-up ahead and goes its grace after.
func TestOracleNodeHours(t *testing.T) {
	tr := workload.Trace{Requests: []workload.Served{
		{Arrival: 0, Service: time.Hour},
		{Arrival: 0, Service: time.Hour},
		{Arrival: 30 * time.Minute, Service: 10 * time.Minute},
	}}
	m := sim.NodeModel{GPUsPerNode: 2, Placement: sim.PlacementPack, Startup: 3 * time.Minute, Grace: time.Minute}
	res := Oracle{Concurrency: 1, Startup: 2 * time.Minute, Nodes: &m}.Run(tr, time.Minute)
	// node 1: 0–1h (the end); node 2: launched at 30m − 2m − 3m = 25m,
	// gone at 40m + 1m.
	want := (time.Hour + 16*time.Minute).Hours()
	if math.Abs(res.NodeHours-want) > 1e-9 || res.PeakNodes != 2 {
		t.Errorf("node-hours %v peak %d, want %v and 2", res.NodeHours, res.PeakNodes, want)
	}
}
