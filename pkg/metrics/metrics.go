// Package metrics defines the controller's Prometheus metrics. They are
// registered in component-base's legacy registry, next to the workqueue and
// client-go metrics, and served by --metrics-bind-address.
package metrics

import (
	"net/http"
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	// Registers workqueue depth, latency and retries for every named queue.
	_ "k8s.io/component-base/metrics/prometheus/workqueue"
	// Registers client-go's request latency and result metrics.
	_ "k8s.io/component-base/metrics/prometheus/restclient"
)

const namespace = "gputask"

var (
	// ReconcileTotal counts syncs by controller and result (success, error).
	ReconcileTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "reconcile_total",
		Help:           "Syncs by controller and result (success or error).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"controller", "result"})

	// ReconcileDuration observes how long one sync takes, by controller.
	ReconcileDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      namespace,
		Name:           "reconcile_duration_seconds",
		Help:           "Duration of one sync, by controller.",
		Buckets:        metrics.ExponentialBuckets(0.0005, 2, 16),
		StabilityLevel: metrics.ALPHA,
	}, []string{"controller"})

	// LoadIndex is the last load index read for a set's metric.
	LoadIndex = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "taskset_load_index",
		Help:           "Last load index read, by set and metric.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"namespace", "taskset", "metric"})

	// DesiredReplicas is the autoscaler's last desired count for a set.
	DesiredReplicas = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "taskset_desired_replicas",
		Help:           "Desired task count last computed by the autoscaler, by set.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"namespace", "taskset"})

	// CurrentReplicas is the number of tasks a set owns.
	CurrentReplicas = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "taskset_current_replicas",
		Help:           "Tasks a set owns that are not being deleted, by set.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"namespace", "taskset"})

	// Nodes is the number of distinct nodes holding a set's tasks
	// (status.nodes).
	Nodes = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "taskset_nodes",
		Help:           "Distinct nodes that hold a set's tasks (status.nodes), by set.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"namespace", "taskset"})

	// ScalingDecisions counts autoscaler decisions by direction (up, down, hold) and reason.
	ScalingDecisions = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "taskset_scaling_decisions_total",
		Help:           "Autoscaler decisions, by set, direction (up, down, hold) and reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"namespace", "taskset", "direction", "reason"})

	// LoadIndexErrors counts failed load-index reads by set, metric and
	// class of failure (loadindex.Class: Unreachable, TLS, HTTP4xx, HTTP5xx,
	// InvalidAnswer, NotANumber, RefusedByPolicy, InvalidMetricSpec).
	LoadIndexErrors = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "taskset_load_index_errors_total",
		Help:           "Failed load-index reads, by set, metric and class of failure.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"namespace", "taskset", "metric", "class"})

	// Reschedules counts pods replaced by the rescheduler, by reason.
	Reschedules = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "task_reschedules_total",
		Help:           "Task pods replaced so that the scheduler places them again, by reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
)

var registerOnce sync.Once

// Register adds the metrics above to the legacy registry. It is safe to call
// more than once.
func Register() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(
			ReconcileTotal, ReconcileDuration,
			LoadIndex, DesiredReplicas, CurrentReplicas, Nodes,
			ScalingDecisions, LoadIndexErrors, Reschedules,
		)
	})
}

// Handler serves every registered metric in the Prometheus text format.
func Handler() http.Handler {
	return legacyregistry.Handler()
}

// ObserveReconcile records one sync of controller: how long it took and
// whether it failed. Each controller calls it from processNextWorkItem.
func ObserveReconcile(controller string, took time.Duration, err error) {
	result := "success"
	if err != nil {
		result = "error"
	}
	ReconcileTotal.WithLabelValues(controller, result).Inc()
	ReconcileDuration.WithLabelValues(controller).Observe(took.Seconds())
}
