package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/loadindex"
	"github.com/gputask/gputask-controller/pkg/metrics"
	"github.com/gputask/gputask-controller/pkg/scaling"
	"github.com/gputask/gputask-controller/pkg/taskindex"
)

// errReplicasChanged means someone else scaled the set while it was being
// evaluated; the decision was made for a count that no longer holds.
var errReplicasChanged = errors.New("replicas changed during evaluation")

// evaluate decides from the set's latest load-index reading, scales and
// reports. Without a reading it starts one and returns: reads never hold a
// worker (reads.go).
func (c *Controller) evaluate(ctx context.Context, set *gputaskv1.GPUTaskSet) error {
	logger := klog.FromContext(ctx)
	now := c.clock.Now()
	key := cache.MetaObjectToName(set)

	state, sources, configErrs := c.sourcesFor(ctx, key, set, now)
	readings, readAt, ok := c.takeReading(ctx, key, set, state, sources, configErrs)
	if !ok {
		// The set's read is on its way; its end queues the set again.
		logger.V(4).Info("Waiting for the load-index reading")
		return nil
	}

	var capacity *int32
	var fit Capacity
	if set.Spec.Autoscaling.CapacityAware {
		var err error
		if fit, err = c.capacity(ctx, set); err != nil {
			return fmt.Errorf("computing GPU capacity: %w", err)
		}
		capacity = &fit.Tasks
	}

	// The last step gates every change of the count, so it is read before
	// anything is decided; see scaling.NextStep.
	last := lastStep(set, state.lastStep)
	tasks, err := taskindex.OfSet(c.tasksIndexer, set)
	if err != nil {
		return fmt.Errorf("listing tasks: %w", err)
	}
	st := c.startup(set, tasks, last, now, fit.waitsForAdmission)
	c.warnExpired(set, state, st.Expired)

	in := scaling.InputsFor(set, now, readings, capacity, state.recommendations)
	in.LastScaleTime, in.Starting, in.CapacityLimit = last, st.Starting, fit.Limit
	// Read by the policies that look ahead and learn (SLO); the others
	// leave them be and give back a zero Queue.
	in.Startup = scaling.StartupOf(tasks, scaling.StartupTimeoutOf(set.Spec.Autoscaling))
	in.StartingFor = st.ServeFor(in.Startup, scaling.SlowestStartupOf(tasks, scaling.StartupTimeoutOf(set.Spec.Autoscaling)))
	in.Queue = state.queue
	var engineErr error
	if in.Engine, engineErr = c.engineOf(ctx, set, state); engineErr != nil {
		in.EngineUnavailable = engineErr.Error()
	}
	d := scaling.Decide(in)
	state.recommendations = d.Recommendations
	// Kept whatever becomes of the writes below: the reading it learned
	// from is used up. Zero for the other policies, so a set that comes
	// back to the SLO policy starts afresh.
	state.queue = d.Queue
	state.retryAfter = d.RetryAfter
	logger.V(4).Info("Decided", "from", in.Current, "to", d.Desired, "reason", d.Reason, "message", d.Message,
		"starting", st.Starting, "lastStep", last)

	c.recordMetrics(ctx, set, in, d)
	written, scaleErr := c.scale(ctx, set, in, d)
	scaled := written != nil
	var scaledAt time.Time
	if scaled {
		// Remembered at once, before the status write that persists it may
		// fail: a retry must not step again. Dated by the reading it was
		// decided on, not by the write's end: the next evaluation's read
		// starts one interval after this one's, so the time this read and
		// write took never holds the next step back by as much, which would
		// cost a retry and one more reading (one that the SLO policy
		// learns from, over a sliver of an interval).
		// A read that began before the interval was up (and ended after)
		// dates the step no earlier than the interval allows.
		scaledAt = readAt
		if !last.IsZero() {
			if earliest := last.Add(in.Interval); earliest.After(readAt) {
				scaledAt = earliest
			}
		}
		state.lastStep = scaledAt
		// The events and the status speak of the size just written, which
		// the cached set does not show yet.
		set = set.DeepCopy()
		set.Spec.Replicas = &written.Spec.Replicas
	}
	c.emitEvents(set, in, d, configErrs, scaled, scaleErr)
	if in.EngineUnavailable != "" {
		c.recorder.Event(set, corev1.EventTypeWarning, gputaskv1.ReasonEngineProfileUnavailable, in.EngineUnavailable)
	}
	want := desiredStatus(set, in, d, now, configErrs, scaledAt, scaleErr)
	want.StartingReplicas, want.QueuedReplicas = st.Starting, st.Queued
	if err := c.applyStatus(ctx, set, want); err != nil {
		return errors.Join(scaleErr, err)
	}
	return scaleErr
}

