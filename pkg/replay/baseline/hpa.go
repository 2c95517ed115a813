package baseline

import (
	"hash/fnv"
	"math"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"

	"github.com/gputask/gputask-controller/pkg/replay/sim"
)

// This file models what users run instead of our autoscaler: a
// HorizontalPodAutoscaler (autoscaling/v2) on an External metric that
// carries the same load index, over a Deployment. Each rule follows a
// function of k8s.io/kubernetes v1.37 pkg/controller/podautoscaler
// (replica_calculator.go and horizontal.go) or pkg/controller
// (controller_utils.go), named in its comment and in its test.

// HPA defaults of kube-controller-manager (pkg/controller/podautoscaler/config/v1alpha1/defaults.go).
const (
	HPASyncPeriod                   = 15 * time.Second
	HPATolerance                    = 0.1
	HPADownscaleStabilizationWindow = 5 * time.Minute
	// hpaScaleUpLimitFactor and hpaScaleUpLimitMinimum are horizontal.go's
	// scaleUpLimitFactor and scaleUpLimitMinimum.
	hpaScaleUpLimitFactor  = 2.0
	hpaScaleUpLimitMinimum = 4.0
)

// HPAConfig is an HPA with one External metric.
type HPAConfig struct {
	Min, Max int32
	// Initial is the count the Deployment starts with; 0 means Min.
	Initial int32
	// Target is the metric's target: target.value, or target.averageValue
	// when AverageValue is set. They, with Load, make the one External
	// metric on the load index that the HPA has when Metrics is empty.
	Target       float64
	AverageValue bool
	// Metrics are the HPA's External metrics when it has others.
	Metrics []ExternalMetric
	// Tolerance, SyncPeriod and DownscaleStabilization are the
	// kube-controller-manager flags --horizontal-pod-autoscaler-*; zero
	// means their defaults.
	Tolerance              float64
	SyncPeriod             time.Duration
	DownscaleStabilization time.Duration
	Load                   sim.LoadKind
	// Behavior is spec.behavior as written (the API server's defaults
	// fill what it leaves out); nil is an HPA without one.
	Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior
	// Name is the row's name when not PolicyHPA (with a behavior) or
	// PolicyHPADefault (without): a searched row's, for one.
	Name string
}

func (c HPAConfig) withDefaults() HPAConfig {
	if c.Tolerance == 0 {
		c.Tolerance = HPATolerance
	}
	if c.SyncPeriod <= 0 {
		c.SyncPeriod = HPASyncPeriod
	}
	if c.DownscaleStabilization <= 0 {
		c.DownscaleStabilization = HPADownscaleStabilizationWindow
	}
	c.Min = max(c.Min, 1) // the HPA's minReplicas is at least 1
	c.Max = max(c.Max, c.Min)
	if c.Behavior != nil {
		c.Behavior = defaultBehavior(c.Behavior, c.DownscaleStabilization)
	}
	if len(c.Metrics) == 0 {
		c.Metrics = []ExternalMetric{LoadIndexMetric(c.Load, c.Target, c.AverageValue)}
	}
	return c
}

// ExternalMetric is one External metric of an HPA: its target and the
// value its adapter serves.
type ExternalMetric struct {
	Name string
	// Target is target.value, or target.averageValue when AverageValue.
	Target       float64
	AverageValue bool
	// Read is the value served when the workers are as o says.
	Read func(o sim.Observation) float64
}

// LoadIndexMetric is the load index as an External metric: the index for
// a value target; for an averageValue target, which the HPA divides by
// the pods, the index summed over the serving workers, a total as a KEDA
// metrics-api scaler would report it.
func LoadIndexMetric(load sim.LoadKind, target float64, averageValue bool) ExternalMetric {
	return ExternalMetric{Name: "load-index", Target: target, AverageValue: averageValue, Read: func(o sim.Observation) float64 {
		v := o.LoadIndex(load)
		if averageValue {
			v *= float64(max(o.Serving, 1))
		}
		return v
	}}
}

// timestampedRecommendation is horizontal.go's type of the same name.
type timestampedRecommendation struct {
	recommendation int32
	timestamp      time.Time
}

// HPA is the HPA controller's state for one HPA, with the Deployment it scales.
type HPA struct {
	cfg      HPAConfig
	name     string
	replicas int32
	recs     []timestampedRecommendation
	// scaleUpEvents and scaleDownEvents are horizontal.go's, kept only
	// with a behavior.
	scaleUpEvents, scaleDownEvents []timestampedScaleEvent
}

// NewHPA models an HPA with cfg: the hpa row with a behavior, the
// hpa-default row without.
func NewHPA(cfg HPAConfig) *HPA {
	name := PolicyHPA
	if cfg.Behavior == nil {
		name = PolicyHPADefault
	}
	if cfg.Name != "" {
		name = cfg.Name
	}
	return &HPA{cfg: cfg.withDefaults(), name: name}
}

// Name implements sim.Policy.
func (h *HPA) Name() string { return h.name }

// Config is the HPA as it runs: its config with the defaults filled in.
func (h *HPA) Config() HPAConfig { return h.cfg }

