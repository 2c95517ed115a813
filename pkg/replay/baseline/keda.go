package baseline

import (
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"

	"github.com/gputask/gputask-controller/pkg/replay/sim"
)

// KEDA's documented ScaledObject defaults (keda.sh, ScaledObject spec).
const (
	KEDAPollingInterval = 30 * time.Second
	KEDACooldownPeriod  = 300 * time.Second
	// KEDADefaultMaxReplicas is maxReplicaCount when unset.
	KEDADefaultMaxReplicas = 100
)

// KEDAConfig is a ScaledObject with one metrics-api trigger.
type KEDAConfig struct {
	// Name is the row's name; empty means keda.
	Name string
	// MinReplicas and MaxReplicas are minReplicaCount and maxReplicaCount.
	MinReplicas, MaxReplicas int32
	// Initial is the count the Deployment starts with.
	Initial int32
	// Target is the trigger's targetValue; AverageValue selects
	// metricType AverageValue (KEDA's default) instead of Value. They, with
	// Load, make the one trigger on the load index when Triggers is empty.
	Target       float64
	AverageValue bool
	// Triggers are the ScaledObject's triggers when it has others; the HPA
	// takes the largest count they ask for.
	Triggers []ExternalMetric
	// ActivationThreshold is activationTargetValue of every trigger: a
	// trigger is active while its value is above it. Default 0.
	ActivationThreshold float64
	// PollingInterval and CooldownPeriod: zero means KEDA's defaults.
	PollingInterval, CooldownPeriod time.Duration
	Load                            sim.LoadKind
	// Behavior is advanced.horizontalPodAutoscalerConfig.behavior, which
	// KEDA copies into the HPA it creates; nil for none.
	Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior
}

// KEDA models KEDA's scale loop (pkg/scaling/executor,
// scale_scaledobjects.go) feeding the HPA it creates: every
// pollingInterval it checks whether the trigger is active; it scales 0 → 1
// (or minReplicaCount) itself when active, and back to 0 once nothing was
// active for cooldownPeriod; between 1 and max the HPA scales on the
// metric, which the KEDA metrics adapter reads fresh on each HPA sync.
type KEDA struct {
	cfg        KEDAConfig
	hpa        *HPA
	nextPoll   time.Time
	lastActive time.Time
}

// NewKEDA models a ScaledObject with cfg.
func NewKEDA(cfg KEDAConfig) *KEDA {
	if cfg.PollingInterval <= 0 {
		cfg.PollingInterval = KEDAPollingInterval
	}
	if cfg.CooldownPeriod <= 0 {
		cfg.CooldownPeriod = KEDACooldownPeriod
	}
	if cfg.MaxReplicas <= 0 {
		cfg.MaxReplicas = KEDADefaultMaxReplicas
	}
	cfg.MinReplicas = max(cfg.MinReplicas, 0)
	// The HPA that KEDA creates has minReplicas max(minReplicaCount, 1).
	hpa := NewHPA(HPAConfig{
		Min: max(cfg.MinReplicas, 1), Max: cfg.MaxReplicas,
		Target: cfg.Target, AverageValue: cfg.AverageValue, Load: cfg.Load,
		Metrics: cfg.Triggers, Behavior: cfg.Behavior,
	})
	hpa.name = PolicyKEDA
	if cfg.Name != "" {
		hpa.name = cfg.Name
	}
	return &KEDA{cfg: cfg, hpa: hpa}
}

// Name implements sim.Policy.
func (k *KEDA) Name() string { return k.hpa.name }

// HPA is the HPA that KEDA created and feeds.
func (k *KEDA) HPA() *HPA { return k.hpa }

// Start begins with Initial Ready pods, within [minReplicaCount, maxReplicaCount].
func (k *KEDA) Start(p *sim.Pool) {
	k.hpa.replicas = min(max(k.cfg.Initial, k.cfg.MinReplicas), k.cfg.MaxReplicas)
	p.AddReady(int(k.hpa.replicas))
	k.nextPoll = p.Now()
}

// Period implements sim.Policy: the HPA's sync period; KEDA polls on its own
// interval within it.
func (k *KEDA) Period() time.Duration { return k.hpa.Period() }

// Replicas implements sim.Policy.
func (k *KEDA) Replicas() int32 { return k.hpa.replicas }

// Wake implements sim.Policy.
func (k *KEDA) Wake() time.Time { return time.Time{} }

// Sync implements sim.Policy.
func (k *KEDA) Sync(p *sim.Pool) { scaleDeployment(p, k.hpa.replicas) }

// Step runs KEDA's poll when it is due, then the HPA's sync.
func (k *KEDA) Step(p *sim.Pool) {
	now := p.Now()
	if !now.Before(k.nextPoll) {
		k.nextPoll = now.Add(k.cfg.PollingInterval)
		values := k.hpa.metricValues(p.Metrics())
		k.hpa.replicas = k.poll(now, k.hpa.replicas, values...)
		scaleDeployment(p, k.hpa.replicas)
	}
	k.hpa.Step(p)
}

// poll follows the executor's RequestScale with no idleReplicaCount: the
// ScaledObject is active when any trigger is; it returns the count KEDA
// itself sets.
func (k *KEDA) poll(now time.Time, current int32, values ...float64) int32 {
	active := false
	for _, v := range values {
		active = active || k.isActive(v)
	}
	switch {
	case current == 0 && active:
		// scaleFromZeroOrIdle: to minReplicaCount, or 1 when that is 0.
		k.lastActive = now
		return max(k.cfg.MinReplicas, 1)
	case active:
		k.lastActive = now
		return current
	case current > 0 && k.cfg.MinReplicas == 0:
		// scaleToZeroOrIdle: only once nothing was active for cooldownPeriod.
		if k.lastActive.IsZero() || !now.Before(k.lastActive.Add(k.cfg.CooldownPeriod)) {
			return 0
		}
		return current
	case current < k.cfg.MinReplicas:
		return k.cfg.MinReplicas
	}
	return current
}

// isActive follows the metrics-api scaler's GetMetricsAndActivity: the
// trigger is active while the value is above activationTargetValue.
func (k *KEDA) isActive(value float64) bool {
	return value > k.cfg.ActivationThreshold
}

// RunningRequestsMetric is a trigger on the requests the serving workers
// run (vLLM's num_requests_running summed over the pods), AverageValue
// perPod.
func RunningRequestsMetric(perPod float64) ExternalMetric {
	return ExternalMetric{Name: "num_requests_running", Target: perPod, AverageValue: true,
		Read: func(o sim.Observation) float64 { return float64(o.InFlight) }}
}

// WaitingRequestsMetric is a trigger on the requests waiting for a slot
// (vLLM's num_requests_waiting summed over the pods), AverageValue
// perPod. The modelled router holds one queue for the pool; its length is
// what the pods' queues would sum to.
func WaitingRequestsMetric(perPod float64) ExternalMetric {
	return ExternalMetric{Name: "num_requests_waiting", Target: perPod, AverageValue: true,
		Read: func(o sim.Observation) float64 { return float64(o.Waiting) }}
}