// sourcesFor returns the set's sources, building them when the metric spec
// changed, when the set is new (or was re-created with a new UID), when a
// build failed last time, or when they are older than sourceTTL. A metric
// whose source cannot be built has a nil source and an error instead.
func (c *Controller) sourcesFor(ctx context.Context, key cache.ObjectName, set *gputaskv1.GPUTaskSet, now time.Time) (*setState, []loadindex.Source, []error) {
	c.mu.Lock()
	state := c.sets[key]
	if state == nil || state.uid != string(set.UID) {
		state = &setState{uid: string(set.UID), recommendations: set.Status.Recommendations}
		c.sets[key] = state
	}
	c.mu.Unlock()

	metricSpecs := set.Spec.Autoscaling.Metrics
	errs := make([]error, len(metricSpecs))
	fresh := state.sources != nil && now.Sub(state.builtAt) < sourceTTL &&
		(state.generation == set.Generation || apiequality.Semantic.DeepEqual(state.metrics, metricSpecs))
	if fresh {
		state.generation = set.Generation
		return state, state.sources, errs
	}

	sources := make([]loadindex.Source, len(metricSpecs))
	ok := true
	for i, m := range metricSpecs {
		sources[i], errs[i] = c.opts.NewSource(loadindex.ForSet(ctx, set.Name), m, set.Namespace)
		ok = ok && errs[i] == nil
	}
	state.sources, state.generation, state.builtAt = nil, set.Generation, now
	state.metrics = nil
	if ok {
		// A failed build is retried next time: the missing Secret may exist by then.
		state.sources = sources
		state.metrics = deepCopyMetrics(metricSpecs)
	}
	return state, sources, errs
}