// Start begins with Initial Ready pods, within [min, max].
func (h *HPA) Start(p *sim.Pool) {
	h.replicas = min(max(h.cfg.Initial, h.cfg.Min), h.cfg.Max)
	p.AddReady(int(h.replicas))
}

// Period implements sim.Policy: --horizontal-pod-autoscaler-sync-period.
func (h *HPA) Period() time.Duration { return h.cfg.SyncPeriod }

// Replicas implements sim.Policy.
func (h *HPA) Replicas() int32 { return h.replicas }

// Wake implements sim.Policy: the HPA acts on its sync period only.
func (h *HPA) Wake() time.Time { return time.Time{} }

// Sync implements sim.Policy: the Deployment matches its replicas at once.
func (h *HPA) Sync(p *sim.Pool) { scaleDeployment(p, h.replicas) }

// Step is one reconcileAutoscaler: the counts come from the scale and the
// pod informer, fresh; the metrics from their source (Pool.Metrics).
func (h *HPA) Step(p *sim.Pool) {
	o := p.Observe()
	h.replicas = h.reconcile(p.Now(), h.replicas, int32(o.Workers()), int32(o.Ready()), h.metricValues(p.Metrics())...)
	scaleDeployment(p, h.replicas)
}

// metricValues are the values of the HPA's metrics when the workers are
// as o says.
func (h *HPA) metricValues(o sim.Observation) []float64 {
	out := make([]float64, len(h.cfg.Metrics))
	for i, m := range h.cfg.Metrics {
		out[i] = m.Read(o)
	}
	return out
}

// reconcile follows horizontal.go's reconcileAutoscaler for one External
// metric: recordInitialRecommendation; a count outside [min, max] is
// brought back without metrics; otherwise the metric's proposal is
// normalized by normalizeDesiredReplicas, or with a behavior by
// normalizeDesiredReplicasWithBehaviors; a rescale is then stored as a
// scale event (storeScaleEvent). A count of 0 disables scaling (the
// HPAScaleToZero gate is off by default).
func (h *HPA) reconcile(now time.Time, current, statusReplicas, ready int32, values ...float64) int32 {
	h.recordInitialRecommendation(now, current)
	desired := h.desiredReplicas(now, current, statusReplicas, ready, values)
	if desired != current {
		h.storeScaleEvent(now, current, desired)
	}
	return desired
}

func (h *HPA) desiredReplicas(now time.Time, current, statusReplicas, ready int32, values []float64) int32 {
	switch {
	case current == 0:
		return 0
	case current > h.cfg.Max:
		return h.cfg.Max
	case current < h.cfg.Min:
		return h.cfg.Min
	}
	proposal, ok := h.computeReplicasForMetrics(current, statusReplicas, ready, values)
	if !ok {
		return current // FailedComputeMetricsReplicas: nothing changes
	}
	if h.cfg.Behavior != nil {
		return h.normalizeDesiredReplicasWithBehaviors(now, current, proposal)
	}
	return h.normalizeDesiredReplicas(now, current, proposal)
}

// recordInitialRecommendation follows horizontal.go's function of the
// same name: the first reconcile remembers the current count.
func (h *HPA) recordInitialRecommendation(now time.Time, current int32) {
	if h.recs == nil {
		h.recs = []timestampedRecommendation{{current, now}}
	}
}

// computeReplicasForMetrics follows horizontal.go's function of the same
// name: the largest proposal of the valid metrics; when all are invalid,
// or some are and the largest would scale down, nothing is proposed.
func (h *HPA) computeReplicasForMetrics(current, statusReplicas, ready int32, values []float64) (int32, bool) {
	var replicas int32
	invalid := 0
	for i, m := range h.cfg.Metrics {
		if i >= len(values) {
			invalid++
			continue
		}
		proposal, ok := h.externalReplicas(m, current, statusReplicas, ready, values[i])
		if !ok {
			invalid++
			continue
		}
		if replicas == 0 || proposal > replicas {
			replicas = proposal
		}
	}
	if invalid >= len(h.cfg.Metrics) || (invalid > 0 && replicas < current) {
		return 0, false
	}
	return replicas, true
}

// externalReplicas follows replica_calculator.go: GetExternalMetricReplicas
// for a value target, GetExternalPerPodMetricReplicas for an averageValue
// target. Values go through milli-units, as the metrics API's quantities do.
func (h *HPA) externalReplicas(m ExternalMetric, current, statusReplicas, ready int32, metric float64) (int32, bool) {
	usage := milli(metric)
	target := milli(m.Target)
	if target <= 0 {
		return 0, false
	}
	tol := h.cfg.tolerances()
	if m.AverageValue {
		return externalPerPodReplicas(statusReplicas, usage, target, tol), true
	}
	return usageRatioReplicaCount(current, ready, float64(usage)/float64(target), tol)
}

func milli(v float64) int64 { return int64(math.Round(v * 1000)) }

