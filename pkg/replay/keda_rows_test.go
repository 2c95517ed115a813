package replay

import (
	"math"
	"testing"
	"time"

	"github.com/gputask/gputask-controller/pkg/replay/baseline"
	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// The keda row runs KEDA's default metricType, AverageValue, unless told;
// keda-queue has its two triggers at 0.7 × the slots and 1 waiting per pod.
func TestKEDARows(t *testing.T) {
	tr := workload.Trace{Requests: []workload.Served{{Arrival: 0, Service: time.Second}}}
	c := Config{Concurrency: 8, Set: DefaultSet(), Load: sim.LoadDemand}
	pol, err := c.policy(baseline.PolicyKEDA, tr)
	if err != nil {
		t.Fatal(err)
	}
	if m := pol.(*baseline.KEDA).HPA().Config().Metrics; len(m) != 1 || !m[0].AverageValue {
		t.Errorf("keda metrics %+v, want one AverageValue", m)
	}
	c.KEDAValue = true
	pol, _ = c.policy(baseline.PolicyKEDA, tr)
	if m := pol.(*baseline.KEDA).HPA().Config().Metrics; m[0].AverageValue {
		t.Error("--keda-metric-type Value ignored")
	}
	pol, err = c.policy(baseline.PolicyKEDAQueue, tr)
	if err != nil {
		t.Fatal(err)
	}
	k := pol.(*baseline.KEDA)
	m := k.HPA().Config().Metrics
	if k.Name() != baseline.PolicyKEDAQueue || len(m) != 2 || m[0].Name != "num_requests_running" || math.Abs(m[0].Target-0.7*8) > 1e-9 ||
		m[1].Name != "num_requests_waiting" || m[1].Target != 1 || !m[0].AverageValue || !m[1].AverageValue {
		t.Errorf("keda-queue %s: %+v", k.Name(), m)
	}
	if k.HPA().Config().Behavior == nil {
		t.Error("keda-queue's HPA has no behavior")
	}
}
