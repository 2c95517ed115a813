package replay

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gputask/gputask-controller/pkg/replay/baseline"
	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// Every policy reports node-hours and peak nodes, the table shows them,
// and without node start-up the GPU-hours of the policies whose victims do
// not depend on the nodes stay those of the pool without nodes.
func TestRunReportsNodeHours(t *testing.T) {
	tr := generatedTrace(t, workload.ShapeStep, 3*time.Hour)
	base := Config{Concurrency: 8, Startup: 2 * time.Minute, SLO: 10 * time.Second, Policies: []string{PolicyOurs, baseline.PolicyHPA, baseline.PolicyStatic, baseline.PolicyOracle}}
	without, err := Run(tr, base)
	if err != nil {
		t.Fatal(err)
	}
	withNodes := base
	withNodes.Nodes = &sim.NodeModel{GPUsPerNode: 8, Placement: sim.PlacementSpread, Grace: 30 * time.Second}
	rep, err := Run(tr, withNodes)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range rep.Policies {
		if p.NodeHours <= 0 || p.PeakNodes < 1 {
			t.Errorf("%s: %.2f node-h, peak %d nodes", p.Name, p.NodeHours, p.PeakNodes)
		}
		if want := (p.PeakReplicas + 7) / 8; p.PeakNodes < want {
			t.Errorf("%s: peak %d nodes for %d workers of 8 per node", p.Name, p.PeakNodes, p.PeakReplicas)
		}
		if (p.Name == baseline.PolicyStatic || p.Name == baseline.PolicyOracle) && p.GPUHours != without.Policies[i].GPUHours {
			t.Errorf("%s: %.3f GPU-h with nodes that start at once, %.3f without", p.Name, p.GPUHours, without.Policies[i].GPUHours)
		}
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil || !strings.Contains(table.String(), "node-h") || !strings.Contains(table.String(), "peak nodes") {
		t.Errorf("table: %v\n%s", err, table.String())
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil || !strings.Contains(md.String(), "| node-h | peak nodes |") {
		t.Errorf("markdown: %v\n%s", err, md.String())
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil || !strings.Contains(js.String(), `"node_hours"`) || !strings.Contains(js.String(), `"peak_nodes"`) || !strings.Contains(js.String(), `"gpus_per_node": 8`) || !strings.Contains(js.String(), `"node_startup": "0s"`) {
		t.Errorf("JSON lacks the node figures or the model: %v", err)
	}
	table.Reset()
	if err := without.WriteTable(&table); err != nil || strings.Contains(table.String(), "node-h") {
		t.Errorf("table without nodes shows node columns: %v\n%s", err, table.String())
	}
}