func deepCopyMetrics(in []gputaskv1.MetricSpec) []gputaskv1.MetricSpec {
	out := make([]gputaskv1.MetricSpec, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}

// readAll reads every metric at once; each source bounds its own read with
// its timeout, so one slow endpoint does not delay the others.
func readAll(ctx context.Context, specs []gputaskv1.MetricSpec, sources []loadindex.Source, configErrs []error) []scaling.MetricInput {
	readings := make([]scaling.MetricInput, len(specs))
	var wg sync.WaitGroup
	for i, spec := range specs {
		readings[i] = scaling.MetricFor(spec)
		if configErrs[i] != nil || sources[i] == nil {
			readings[i].Err = configErrs[i]
			if readings[i].Err == nil {
				readings[i].Err = errors.New("no source")
			}
			continue
		}
		wg.Go(func() {
			readings[i].Value, readings[i].Err = sources[i].Read(ctx)
		})
	}
	wg.Wait()
	return readings
}

// currentReplicas is spec.replicas, which defaults to 1.
func currentReplicas(set *gputaskv1.GPUTaskSet) int32 {
	if set.Spec.Replicas == nil {
		return 1
	}
	return *set.Spec.Replicas
}

func (c *Controller) recordMetrics(ctx context.Context, set *gputaskv1.GPUTaskSet, in scaling.Inputs, d scaling.Decision) {
	for _, m := range d.Metrics {
		if m.Err != nil {
			class := loadindex.Class(m.Err)
			metrics.LoadIndexErrors.WithLabelValues(set.Namespace, set.Name, m.Name, class).Inc()
			// Status, events and the metric carry the coarse class only;
			// the precise cause is for the operator's log.
			klog.FromContext(ctx).V(2).Info("Load index read failed", "metric", m.Name, "class", class, "err", loadindex.Detail(m.Err))
			continue
		}
		metrics.LoadIndex.WithLabelValues(set.Namespace, set.Name, m.Name).Set(m.Value)
	}
	metrics.DesiredReplicas.WithLabelValues(set.Namespace, set.Name).Set(float64(d.Desired))
	metrics.ScalingDecisions.WithLabelValues(set.Namespace, set.Name, d.Direction(in.Current), d.Reason).Inc()
}

// acts reports whether the decision may change replicas.
func acts(in scaling.Inputs) bool {
	return !in.DryRun && !in.Paused && !in.Stopped
}

// scale writes the new count through the scale subresource, as kubectl
// scale and the HPA do, so the set controller stays the only writer of the
// rest of the spec.
//
// It returns the Scale the write returned, nil when it wrote nothing.
func (c *Controller) scale(ctx context.Context, set *gputaskv1.GPUTaskSet, in scaling.Inputs, d scaling.Decision) (*autoscalingv1.Scale, error) {
	if !acts(in) || d.Desired == in.Current {
		return nil, nil
	}
	sets := c.gputaskclientset.GputaskV1().GPUTaskSets(set.Namespace)
	var written *autoscalingv1.Scale
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sc, err := sets.GetScale(ctx, set.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("getting scale: %w", err)
		}
		if sc.Spec.Replicas != in.Current {
			return fmt.Errorf("%w: from %d to %d", errReplicasChanged, in.Current, sc.Spec.Replicas)
		}
		sc.Spec.Replicas = d.Desired
		updated, err := sets.UpdateScale(ctx, set.Name, sc, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("updating scale to %d: %w", d.Desired, err)
		}
		written = updated
		return nil
	})
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).Info("Scaled", "from", in.Current, "to", d.Desired, "reason", d.Reason)
	return written, nil
}

func (c *Controller) emitEvents(set *gputaskv1.GPUTaskSet, in scaling.Inputs, d scaling.Decision, configErrs []error, scaled bool, scaleErr error) {
	for i, m := range d.Metrics {
		switch {
		case configErrs[i] != nil:
			c.recorder.Event(set, corev1.EventTypeWarning, gputaskv1.ReasonInvalidMetricSpec, configErrs[i].Error())
		case m.Err != nil:
			c.recorder.Eventf(set, corev1.EventTypeWarning, gputaskv1.ReasonFailedGetLoadIndex, "metric %q: %v", m.Name, m.Err)
		}
	}
	switch {
	case scaled && d.Desired > in.Current:
		c.recorder.Eventf(set, corev1.EventTypeNormal, gputaskv1.ReasonScaledUp, "New size: %d; reason: %s", d.Desired, d.Message)
	case scaled:
		c.recorder.Eventf(set, corev1.EventTypeNormal, gputaskv1.ReasonScaledDown, "New size: %d; reason: %s", d.Desired, d.Message)
	case scaleErr != nil:
		c.recorder.Eventf(set, corev1.EventTypeWarning, gputaskv1.ReasonFailedRescale, "New size: %d; reason: %s; error: %v", d.Desired, d.Message, scaleErr)
	case in.DryRun && !in.Paused && !in.Stopped && d.Desired != in.Current:
		c.recorder.Eventf(set, corev1.EventTypeNormal, gputaskv1.ReasonDryRunScale, "Would scale from %d to %d; reason: %s", in.Current, d.Desired, d.Message)
	}
}