// usageRatioReplicaCount follows replica_calculator.go's
// getUsageRatioReplicaCount: within the tolerance the count stays;
// otherwise it is ceil(ratio × Ready pods), not × the current count. No
// pod at all is an error.
func usageRatioReplicaCount(current, ready int32, ratio float64, tolerance hpaTolerances) (int32, bool) {
	if current == 0 {
		return int32(math.Ceil(ratio)), true
	}
	if tolerance.isWithin(ratio) {
		return current, true
	}
	f := ratio * float64(ready)
	if f > math.MaxInt32 {
		return math.MaxInt32, true
	}
	return int32(math.Ceil(f)), true
}

// externalPerPodReplicas follows replica_calculator.go's
// GetExternalPerPodMetricReplicas: the ratio is usage over target × the
// pods of the scale's status; outside the tolerance the count is
// ceil(usage / target).
func externalPerPodReplicas(statusReplicas int32, usage, target int64, tolerance hpaTolerances) int32 {
	if statusReplicas <= 0 {
		return int32(math.Ceil(float64(usage) / float64(target)))
	}
	ratio := float64(usage) / (float64(target) * float64(statusReplicas))
	if tolerance.isWithin(ratio) {
		return statusReplicas
	}
	return int32(min(math.Ceil(float64(usage)/float64(target)), math.MaxInt32))
}

// normalizeDesiredReplicas follows horizontal.go's function of the same
// name: stabilizeRecommendation, then convertDesiredReplicasWithRules.
func (h *HPA) normalizeDesiredReplicas(now time.Time, current, proposal int32) int32 {
	stabilized := h.stabilizeRecommendation(now, proposal)
	return convertDesiredReplicasWithRules(current, stabilized, h.cfg.Min, h.cfg.Max)
}

// stabilizeRecommendation follows horizontal.go's function of the same
// name: the result is the highest recommendation within the window,
// including this one; this one replaces one sample older than the window
// (the last found), or is appended. A sample exactly one window old is
// out of it. In virtual time the syncs fall exactly every period, and the
// sample of 20 syncs ago sits on the cutoff, where horizontal.go's
// rec.timestamp.Before(cutoff) would keep it; on a cluster it never does:
// each sync starts a full period after the last one ended (the queue's
// FixedItemIntervalRateLimiter) and reads time.Now() for the cutoff before
// it stamps its own sample, so 20 syncs always span more than the window.
// Kept, the model would give the HPA a window one sync longer than it has.
func (h *HPA) stabilizeRecommendation(now time.Time, proposal int32) int32 {
	maxRec := proposal
	foundOld, oldIndex := false, 0
	cutoff := now.Add(-h.cfg.DownscaleStabilization)
	for i, rec := range h.recs {
		if !rec.timestamp.After(cutoff) {
			foundOld, oldIndex = true, i
		} else if rec.recommendation > maxRec {
			maxRec = rec.recommendation
		}
	}
	if foundOld {
		h.recs[oldIndex] = timestampedRecommendation{proposal, now}
	} else {
		h.recs = append(h.recs, timestampedRecommendation{proposal, now})
	}
	return maxRec
}

// convertDesiredReplicasWithRules follows horizontal.go's function of the
// same name: at least minReplicas, and at most the lower of maxReplicas
// and calculateScaleUpLimit (max(2 × current, 4)).
func convertDesiredReplicasWithRules(current, desired, minReplicas, maxReplicas int32) int32 {
	maximum := maxReplicas
	if limit := calculateScaleUpLimit(current); maxReplicas > limit {
		maximum = limit
	}
	switch {
	case desired < minReplicas:
		return minReplicas
	case desired > maximum:
		return maximum
	}
	return desired
}

// calculateScaleUpLimit follows horizontal.go's function of the same name.
func calculateScaleUpLimit(current int32) int32 {
	return int32(math.Max(hpaScaleUpLimitFactor*float64(current), hpaScaleUpLimitMinimum))
}

// scaleDeployment makes the pool match replicas as a Deployment's
// ReplicaSet does: new pods at once, and on scale-in the pods that
// replicaSetVictims (or the pool's DeploymentVictims) ranks first are
// deleted whatever they are doing; each
// gets the pods' grace period to finish its requests (Pool.Delete) and
// loses what it cannot finish within it.
func scaleDeployment(p *sim.Pool, replicas int32) {
	live := len(p.Workers())
	switch diff := int(replicas) - live; {
	case diff > 0:
		p.Add(diff)
	case diff < 0:
		for _, w := range deploymentVictims(p)[:-diff] {
			p.Delete(w)
		}
	}
}

// logarithmicRankDiff follows controller_utils.go's function of the same name.
func logarithmicRankDiff(t1, t2, now time.Time) int64 {
	d1, d2 := now.Sub(t1), now.Sub(t2)
	r1, r2 := int64(-1), int64(-1)
	if d1 > 0 {
		r1 = int64(math.Log2(float64(d1)))
	}
	if d2 > 0 {
		r2 = int64(math.Log2(float64(d2)))
	}
	return r1 - r2
}

// uid stands in for a pod's random UID: a hash of its name, so that ties
// break in an order unrelated to age, yet the same in every run.
func uid(w *sim.Worker) uint64 {
	h := fnv.New64a()
	h.Write([]byte(w.Name))
	return h.Sum64()
}
