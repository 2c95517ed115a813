package baseline

import (
	"testing"
	"time"

	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// The KEDA model follows KEDA's scale executor
// (pkg/scaling/executor/scale_scaledobjects.go, RequestScale) and the
// metrics-api scaler (pkg/scalers/metrics_api_scaler.go,
// GetMetricsAndActivity), with the documented ScaledObject defaults.

// ScaledObject defaults: pollingInterval 30, cooldownPeriod 300,
// maxReplicaCount 100, and the HPA KEDA creates has minReplicas
// max(minReplicaCount, 1).
func TestKEDADefaults(t *testing.T) {
	k := NewKEDA(KEDAConfig{Target: 0.7})
	if k.cfg.PollingInterval != 30*time.Second || k.cfg.CooldownPeriod != 300*time.Second || k.cfg.MaxReplicas != 100 {
		t.Errorf("defaults = %v, %v, %d", k.cfg.PollingInterval, k.cfg.CooldownPeriod, k.cfg.MaxReplicas)
	}
	if k.hpa.cfg.Min != 1 {
		t.Errorf("HPA minReplicas = %d, want 1 for minReplicaCount 0", k.hpa.cfg.Min)
	}
}

// metrics_api_scaler.go: GetMetricsAndActivity reports the trigger active
// while the value is above activationTargetValue (default 0).
func TestKEDAActivation(t *testing.T) {
	k := NewKEDA(KEDAConfig{Target: 0.7, ActivationThreshold: 0.2})
	if k.isActive(0.2) || !k.isActive(0.21) {
		t.Errorf("activation at 0.2: active(0.2)=%v active(0.21)=%v, want false, true", k.isActive(0.2), k.isActive(0.21))
	}
	if NewKEDA(KEDAConfig{Target: 1}).isActive(0) {
		t.Error("a value of 0 is not above the default threshold 0")
	}
}

// scale_scaledobjects.go: RequestScale scales from 0 to
// max(minReplicaCount, 1) when a trigger is active (scaleFromZeroOrIdle),
// and to 0 only once no trigger was active for cooldownPeriod
// (scaleToZeroOrIdle).
func TestKEDAScaleFromAndToZero(t *testing.T) {
	k := NewKEDA(KEDAConfig{Target: 0.7})
	if got := k.poll(t0, 0, 0); got != 0 {
		t.Errorf("idle at zero: got %d, want 0", got)
	}
	if got := k.poll(t0.Add(30*time.Second), 0, 0.5); got != 1 {
		t.Errorf("active at zero: got %d, want 1", got)
	}
	last := t0.Add(60 * time.Second)
	if got := k.poll(last, 3, 0.5); got != 3 {
		t.Errorf("active: got %d, want 3 (the HPA scales above 1)", got)
	}
	if got := k.poll(last.Add(299*time.Second), 3, 0); got != 3 {
		t.Errorf("inactive for 299s: got %d, want 3 kept through the cooldown", got)
	}
	if got := k.poll(last.Add(300*time.Second), 3, 0); got != 0 {
		t.Errorf("inactive for 300s: got %d, want 0", got)
	}
}

// scale_scaledobjects.go: with minReplicaCount above 0 KEDA never scales to
// zero, and raises a count below it.
func TestKEDAMinReplicaCount(t *testing.T) {
	k := NewKEDA(KEDAConfig{MinReplicas: 2, Target: 0.7})
	if got := k.poll(t0.Add(time.Hour), 3, 0); got != 3 {
		t.Errorf("inactive above min: got %d, want 3 (the HPA scales down)", got)
	}
	if got := k.poll(t0.Add(time.Hour), 1, 0); got != 2 {
		t.Errorf("below min: got %d, want 2", got)
	}
	if got := k.poll(t0, 0, 1); got != 2 {
		t.Errorf("active at zero: got %d, want minReplicaCount 2", got)
	}
}

// KEDA polls on its own interval: a request arriving at an idle pool
// waits for the next poll, then for a worker to start.
func TestKEDAColdStartWaitsForPollAndStartup(t *testing.T) {
	tr := workload.Trace{Requests: []workload.Served{{Arrival: 0, Service: time.Second}, {Arrival: 10 * time.Second, Service: time.Second}}}
	p := sim.NewPool(tr, t0, 1, 2*time.Minute)
	k := NewKEDA(KEDAConfig{Target: 1, Load: sim.LoadDemand})
	res := sim.Play(p, k, sim.PlayOptions{SampleEvery: time.Minute, Limit: time.Hour, Load: sim.LoadDemand, SLO: sim.SLOTargets{Wait: time.Second}})
	// The first request arrives with the first poll, so a worker is asked
	// for at once; it is Ready 2 minutes later.
	if res.WaitP99 < 120 || res.WaitP99 > 121 {
		t.Errorf("p99 wait = %vs, want about 120s", res.WaitP99)
	}
	if res.FailedRequests != 0 {
		t.Errorf("failed = %d", res.FailedRequests)
	}
}

// horizontal.go: computeReplicasForMetrics takes the largest proposal of
// the valid metrics; with an invalid one it proposes nothing rather than
// scale down.
func TestComputeReplicasForMetrics(t *testing.T) {
	h := NewHPA(HPAConfig{Min: 1, Max: 100, Metrics: []ExternalMetric{RunningRequestsMetric(5.6), WaitingRequestsMetric(1)}})
	for _, tc := range []struct {
		name   string
		values []float64
		want   int32
		ok     bool
	}{
		{"running asks more", []float64{56, 2}, 10, true}, // ceil(56/5.6) = 10 > 2
		{"waiting asks more", []float64{22.4, 9}, 9, true},
		{"both within tolerance", []float64{22.4, 4}, 4, true},
		{"a missing value with a scale-down", []float64{5.6}, 0, false},
		{"a missing value with a scale-up", []float64{56}, 10, true},
	} {
		got, ok := h.computeReplicasForMetrics(4, 4, 4, tc.values)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: got %d %v, want %d %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// keda-queue's triggers read the requests running on the serving workers
// and waiting for a slot; the ScaledObject is active when any trigger is.
func TestKEDAQueueTriggers(t *testing.T) {
	o := sim.Observation{InFlight: 13, Waiting: 4, Serving: 2, Concurrency: 8}
	if got := RunningRequestsMetric(5.6).Read(o); got != 13 {
		t.Errorf("running = %v", got)
	}
	if got := WaitingRequestsMetric(1).Read(o); got != 4 {
		t.Errorf("waiting = %v", got)
	}
	k := NewKEDA(KEDAConfig{Triggers: []ExternalMetric{RunningRequestsMetric(5.6), WaitingRequestsMetric(1)}})
	if got := k.poll(t0, 0, 0, 3); got != 1 {
		t.Errorf("one active trigger from zero: got %d, want 1", got)
	}
	if got := k.poll(t0, 0, 0, 0); got != 0 {
		t.Errorf("no active trigger: got %d, want 0", got)
	}
}
