package sim

import (
	"math"
	"slices"
	"testing"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// inUse is each live node's GPUs in use, in launch order.
func inUse(p *Pool) []int {
	var out []int
	for _, n := range p.Nodes() {
		out = append(out, n.InUse)
	}
	return out
}

// A node is launched only when a worker fits on no node; spread then puts
// a new worker on the node with the fewest workers, pack on the one with
// the most GPUs in use that still has one free.
func TestPlacement(t *testing.T) {
	tests := []struct {
		placement Placement
		// The pool starts with 10 workers on 4-GPU nodes, [4 4 2]; the
		// first five leave, [0 3 2], and 3 are added.
		want []int
	}{
		// The emptiest node each time, the first launched on a tie: the
		// empty node takes three, and keeps three nodes half full.
		{PlacementSpread, []int{3, 3, 2}},
		// The fullest node with a free GPU: the empty node stays empty and
		// goes at its grace's end.
		{PlacementPack, []int{0, 4, 4}},
	}
	for _, tc := range tests {
		t.Run(string(tc.placement), func(t *testing.T) {
			p := NewPool(workload.Trace{}, t0, 1, time.Minute)
			if err := p.SetNodes(NodeModel{GPUsPerNode: 4, Placement: tc.placement, Startup: 3 * time.Minute, Grace: time.Minute}); err != nil {
				t.Fatal(err)
			}
			ws := p.AddReady(10)
			if got := inUse(p); !slices.Equal(got, []int{4, 4, 2}) {
				t.Fatalf("after 10 workers: %v, want [4 4 2]", got)
			}
			for _, w := range ws[:5] {
				p.Remove(w)
			}
			if got := inUse(p); !slices.Equal(got, []int{0, 3, 2}) {
				t.Fatalf("after 5 removals: %v, want [0 3 2]", got)
			}
			added := p.Add(3)
			if got := inUse(p); !slices.Equal(got, tc.want) {
				t.Errorf("nodes = %v, want %v", got, tc.want)
			}
			for _, w := range added {
				if !w.Ready(t0.Add(time.Minute)) {
					t.Errorf("%s on an up node: Ready at %v, want after its own start-up only", w.Name, w.ReadyAt)
				}
			}
			if p.PeakNodes() != 3 {
				t.Errorf("peak nodes = %d, want 3", p.PeakNodes())
			}
		})
	}
}

// With the fullest nodes full, pack places on the empty node rather than
// launch one: a node that is up costs nothing more.
func TestPackFillsBeforeLaunching(t *testing.T) {
	p := NewPool(workload.Trace{}, t0, 1, time.Minute)
	if err := p.SetNodes(NodeModel{GPUsPerNode: 2, Placement: PlacementPack, Startup: time.Minute, Grace: time.Minute}); err != nil {
		t.Fatal(err)
	}
	ws := p.AddReady(3) // [2 1]
	p.Remove(ws[2])     // [2 0]
	p.Remove(ws[0])     // [1 0]
	p.Add(2)            // 1 → 2, then the empty node
	if got := inUse(p); !slices.Equal(got, []int{2, 1}) {
		t.Errorf("nodes = %v, want [2 1]", got)
	}
	if p.PeakNodes() != 2 {
		t.Errorf("peak nodes = %d, want 2", p.PeakNodes())
	}
}

// A launched node takes its start-up before a worker on it starts its
// own; the workers that fit on no up node wait for the node launched for
// them; a node goes its grace after its last worker left, unless a worker
// comes back within it; node-hours count launch to removal.
func TestNodeLifetime(t *testing.T) {
	tr := workload.Trace{}
	p := NewPool(tr, t0, 1, 2*time.Minute)
	if err := p.SetNodes(NodeModel{GPUsPerNode: 2, Placement: PlacementSpread, Startup: 3 * time.Minute, Grace: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	first := p.AddReady(1)[0] // node-1, up at once
	if !first.Ready(t0) || first.NodeName(t0) != "node-1" {
		t.Fatalf("first worker: ready %v on %q", first.ReadyAt, first.NodeName(t0))
	}
	ws := p.Add(3) // one on node-1, two on a launched node-2
	if ws[0].Node.Name != "node-1" || !ws[0].ReadyAt.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("%s: on %s, Ready at %v; want node-1 at 2m", ws[0].Name, ws[0].Node.Name, ws[0].ReadyAt.Sub(t0))
	}
	for _, w := range ws[1:] {
		if w.Node.Name != "node-2" || !w.ReadyAt.Equal(t0.Add(5*time.Minute)) {
			t.Errorf("%s: on %s, Ready at %v; want node-2 at 3m + 2m", w.Name, w.Node.Name, w.ReadyAt.Sub(t0))
		}
		if w.Bound(t0.Add(2*time.Minute)) || w.NodeName(t0.Add(2*time.Minute)) != "" {
			t.Errorf("%s bound to a node that is not up", w.Name)
		}
		if task := TaskOf(w, t0.Add(2*time.Minute)); task.Status.Phase != gputaskv1.GPUTaskPending || task.Status.NodeName != "" {
			t.Errorf("%s while its node launches: phase %s on %q, want Pending on none", w.Name, task.Status.Phase, task.Status.NodeName)
		}
		if task := TaskOf(w, t0.Add(4*time.Minute)); task.Status.Phase != gputaskv1.GPUTaskRunning || task.Status.NodeName != "node-2" {
			t.Errorf("%s once its node is up: phase %s on %q, want Running on node-2", w.Name, task.Status.Phase, task.Status.NodeName)
		}
	}
	if p.PeakNodes() != 2 {
		t.Errorf("peak nodes = %d, want 2", p.PeakNodes())
	}

	// node-2 empties at 10m; a worker comes back at 10m20s, within the
	// grace, and goes at 20m: node-2 lives until 20m30s.
	p.Advance(t0.Add(10 * time.Minute))
	p.Remove(ws[1])
	p.Remove(ws[2])
	p.Advance(t0.Add(10*time.Minute + 20*time.Second))
	back := p.Add(1)[0]
	if back.Node.Name != "node-2" {
		t.Fatalf("the worker that came back is on %s, want the empty node-2 within its grace", back.Node.Name)
	}
	p.Advance(t0.Add(20 * time.Minute))
	p.Remove(back)
	p.Advance(t0.Add(21 * time.Minute))
	if got := len(p.Nodes()); got != 1 {
		t.Errorf("live nodes at 21m = %d, want 1: node-2 went 30s after its last worker", got)
	}
	// node-1 is full: a worker now launches node-3, not node-2 again.
	if again := p.Add(1)[0]; again.Node.Name != "node-3" {
		t.Errorf("new worker on %s, want node-3", again.Node.Name)
	}
	// node-1: 0–30m; node-2: 0–20m30s; node-3: 21m–30m.
	want := (30*time.Minute + 20*time.Minute + 30*time.Second + 9*time.Minute).Hours()
	if got := p.NodeHours(t0.Add(30 * time.Minute)); math.Abs(got-want) > 1e-9 {
		t.Errorf("node-hours = %v, want %v", got, want)
	}
	// An empty node at the end counts only its grace.
	p.Advance(t0.Add(30 * time.Minute))
	for _, w := range append([]*Worker(nil), p.Workers()...) {
		p.Remove(w)
	}
	want = (30*time.Minute + 30*time.Second + 20*time.Minute + 30*time.Second + 9*time.Minute + 30*time.Second).Hours()
	if got := p.NodeHours(t0.Add(time.Hour)); math.Abs(got-want) > 1e-9 {
		t.Errorf("node-hours with every node empty = %v, want %v", got, want)
	}
}

func TestNodeModelValidate(t *testing.T) {
	for _, m := range []NodeModel{
		{GPUsPerNode: 0, Placement: PlacementPack},
		{GPUsPerNode: 8, Placement: "bestfit"},
		{GPUsPerNode: 8, Placement: PlacementPack, Startup: -time.Second},
		{GPUsPerNode: 8, Placement: PlacementPack, Grace: -time.Second},
	} {
		if err := m.Validate(); err == nil {
			t.Errorf("%+v: no error", m)
		}
	}
	if err := DefaultNodeModel.Validate(); err != nil {
		t.Error(err)
	}
	p := NewPool(workload.Trace{}, t0, 1, 0)
	p.AddReady(1)
	if err := p.SetNodes(DefaultNodeModel); err == nil {
		t.Error("SetNodes after the first worker: no error")
	}
}

// FuzzNodes adds and removes workers at random steps of virtual time: no
// node ever holds more workers than GPUs, the nodes' GPUs in use are the
// live workers, a worker is Ready no sooner than its node is up plus its
// start-up, the peak covers the most workers ever live, and the node-hours
// stay within the peak nodes over the time played.
func FuzzNodes(f *testing.F) {
	f.Add(uint8(8), true, uint64(0x1234), []byte{3, 200, 7, 9, 130, 5})
	f.Add(uint8(1), false, uint64(7), []byte{1, 1, 129, 2, 255})
	f.Fuzz(func(t *testing.T, gpus uint8, pack bool, seed uint64, ops []byte) {
		m := NodeModel{GPUsPerNode: int(gpus%8) + 1, Placement: PlacementSpread, Startup: time.Duration(seed%300) * time.Second, Grace: time.Duration(seed>>9%120) * time.Second}
		if pack {
			m.Placement = PlacementPack
		}
		p := NewPool(workload.Trace{}, t0, 1, time.Minute)
		if err := p.SetNodes(m); err != nil {
			t.Fatal(err)
		}
		mostLive := 0
		for i, op := range ops {
			p.Advance(p.Now().Add(time.Duration(op%64) * 5 * time.Second))
			if op >= 128 && len(p.Workers()) > 0 {
				p.Remove(p.Workers()[int(op)%len(p.Workers())])
			} else {
				for _, w := range p.Add(int(op%4) + 1) {
					if w.ReadyAt.Before(w.Node.Up.Add(time.Minute)) && w.Node.Up.After(p.Now()) {
						t.Fatalf("op %d: %s Ready at %v before its node (up %v) plus its start-up", i, w.Name, w.ReadyAt, w.Node.Up)
					}
				}
			}
			inUse := 0
			for _, n := range p.Nodes() {
				if n.InUse > m.GPUsPerNode || n.InUse < 0 {
					t.Fatalf("op %d: %s holds %d of %d GPUs", i, n.Name, n.InUse, m.GPUsPerNode)
				}
				inUse += n.InUse
			}
			if inUse != len(p.Workers()) {
				t.Fatalf("op %d: %d GPUs in use for %d workers", i, inUse, len(p.Workers()))
			}
			mostLive = max(mostLive, len(p.Workers()))
		}
		if need := (mostLive + m.GPUsPerNode - 1) / m.GPUsPerNode; p.PeakNodes() < need {
			t.Fatalf("peak %d nodes for %d workers of %d per node", p.PeakNodes(), mostLive, m.GPUsPerNode)
		}
		if h := p.NodeHours(p.Now()); h < 0 || h > float64(p.PeakNodes())*p.Now().Sub(t0).Hours()+1e-9 {
			t.Fatalf("node-hours %v: below 0 or above %d peak nodes over %v", h, p.PeakNodes(), p.Now().Sub(t0))
		}
	})
}
