package baseline

import (
	"testing"
	"time"

	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// The HPA model follows k8s.io/kubernetes v1.37 pkg/controller/podautoscaler.
// Each test names the function whose rule it checks.

var t0 = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

var symmetricTolerance = hpaTolerances{HPATolerance, HPATolerance}

func newTestHPA(min, max int32, target float64) *HPA {
	return NewHPA(HPAConfig{Min: min, Max: max, Target: target, Load: sim.LoadDemand})
}

// config/v1alpha1/defaults.go: RecommendedDefaultHPAControllerConfiguration
// sets a 15 s sync period, a 0.1 tolerance and a 5 m downscale
// stabilization window.
func TestHPADefaults(t *testing.T) {
	h := newTestHPA(1, 10, 0.7)
	if h.Period() != 15*time.Second || h.cfg.Tolerance != 0.1 || h.cfg.DownscaleStabilization != 5*time.Minute {
		t.Errorf("defaults = %v, %v, %v; want 15s, 0.1, 5m", h.Period(), h.cfg.Tolerance, h.cfg.DownscaleStabilization)
	}
}

// replica_calculator.go: Tolerances.isWithin keeps the count while the
// usage ratio is within [1 − 0.1, 1 + 0.1], and getUsageRatioReplicaCount
// returns the current count then.
func TestHPAToleranceKeepsCount(t *testing.T) {
	for _, tc := range []struct {
		ratio float64
		want  int32
	}{
		{0.9, 4}, {1.1, 4}, {1.0, 4},
		{1.11, 5}, // ceil(1.11 × 4 ready)
		{0.89, 4}, // ceil(3.56) = 4: outside, but rounds back
		{0.5, 2},
	} {
		got, _ := usageRatioReplicaCount(4, 4, tc.ratio, symmetricTolerance)
		if got != tc.want {
			t.Errorf("ratio %v: got %d, want %d", tc.ratio, got, tc.want)
		}
	}
}

// replica_calculator.go: GetExternalMetricReplicas (a value target) passes
// the usage ratio to getUsageRatioReplicaCount, which multiplies it by the
// Ready pods (getReadyPodsCount), not by the current count: pods that are
// still starting add nothing.
func TestHPAValueTargetScalesFromReadyPods(t *testing.T) {
	h := newTestHPA(1, 100, 0.5)
	// 10 pods asked for, 4 Ready; the index is 1.0 against a target of 0.5.
	got, ok := h.externalReplicas(h.cfg.Metrics[0], 10, 10, 4, 1.0)
	if !ok || got != 8 {
		t.Errorf("got %d, want ceil(2 × 4 Ready) = 8", got)
	}
	// No Ready pod yet: ceil(ratio × 0) = 0, which minReplicas then raises.
	got, _ = h.externalReplicas(h.cfg.Metrics[0], 3, 3, 0, 5.0)
	if got != 0 {
		t.Errorf("with no Ready pod got %d, want 0", got)
	}
}

// replica_calculator.go: getUsageRatioReplicaCount with currentReplicas 0
// asks for ceil(ratio).
func TestHPAFromZeroAsksCeilRatio(t *testing.T) {
	if got, _ := usageRatioReplicaCount(0, 0, 2.3, symmetricTolerance); got != 3 {
		t.Errorf("got %d, want 3", got)
	}
}

// replica_calculator.go: GetExternalPerPodMetricReplicas (an averageValue
// target) compares usage with target × the scale's status replicas, and
// outside the tolerance asks for ceil(usage / target).
func TestHPAAverageValueTarget(t *testing.T) {
	if got := externalPerPodReplicas(4, 4000, 1000, symmetricTolerance); got != 4 {
		t.Errorf("on target: got %d, want 4", got)
	}
	if got := externalPerPodReplicas(4, 9500, 1000, symmetricTolerance); got != 10 {
		t.Errorf("above: got %d, want ceil(9.5) = 10", got)
	}
	h := NewHPA(HPAConfig{Min: 1, Max: 100, Target: 0.5, AverageValue: true, Load: sim.LoadDemand})
	// The metric of an averageValue target is the index summed over the serving workers.
	if got := h.metricValues(sim.Observation{InFlight: 16, Waiting: 8, Serving: 3, Concurrency: 8})[0]; got != 3 {
		t.Errorf("metric = %v, want (16+8)/8 = 3", got)
	}
}

// horizontal.go: calculateScaleUpLimit is max(2 × current, 4), and
// convertDesiredReplicasWithRules caps a scale-up there (and at
// maxReplicas), and raises a count below minReplicas.
func TestHPAScaleUpLimit(t *testing.T) {
	for _, tc := range []struct {
		current, desired, want int32
	}{
		{1, 50, 4},   // at least 4 pods
		{3, 50, 6},   // 100 %
		{10, 50, 20}, // 100 %
		{30, 50, 40}, // maxReplicas
		{5, 0, 2},    // minReplicas
		{5, 7, 7},
	} {
		if got := convertDesiredReplicasWithRules(tc.current, tc.desired, 2, 40); got != tc.want {
			t.Errorf("current %d desired %d: got %d, want %d", tc.current, tc.desired, got, tc.want)
		}
	}
}

// horizontal.go: stabilizeRecommendation takes the highest recommendation
// within the 5-minute window, so a scale-down follows the load only after
// it stayed low for 300 s; recordInitialRecommendation seeds the window
// with the count at the first reconcile.
func TestHPAScaleDownStabilization(t *testing.T) {
	h := newTestHPA(1, 100, 0.5)
	current := int32(8)
	// First reconcile at the target: 8 is recorded twice (initial and this one).
	current = h.reconcile(t0, current, current, current, 0.5)
	if current != 8 {
		t.Fatalf("at target: got %d", current)
	}
	// Load drops to a quarter: the proposal is 2, the window holds 8.
	for s := 15; s < 300; s += 15 {
		current = h.reconcile(t0.Add(time.Duration(s)*time.Second), current, current, current, 0.125)
		if current != 8 {
			t.Fatalf("after %ds: got %d, want 8 held by the window", s, current)
		}
	}
	current = h.reconcile(t0.Add(301*time.Second), current, current, current, 0.125)
	if current != 2 {
		t.Errorf("after 301s: got %d, want 2", current)
	}
}

// horizontal.go: on a cluster, the sample of 20 syncs ago is always
// older than the 5-minute window when the 21st sync reads the clock, so a
// sample exactly one window old is out of it in virtual time too.
func TestHPAStabilizationWindowIsTwentySyncs(t *testing.T) {
	h := newTestHPA(1, 100, 0.5)
	h.recs = []timestampedRecommendation{{9, t0}, {3, t0.Add(15 * time.Second)}}
	if got := h.stabilizeRecommendation(t0.Add(5*time.Minute), 2); got != 3 {
		t.Errorf("got %d, want 3: the 9 of exactly 300 s ago is out of the window", got)
	}
}

// horizontal.go: stabilizeRecommendation replaces one sample older than
// the window (the last one found) instead of appending, and otherwise
// appends.
func TestHPAStabilizeRecommendationReplacesOneOldSample(t *testing.T) {
	h := newTestHPA(1, 100, 0.5)
	h.recs = []timestampedRecommendation{{9, t0}, {7, t0.Add(time.Second)}, {3, t0.Add(10 * time.Minute)}}
	now := t0.Add(11 * time.Minute)
	if got := h.stabilizeRecommendation(now, 2); got != 3 {
		t.Errorf("got %d, want 3 (the only recommendation within the window)", got)
	}
	want := []timestampedRecommendation{{9, t0}, {2, now}, {3, t0.Add(10 * time.Minute)}}
	if len(h.recs) != len(want) {
		t.Fatalf("recs = %v", h.recs)
	}
	for i := range want {
		if h.recs[i] != want[i] {
			t.Errorf("recs[%d] = %v, want %v", i, h.recs[i], want[i])
		}
	}
}

// horizontal.go: reconcileAutoscaler brings a count outside [min, max]
// back without reading metrics, and with currentReplicas 0 scaling is
// disabled (the HPAScaleToZero gate is off by default).
func TestHPAReconcileBoundsAndZero(t *testing.T) {
	h := newTestHPA(2, 5, 0.5)
	if got := h.reconcile(t0, 9, 9, 9, 0.5); got != 5 {
		t.Errorf("above max: got %d, want 5", got)
	}
	if got := h.reconcile(t0, 1, 1, 1, 100); got != 2 {
		t.Errorf("below min: got %d, want 2 (no metric-driven jump)", got)
	}
	if got := h.reconcile(t0, 0, 0, 0, 100); got != 0 {
		t.Errorf("at zero: got %d, want 0", got)
	}
}

// A Deployment scales in through its ReplicaSet, which deletes pods
// whatever they are doing: the requests in flight on them are lost.
func TestHPAScaleInLosesRequestsInFlight(t *testing.T) {
	tr := workload.Trace{Requests: []workload.Served{{Arrival: 0, Service: time.Hour}, {Arrival: 0, Service: time.Hour}}}
	p := sim.NewPool(tr, t0, 1, 0)
	p.AddReady(2)
	p.Advance(t0.Add(time.Second))
	scaleDeployment(p, 1)
	if got := len(p.Workers()); got != 1 {
		t.Fatalf("workers = %d, want 1", got)
	}
	res := sim.Measure(p.Outcomes(), sim.SLOTargets{Wait: time.Second})
	if res.FailedRequests != 1 {
		t.Errorf("failed = %d, want 1", res.FailedRequests)
	}
}

// controller_utils.go: ActivePodsWithRanks.Less puts not-Ready pods first,
// then among Ready pods the one Ready more recently (by the log2 of the
// time since), then the newer pod.
func TestReplicaSetVictimOrder(t *testing.T) {
	now := t0.Add(10 * time.Hour)
	old := &sim.Worker{Name: "old", Created: t0, ReadyAt: t0}
	recent := &sim.Worker{Name: "recent", Created: now.Add(-10 * time.Minute), ReadyAt: now.Add(-8 * time.Minute)}
	starting := &sim.Worker{Name: "starting", Created: now.Add(-time.Minute), ReadyAt: now.Add(time.Minute)}
	got := replicaSetVictims([]*sim.Worker{old, recent, starting}, now)
	want := []string{"starting", "recent", "old"}
	for i := range want {
		if got[i].Name != want[i] {
			t.Fatalf("order = %s %s %s, want %v", got[0].Name, got[1].Name, got[2].Name, want)
		}
	}
}

// controller_utils.go: logarithmicRankDiff compares the integer log2 of
// the nanoseconds since each time, so times close in age tie.
func TestLogarithmicRankDiff(t *testing.T) {
	now := t0.Add(time.Hour)
	if d := logarithmicRankDiff(now.Add(-100*time.Second), now.Add(-101*time.Second), now); d != 0 {
		t.Errorf("100s and 101s ago: diff %d, want 0", d)
	}
	if d := logarithmicRankDiff(now.Add(-10*time.Second), now.Add(-1000*time.Second), now); d >= 0 {
		t.Errorf("10s vs 1000s ago: diff %d, want < 0", d)
	}
}

// The HPA acts every sync period on the pool: a step in load is met with
// max(2 × current, 4) more pods per 15 s until the metric is within tolerance.
func TestHPAPlaysEverySyncPeriod(t *testing.T) {
	var reqs []workload.Served
	for i := 0; i < 400; i++ {
		reqs = append(reqs, workload.Served{Arrival: time.Duration(i) * 100 * time.Millisecond, Service: 10 * time.Minute})
	}
	p := sim.NewPool(workload.Trace{Requests: reqs}, t0, 10, 0)
	h := newTestHPA(1, 100, 1)
	res := sim.Play(p, h, sim.PlayOptions{SampleEvery: 15 * time.Second, Limit: time.Hour, Load: sim.LoadDemand, SLO: sim.SLOTargets{Wait: time.Minute}})
	if res.PeakReplicas != 40 {
		t.Errorf("peak = %d, want 40 (400 requests / 10 slots at target 1)", res.PeakReplicas)
	}
}

// scaleDeployment deletes its victims through Pool.Delete: with a grace
// long enough, a scale-in loses no request, and the victim holds its GPU
// until its last request ends.
func TestScaleDeploymentGivesTheGrace(t *testing.T) {
	for _, tc := range []struct {
		grace    time.Duration
		wantLost bool
	}{{0, true}, {time.Minute, false}} {
		tr := workload.Trace{Requests: []workload.Served{{Arrival: 0, Service: 30 * time.Second}, {Arrival: 0, Service: 30 * time.Second}}}
		p := sim.NewPool(tr, t0, 1, 0)
		p.SetGrace(tc.grace)
		p.AddReady(2)
		p.Advance(t0.Add(time.Second))
		scaleDeployment(p, 1)
		if len(p.Workers()) != 1 {
			t.Fatalf("grace %v: %d workers counted, want 1", tc.grace, len(p.Workers()))
		}
		p.Advance(t0.Add(time.Minute))
		out := p.Outcomes()
		if lost := out[0].Failed || out[1].Failed; lost != tc.wantLost {
			t.Errorf("grace %v: lost %v, want %v", tc.grace, lost, tc.wantLost)
		}
	}
}
