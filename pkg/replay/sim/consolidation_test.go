package sim

import (
	"slices"
	"testing"
	"time"

	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// consolidationPool is four-GPU nodes holding [3 1] idle workers after
// worker-4 left node-1 at t0, and a trace that keeps the clock going
// until 10 minutes. With busyOnNode2 the workers of node-1 are drained
// while the first request arrives, so that it runs on node-2's worker,
// and taken back.
func consolidationPool(t *testing.T, c Consolidation, doNotDisrupt, busyOnNode2 bool) *Pool {
	t.Helper()
	tr := workload.Trace{Requests: []workload.Served{{Arrival: 0, Service: time.Hour}, {Arrival: 10 * time.Minute, Service: time.Second}}}
	if !busyOnNode2 {
		tr.Requests = tr.Requests[1:]
		tr.Requests[0].Arrival = 10 * time.Minute
	}
	p := NewPool(tr, t0, 1, 2*time.Minute)
	if err := p.SetNodes(NodeModel{GPUsPerNode: 4, Placement: PlacementSpread, Startup: 3 * time.Minute, Grace: 30 * time.Second, Consolidation: c}); err != nil {
		t.Fatal(err)
	}
	p.SetDoNotDisrupt(doNotDisrupt)
	ws := p.AddReady(5)
	p.Remove(ws[3])
	if got := inUse(p); !slices.Equal(got, []int{3, 1}) {
		t.Fatalf("nodes = %v, want [3 1]", got)
	}
	if busyOnNode2 {
		for _, w := range ws[:3] {
			p.Drain(w)
		}
		p.Advance(t0)
		for _, w := range ws[:3] {
			p.Undrain(w)
		}
		if !ws[4].Busy() {
			t.Fatalf("worker on node-2 not busy")
		}
	}
	return p
}

// Under WhenEmptyOrUnderutilized a node whose workers fit on the other
// nodes is drained consolidateAfter past its last change and a
// validation after it was chosen; its workers are evicted and created
// again on the nodes that stay, and it goes once empty. A busy worker
// marked do-not-disrupt keeps its node; one without the mark is evicted
// with its request. WhenEmpty moves nothing, nor does a node whose
// workers fit nowhere else.
func TestConsolidation(t *testing.T) {
	tests := []struct {
		name                      string
		consolidation             Consolidation
		doNotDisrupt, busyOnNode2 bool
		wantNodes                 []int
		wantEvictions, wantFailed int
	}{
		{"underutilized node drained", ConsolidationWhenEmptyOrUnderutilized, true, false, []int{4}, 1, 0},
		{"busy worker keeps its node, the idle one goes", ConsolidationWhenEmptyOrUnderutilized, true, true, []int{4}, 3, 0},
		{"a busy worker without the mark is evicted", ConsolidationWhenEmptyOrUnderutilized, false, true, []int{4}, 1, 1},
		{"the default is underutilized", "", true, false, []int{4}, 1, 0},
		{"when empty moves nothing", ConsolidationWhenEmpty, true, false, []int{3, 1}, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := consolidationPool(t, tc.consolidation, tc.doNotDisrupt, tc.busyOnNode2)
			p.Advance(t0.Add(5 * time.Minute))
			if got := inUse(p); !slices.Equal(got, tc.wantNodes) {
				t.Errorf("nodes = %v, want %v", got, tc.wantNodes)
			}
			if p.Evictions() != tc.wantEvictions {
				t.Errorf("evictions = %d, want %d", p.Evictions(), tc.wantEvictions)
			}
			failed := 0
			for _, o := range p.Outcomes() {
				if o.Failed {
					failed++
				}
			}
			if failed != tc.wantFailed {
				t.Errorf("failed requests = %d, want %d", failed, tc.wantFailed)
			}
			if got := len(p.Workers()); got != 4 {
				t.Errorf("workers = %d, want 4: every evicted worker is created again", got)
			}
			if tc.wantEvictions == 0 {
				return
			}
			// Chosen at the first poll consolidateAfter (30 s) past the
			// last change, disrupted at the first poll a validation
			// (15 s) after: 50 s.
			newest := p.AllWorkers()[len(p.AllWorkers())-1]
			if want := t0.Add(50 * time.Second); !newest.Created.Equal(want) {
				t.Errorf("replacement created at %v, want %v", newest.Created.Sub(t0), want.Sub(t0))
			}
			if hours, want := p.NodeHours(t0.Add(5*time.Minute)), (5*time.Minute + 50*time.Second).Hours(); hours < want-1e-9 || hours > want+1e-9 {
				t.Errorf("node-hours = %v, want %v: the drained node goes when its last worker exits", hours, want)
			}
		})
	}
}

// A node whose workers fit on no other node stays.
func TestConsolidationNeedsRoom(t *testing.T) {
	p := NewPool(workload.Trace{Requests: []workload.Served{{Arrival: 10 * time.Minute, Service: time.Second}}}, t0, 1, 2*time.Minute)
	if err := p.SetNodes(NodeModel{GPUsPerNode: 4, Placement: PlacementSpread, Startup: 3 * time.Minute, Grace: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	p.AddReady(7) // [4 3]
	p.Advance(t0.Add(5 * time.Minute))
	if got := inUse(p); !slices.Equal(got, []int{4, 3}) || p.Evictions() != 0 {
		t.Errorf("nodes = %v with %d evictions, want [4 3] and none", got, p.Evictions())
	}
}

func TestParseConsolidationAndVictims(t *testing.T) {
	if _, err := ParseConsolidation("when-underused"); err == nil {
		t.Error("ParseConsolidation accepted an unknown policy")
	}
	if _, err := ParseDeploymentVictims("oldest"); err == nil {
		t.Error("ParseDeploymentVictims accepted an unknown order")
	}
	if err := (NodeModel{GPUsPerNode: 1, Placement: PlacementSpread, Consolidation: "never"}).Validate(); err == nil {
		t.Error("Validate accepted an unknown consolidation policy")
	}
}
