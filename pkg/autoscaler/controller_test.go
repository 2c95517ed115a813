package autoscaler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
	applyv1 "github.com/gputask/gputask-controller/pkg/generated/applyconfiguration/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/kueue"
	"github.com/gputask/gputask-controller/pkg/loadindex"
	"github.com/gputask/gputask-controller/pkg/scaling"
)

// fakeSource returns a fixed value or error.
// t0 is the fake clock's start.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

type fakeSource struct {
	value float64
	err   error
}

func (s fakeSource) Read(context.Context) (float64, error) { return s.value, s.err }

// fixture is the shared controllertest fixture with the autoscaler over
// it, its load-index sources faked by metric name.
type fixture struct {
	*controllertest.Fixture

	// readings maps metric name to what its source returns.
	readings map[string]fakeSource
	// blockers makes the source of a metric of that name wait for the
	// channel to close (or its read's context to end) before it answers.
	blockers map[string]chan struct{}
	// readsStarted counts the reads that began.
	readsStarted atomic.Int32
	// sourceErrs maps metric name to a source build error.
	sourceErrs map[string]error
	mu         sync.Mutex
	builds     int

	// scaleReplicas is what the scale subresource reports as spec.replicas.
	scaleReplicas int32
	// noPreload leaves the informer caches empty, for tests that start the
	// informers: objects already cached would arrive as no-op updates.
	noPreload bool
	// quotas is Kueue's queues, nil as where Kueue is not installed.
	quotas *kueue.Quotas
	// devices is the DRA device cache, nil as where DRA is not served.
	devices DeviceCache
}

func newFixture(t testing.TB) *fixture {
	f := &fixture{Fixture: controllertest.NewFixture(t, t0), readings: map[string]fakeSource{}, sourceErrs: map[string]error{}}
	f.OwnedStatus = ownedStatus
	return f
}

// autoscalerStatusFields are the status fields the autoscaler's field
// manager owns, and autoscalerConditionTypes its conditions.
var (
	autoscalerStatusFields = []string{"loadIndex", "desiredReplicas", "capacityReplicas", "startingReplicas", "queuedReplicas",
		"lastScaleTime", "lastDecision", "metrics", "consecutiveFailures", "burstUntil", "predictive", "recommendations"}
	autoscalerConditionTypes = []string{gputaskv1.ConditionAbleToScale, gputaskv1.ConditionScalingActive,
		gputaskv1.ConditionScalingLimited, gputaskv1.ConditionFallback, gputaskv1.ConditionSpecValid}
)

// ownedStatus is the apply the autoscaler's field manager owns for set:
// its fields that are set, and its conditions; the set controller's
// fields are never in it.
func ownedStatus(obj runtime.Object) any {
	set := obj.(*gputaskv1.GPUTaskSet)
	data, err := json.Marshal(set.Status)
	if err != nil {
		panic(err)
	}
	var all map[string]any
	if err := json.Unmarshal(data, &all); err != nil {
		panic(err)
	}
	status := map[string]any{}
	for _, k := range autoscalerStatusFields {
		if v, ok := all[k]; ok {
			status[k] = v
		}
	}
	var conds []metav1.Condition
	for _, t := range autoscalerConditionTypes {
		if c := meta.FindStatusCondition(set.Status.Conditions, t); c != nil {
			conds = append(conds, *c)
		}
	}
	if conds != nil {
		status["conditions"] = conds
	}
	return map[string]any{
		"apiVersion": gputaskv1.SchemeGroupVersion.String(), "kind": "GPUTaskSet",
		"metadata": map[string]any{"name": set.Name, "namespace": set.Namespace},
		"status":   status,
	}
}

// newSet is a set of replicas tasks of one A100 each, autoscaled on the
// metric "queue", whose status the set controller has written.
func newSet(name string, replicas int32) *gputaskv1.GPUTaskSet {
	return controllertest.Set(name, controllertest.Replicas(replicas),
		controllertest.Template(gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{GPU: "A100", GPUAmount: ptr.To(intstr.FromInt32(1))}}),
		controllertest.Autoscaling(gputaskv1.AutoscalingSpec{
			MinReplicas: ptr.To[int32](1), MaxReplicas: 20,
			Metrics: []gputaskv1.MetricSpec{{Name: "queue", HTTP: &gputaskv1.HTTPSource{URL: "http://127.0.0.1:1/load"}}},
		}),
		controllertest.SetFunc(func(s *gputaskv1.GPUTaskSet) {
			s.Status = gputaskv1.GPUTaskSetStatus{Replicas: replicas, Selector: "gputask.io/taskset=" + name}
		}))
}

// autoscale arranges the usual scene: set in the caches and the API, its
// scale subresource at spec.replicas, and its "queue" metric reading queue.
// It builds the controller over them.
func (f *fixture) autoscale(ctx context.Context, set *gputaskv1.GPUTaskSet, queue fakeSource) *Controller {
	f.Add(set)
	f.scaleReplicas = ptr.Deref(set.Spec.Replicas, 1)
	f.readings["queue"] = queue
	return f.newController(ctx)
}

// newController builds the controller over the fixture's objects.
func (f *fixture) newController(ctx context.Context) *Controller {
	f.T.Helper()
	f.Start()
	f.addScaleReactors()
	c := NewController(ctx, f.KubeClient, f.Client,
		f.Informers.Gputask().V1().GPUTaskSets(), f.Informers.Gputask().V1().GPUTasks(),
		f.KubeInformers.Core().V1().Nodes(), cachedPods{f.KubeInformers.Core().V1().Pods().Lister()},
		Options{Clock: f.Clock, Recorder: f.Recorder, NewSource: f.newSource, Quotas: f.quotas, Devices: f.devices,
			EngineProfiles: f.KubeInformers.Core().V1().ConfigMaps()})
	c.workqueue = f.RecordQueue(c.workqueue)
	f.SyncHandler = c.syncHandler
	if !f.noPreload {
		f.Preload()
	}
	return c
}

// updateSet replaces the set in the cache, as the informer does when it
// delivers a write.

func (f *fixture) newSource(_ context.Context, spec gputaskv1.MetricSpec, _ string) (loadindex.Source, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.builds++
	if err := f.sourceErrs[spec.Name]; err != nil {
		return nil, fmt.Errorf("metric %q: %w", spec.Name, err)
	}
	blocker := f.blockers[spec.Name]
	return sourceFunc(func(ctx context.Context) (float64, error) {
		f.readsStarted.Add(1)
		if blocker != nil {
			select {
			case <-blocker:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		r := f.readings[spec.Name]
		return r.value, r.err
	}), nil
}

type sourceFunc func(context.Context) (float64, error)

func (s sourceFunc) Read(ctx context.Context) (float64, error) { return s(ctx) }

// addScaleReactors serves the scale subresource, which the fake object
// tracker does not know, from scaleReplicas.
func (f *fixture) addScaleReactors() {
	f.Client.PrependReactor("get", "gputasksets", func(action core.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "scale" {
			return false, nil, nil
		}
		get := action.(core.GetAction)
		f.mu.Lock()
		defer f.mu.Unlock()
		return true, &autoscalingv1.Scale{
			ObjectMeta: metav1.ObjectMeta{Name: get.GetName(), Namespace: get.GetNamespace(), ResourceVersion: "7"},
			Spec:       autoscalingv1.ScaleSpec{Replicas: f.scaleReplicas},
		}, nil
	})
	f.Client.PrependReactor("update", "gputasksets", func(action core.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "scale" {
			return false, nil, nil
		}
		sc := action.(core.UpdateAction).GetObject().(*autoscalingv1.Scale)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.scaleReplicas = sc.Spec.Replicas
		return true, sc, nil
	})
}

// sync runs one sync of the set name and returns the delay it queued the
// set's next evaluation after (0 for none) and its error.
//
// A sync that starts a load-index read returns at once; the read's end
// queues the set, and the sync that follows decides. Both run here, and
// CheckActions compares what both did with the expected actions.
func (f *fixture) sync(ctx context.Context, c *Controller, name string) (time.Duration, error) {
	f.T.Helper()
	f.Queue.After()
	key := cache.ObjectName{Namespace: metav1.NamespaceDefault, Name: name}
	err := f.Sync(ctx, key)
	if err == nil && c.readPending(key) {
		if werr := wait.PollUntilContextTimeout(ctx, time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
			return !c.readsInFlight(key) && c.workqueue.Len() > 0, nil
		}); werr != nil {
			f.T.Fatalf("the read of %s did not end: %v", name, werr)
		}
		f.drainQueue(c, key)
		err = c.syncHandler(ctx, key)
	}
	var next time.Duration
	if after := f.Queue.After(); len(after) > 0 {
		next = after[len(after)-1]
	}
	return next, err
}

func (f *fixture) lastStatus() *gputaskv1.GPUTaskSet {
	f.T.Helper()
	actions := f.Client.Actions()
	for i := len(actions) - 1; i >= 0; i-- {
		if controllertest.IsApply(actions[i]) && actions[i].GetSubresource() == "status" {
			// The set as the API server keeps it after the apply: the
			// set controller's fields and the autoscaler's.
			a := actions[i].(core.PatchAction)
			set, err := f.Client.GputaskV1().GPUTaskSets(a.GetNamespace()).Get(context.Background(), a.GetName(), metav1.GetOptions{})
			if err != nil {
				applied := &gputaskv1.GPUTaskSet{}
				controllertest.Applied(f.T, actions[i], applied)
				return applied
			}
			return set
		}
	}
	f.T.Fatal("no status update")
	return nil
}

// syncOK evaluates the set name once and fails the test on an error.
func (f *fixture) syncOK(ctx context.Context, c *Controller, name string) time.Duration {
	f.T.Helper()
	next, err := f.sync(ctx, c, name)
	if err != nil {
		f.T.Fatalf("sync %s: %v", name, err)
	}
	return next
}

// expectScale expects the read and the write of the set's scale
// subresource, to replicas.
func (f *fixture) expectScale(name string, replicas int32) {
	f.Actions = append(f.Actions,
		core.NewGetSubresourceAction(controllertest.SetsResource, metav1.NamespaceDefault, "scale", name),
		core.NewUpdateSubresourceAction(controllertest.SetsResource, "scale", metav1.NamespaceDefault, &autoscalingv1.Scale{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault, ResourceVersion: "7"},
			Spec:       autoscalingv1.ScaleSpec{Replicas: replicas},
		}))
}

// expectStatus expects an apply of the set's status whose content the
// test checks field by field from lastStatus; ExpectApplyStatus checks a
// whole apply.
func (f *fixture) expectStatus(name string) {
	f.Actions = append(f.Actions, controllertest.ApplyAnyStatusAction(controllertest.SetsResource, metav1.NamespaceDefault, name))
}

func (f *fixture) events() []string { return controllertest.Events(f.Recorder) }

func assertCondition(t *testing.T, set *gputaskv1.GPUTaskSet, condType string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	cond := meta.FindStatusCondition(set.Status.Conditions, condType)
	if cond == nil {
		t.Fatalf("condition %s missing: %+v", condType, set.Status.Conditions)
	}
	if cond.Status != status || cond.Reason != reason {
		t.Errorf("condition %s = %s/%s (%s), want %s/%s", condType, cond.Status, cond.Reason, cond.Message, status, reason)
	}
}

func TestScaleUpWritesScaleStatusAndEvent(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	c := f.autoscale(ctx, newSet("web", 5), fakeSource{value: 0.91})

	if next := f.syncOK(ctx, c, "web"); next != scaling.DefaultInterval {
		t.Errorf("next evaluation in %v, want %v", next, scaling.DefaultInterval)
	}
	f.expectScale("web", 8)
	want := newSet("web", 5)
	ts := metav1.NewTime(t0)
	want.Status = gputaskv1.GPUTaskSetStatus{
		LoadIndex: "0.91", DesiredReplicas: ptr.To[int32](8), LastScaleTime: &ts,
		LastDecision: &gputaskv1.ScalingDecision{Time: ts, Inputs: "queue: load=0.91 up=0.8 down=0.5", From: 5, To: 8,
			Reason: scaling.ReasonScaleUpAboveThreshold, Message: "load 0.91 above up threshold 0.8"},
		Metrics:         []gputaskv1.MetricStatus{{Name: "queue", Value: "0.91", DesiredReplicas: ptr.To[int32](8), LastReadTime: &ts}},
		Recommendations: []gputaskv1.Recommendation{{Time: ts, Replicas: 8}},
		Conditions: []metav1.Condition{
			{Type: gputaskv1.ConditionAbleToScale, Status: metav1.ConditionTrue, Reason: ReasonSucceededRescale, Message: "the autoscaler set the size to 8", LastTransitionTime: ts},
			{Type: gputaskv1.ConditionScalingActive, Status: metav1.ConditionTrue, Reason: ReasonValidMetricFound, Message: "the autoscaler read every load index: queue: load=0.91 up=0.8 down=0.5", LastTransitionTime: ts},
			{Type: gputaskv1.ConditionScalingLimited, Status: metav1.ConditionFalse, Reason: ReasonDesiredWithinRange, Message: "the desired count is within the acceptable range", LastTransitionTime: ts},
		},
	}
	f.ExpectApplyStatus(want)
	f.CheckActions()
	if f.scaleReplicas != 8 {
		t.Errorf("scale replicas = %d, want 8", f.scaleReplicas)
	}
	set := f.lastStatus()
	if got := ptr.Deref(set.Status.DesiredReplicas, -1); got != 8 {
		t.Errorf("status.desiredReplicas = %d, want 8", got)
	}
	if set.Status.LastScaleTime == nil || !set.Status.LastScaleTime.Time.Equal(t0) {
		t.Errorf("status.lastScaleTime = %v, want %v", set.Status.LastScaleTime, t0)
	}
	if set.Status.LoadIndex != "0.91" {
		t.Errorf("status.loadIndex = %q, want 0.91", set.Status.LoadIndex)
	}
	d := set.Status.LastDecision
	if d == nil || d.From != 5 || d.To != 8 || d.Reason != scaling.ReasonScaleUpAboveThreshold || d.Inputs != "queue: load=0.91 up=0.8 down=0.5" {
		t.Errorf("status.lastDecision = %+v", d)
	}
	if len(set.Status.Metrics) != 1 || set.Status.Metrics[0].Value != "0.91" || ptr.Deref(set.Status.Metrics[0].DesiredReplicas, 0) != 8 {
		t.Errorf("status.metrics = %+v", set.Status.Metrics)
	}
	// The set controller's fields are left as they were.
	if set.Status.Replicas != 5 || set.Status.Selector != "gputask.io/taskset=web" {
		t.Errorf("set controller's status fields changed: %+v", set.Status)
	}
	assertCondition(t, set, gputaskv1.ConditionAbleToScale, metav1.ConditionTrue, ReasonSucceededRescale)
	assertCondition(t, set, gputaskv1.ConditionScalingActive, metav1.ConditionTrue, ReasonValidMetricFound)
	assertCondition(t, set, gputaskv1.ConditionScalingLimited, metav1.ConditionFalse, ReasonDesiredWithinRange)
	if meta.FindStatusCondition(set.Status.Conditions, gputaskv1.ConditionFallback) != nil {
		t.Error("Fallback condition set without a fallback")
	}
	f.ExpectEvents("Normal ScaledUp New size: 8; reason: load 0.91 above up threshold 0.8")
}

func TestHoldMakesNoScaleWriteAndSteadyStateNoWrites(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	c := f.autoscale(ctx, newSet("web", 5), fakeSource{value: 0.6})

	f.syncOK(ctx, c, "web")
	f.expectStatus("web")
	f.CheckActions()
	set := f.lastStatus()
	if set.Status.LastScaleTime != nil {
		t.Error("lastScaleTime set on a hold")
	}
	assertCondition(t, set, gputaskv1.ConditionAbleToScale, metav1.ConditionTrue, ReasonReadyForNewScale)
	f.ExpectEvents()

	// The informer delivers our own write; the next evaluation, with the same
	// load, must not write anything although the clock moved.
	f.Update(set)
	f.Client.ClearActions()
	f.Clock.Step(30 * time.Second)
	f.syncOK(ctx, c, "web")
	f.CheckActions() // nothing
	if f.builds != 1 {
		t.Errorf("sources built %d times, want once", f.builds)
	}

	// A changed load index is a real change and is written.
	f.readings["queue"] = fakeSource{value: 0.7}
	f.Clock.Step(30 * time.Second)
	f.syncOK(ctx, c, "web")
	f.expectStatus("web")
	f.CheckActions()
}

func TestFailureReportsAndNeverScalesDown(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("web", 5)
	set.Spec.Autoscaling.Metrics = append(set.Spec.Autoscaling.Metrics,
		gputaskv1.MetricSpec{Name: "util", Prometheus: &gputaskv1.PrometheusSource{ServerAddress: "http://127.0.0.1:1", Query: "up"}})
	f.readings["util"] = fakeSource{value: 0.1} // alone, this would scale down
	c := f.autoscale(ctx, set, fakeSource{err: errors.New("GET http://127.0.0.1:1/load: connection refused")})

	f.syncOK(ctx, c, "web")
	f.expectStatus("web")
	f.CheckActions()
	got := f.lastStatus()
	assertCondition(t, got, gputaskv1.ConditionScalingActive, metav1.ConditionFalse, scaling.ReasonFailedGetLoadIndex)
	if got.Status.ConsecutiveFailures != 1 {
		t.Errorf("consecutiveFailures = %d, want 1", got.Status.ConsecutiveFailures)
	}
	if got.Status.LastDecision.Reason != scaling.ReasonFailedGetLoadIndex || got.Status.LastDecision.To != 5 {
		t.Errorf("lastDecision = %+v", got.Status.LastDecision)
	}
	if m := got.Status.Metrics[0]; m.Error == "" || m.Value != "" {
		t.Errorf("failed metric status = %+v", m)
	}
	f.ExpectEvents(`Warning FailedGetLoadIndex metric "queue": GET http://127.0.0.1:1/load: connection refused`)
}

func TestFallbackAfterThreshold(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("web", 5)
	set.Spec.Autoscaling.Fallback = &gputaskv1.Fallback{Replicas: 2}
	set.Status.ConsecutiveFailures = 2
	c := f.autoscale(ctx, set, fakeSource{err: errors.New("timed out")})

	f.syncOK(ctx, c, "web")
	if f.scaleReplicas != 2 {
		t.Errorf("scale replicas = %d, want fallback 2", f.scaleReplicas)
	}
	got := f.lastStatus()
	assertCondition(t, got, gputaskv1.ConditionFallback, metav1.ConditionTrue, scaling.ReasonFallbackReplicas)
	f.ExpectEvents("Warning FailedGetLoadIndex", "Normal ScaledDown New size: 2; reason: load index failed 3 times in a row")
}

func TestInvalidMetricSpec(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	f.sourceErrs["queue"] = errors.New("http.auth.bearerTokenSecretRef: secret default/token not found")
	c := f.autoscale(ctx, newSet("web", 5), fakeSource{})

	f.syncOK(ctx, c, "web")
	got := f.lastStatus()
	assertCondition(t, got, gputaskv1.ConditionScalingActive, metav1.ConditionFalse, gputaskv1.ReasonInvalidMetricSpec)
	f.ExpectEvents(`Warning InvalidMetricSpec metric "queue": http.auth.bearerTokenSecretRef`)

	// A failed build is retried: the Secret may exist by now.
	delete(f.sourceErrs, "queue")
	f.readings["queue"] = fakeSource{value: 0.6}
	f.syncOK(ctx, c, "web")
	if f.builds != 2 {
		t.Errorf("sources built %d times, want 2", f.builds)
	}
	assertCondition(t, f.lastStatus(), gputaskv1.ConditionScalingActive, metav1.ConditionTrue, ReasonValidMetricFound)
}

func TestDryRunWritesStatusButNoScale(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("web", 5)
	set.Spec.Autoscaling.DryRun = true
	c := f.autoscale(ctx, set, fakeSource{value: 0.95})

	f.syncOK(ctx, c, "web")
	f.expectStatus("web")
	f.CheckActions()
	got := f.lastStatus()
	if ptr.Deref(got.Status.DesiredReplicas, 0) != 8 || got.Status.LastScaleTime != nil {
		t.Errorf("dry run status: desired %v, lastScaleTime %v", got.Status.DesiredReplicas, got.Status.LastScaleTime)
	}
	f.ExpectEvents("Normal DryRunScale Would scale from 5 to 8")
}

func TestPausedAndStoppedMakeNoScaleWrite(t *testing.T) {
	reasons := map[string]string{gputaskv1.AnnotationPaused: ReasonScalingDisabled, gputaskv1.AnnotationStopped: scaling.ReasonStopped}
	for _, annotation := range []string{gputaskv1.AnnotationPaused, gputaskv1.AnnotationStopped} {
		t.Run(annotation, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			set := newSet("web", 5)
			set.Annotations = map[string]string{annotation: "true"}
			c := f.autoscale(ctx, set, fakeSource{value: 0.95})

			f.syncOK(ctx, c, "web")
			f.expectStatus("web")
			f.CheckActions()
			got := f.lastStatus()
			assertCondition(t, got, gputaskv1.ConditionAbleToScale, metav1.ConditionFalse, reasons[annotation])
			if !strings.Contains(got.Status.LastDecision.Message, "would scale to 8") {
				t.Errorf("lastDecision message = %q", got.Status.LastDecision.Message)
			}
		})
	}
}

func TestStatusConflictKeepsOtherWritersFields(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("web", 5)
	c := f.autoscale(ctx, set, fakeSource{value: 0.6})

	// Meanwhile the set controller wrote its own fields.
	fresh := set.DeepCopy()
	fresh.Status.RunningReplicas = 4
	fresh.Status.HeldBackReplicas = 1
	fresh.Status.Conditions = []metav1.Condition{{Type: gputaskv1.ConditionReplicaFailure, Status: metav1.ConditionTrue, Reason: "FailedCreate", LastTransitionTime: metav1.NewTime(t0)}}
	if err := f.Client.Tracker().Update(gputaskv1.SchemeGroupVersion.WithResource("gputasksets"), fresh, fresh.Namespace); err != nil {
		t.Fatalf("tracker update: %v", err)
	}
	conflicts := 0
	f.Client.PrependReactor("update", "gputasksets", func(action core.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() == "status" && conflicts == 0 {
			conflicts++
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: gputaskv1.SchemeGroupVersion.Group, Resource: "gputasksets"}, "web", errors.New("stale"))
		}
		return false, nil, nil
	})

	f.syncOK(ctx, c, "web")
	got := f.lastStatus()
	if got.Status.RunningReplicas != 4 || got.Status.HeldBackReplicas != 1 {
		t.Errorf("set controller's fields lost: %+v", got.Status)
	}
	assertCondition(t, got, gputaskv1.ConditionReplicaFailure, metav1.ConditionTrue, "FailedCreate")
	assertCondition(t, got, gputaskv1.ConditionScalingActive, metav1.ConditionTrue, ReasonValidMetricFound)
}

func TestReplicasChangedDuringEvaluation(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	c := f.autoscale(ctx, newSet("web", 5), fakeSource{value: 0.95})
	f.scaleReplicas = 9 // someone ran kubectl scale after the cache was filled

	next, err := f.sync(ctx, c, "web")
	if !errors.Is(err, errReplicasChanged) {
		t.Fatalf("sync error = %v, want errReplicasChanged", err)
	}
	if next != scaling.DefaultInterval {
		t.Errorf("next = %v, want the regular interval as well", next)
	}
	if f.scaleReplicas != 9 {
		t.Errorf("overwrote someone else's scale: replicas = %d", f.scaleReplicas)
	}
	assertCondition(t, f.lastStatus(), gputaskv1.ConditionAbleToScale, metav1.ConditionFalse, ReasonFailedUpdateScale)
}

func TestSetsWithoutAutoscalingAreIgnored(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("plain", 3)
	set.Spec.Autoscaling = nil
	f.Add(set)
	c := f.newController(ctx)
	next, err := f.sync(ctx, c, "plain")
	if err != nil || next != 0 {
		t.Fatalf("sync = %v, %v; want no requeue", next, err)
	}
	f.CheckActions()
	if next, err := f.sync(ctx, c, "gone"); err != nil || next != 0 {
		t.Errorf("sync of a missing set = %v, %v", next, err)
	}
}

func TestRemovingAutoscalingClearsItsStatus(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("web", 3)
	set.Status.Replicas = 3
	c := f.autoscale(ctx, set, fakeSource{value: 0.6})
	f.syncOK(ctx, c, "web")
	if got := f.lastStatus(); got.Status.LoadIndex == "" || got.Status.DesiredReplicas == nil {
		t.Fatalf("status = %+v, want the autoscaler's fields written", got.Status)
	}

	// The set controller reports a failure of its own, and the user
	// removes autoscaling.
	sets := f.Client.GputaskV1().GPUTaskSets(set.Namespace)
	cur, err := sets.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sets.ApplyStatus(ctx, applyv1.GPUTaskSet("web", set.Namespace).WithStatus(applyv1.GPUTaskSetStatus().
		WithReplicas(3).WithConditions(metav1apply.Condition().WithType(gputaskv1.ConditionReplicaFailure).
		WithStatus(metav1.ConditionTrue).WithReason("FailedCreate").WithMessage("m").WithLastTransitionTime(metav1.NewTime(t0)))),
		metav1.ApplyOptions{FieldManager: "gputaskset-controller", Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if cur, err = sets.Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	cur.Spec.Autoscaling = nil
	if cur, err = sets.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	controllertest.Update(t, f.Informers.Gputask().V1().GPUTaskSets().Informer().GetIndexer(), cur)

	if next, err := f.sync(ctx, c, "web"); err != nil || next != 0 {
		t.Fatalf("sync = %v, %v; want no requeue", next, err)
	}
	got := f.lastStatus()
	if got.Status.LoadIndex != "" || got.Status.DesiredReplicas != nil || got.Status.Replicas != 3 {
		t.Errorf("status = %+v, want autoscaler fields cleared and the rest kept", got.Status)
	}
	if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != gputaskv1.ConditionReplicaFailure {
		t.Errorf("conditions = %+v, want only ReplicaFailure", got.Status.Conditions)
	}
}

func TestSourcesRebuiltOnMetricSpecChange(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("web", 5)
	c := f.autoscale(ctx, set, fakeSource{value: 0.6})

	f.syncOK(ctx, c, "web")
	// A replicas change bumps the generation but keeps the sources.
	scaled := set.DeepCopy()
	scaled.Generation, scaled.Spec.Replicas = 2, ptr.To[int32](6)
	f.scaleReplicas = 6
	f.Update(scaled)
	f.syncOK(ctx, c, "web")
	if f.builds != 1 {
		t.Errorf("builds after a replicas change = %d, want 1", f.builds)
	}
	changed := scaled.DeepCopy()
	changed.Generation = 3
	changed.Spec.Autoscaling.Metrics[0].HTTP.URL = "http://127.0.0.1:2/load"
	f.Update(changed)
	f.syncOK(ctx, c, "web")
	if f.builds != 2 {
		t.Errorf("builds after a metric change = %d, want 2", f.builds)
	}
	// Sources also expire, to pick up rotated Secrets.
	f.Clock.Step(sourceTTL)
	f.syncOK(ctx, c, "web")
	if f.builds != 3 {
		t.Errorf("builds after the TTL = %d, want 3", f.builds)
	}
}

func TestStabilizationAcrossEvaluations(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	c := f.autoscale(ctx, newSet("web", 5), fakeSource{value: 0.6})

	f.syncOK(ctx, c, "web")
	f.Update(f.lastStatus())
	// Load drops a minute later: the recommendation of 5 is still in the
	// window, so nothing is removed.
	f.readings["queue"] = fakeSource{value: 0.1}
	f.Clock.Step(time.Minute)
	f.syncOK(ctx, c, "web")
	if f.scaleReplicas != 5 {
		t.Fatalf("scaled down to %d inside the stabilization window", f.scaleReplicas)
	}
	got := f.lastStatus()
	if got.Status.LastDecision.Reason != scaling.ReasonScaleDownStabilized {
		t.Errorf("reason = %s, want %s", got.Status.LastDecision.Reason, scaling.ReasonScaleDownStabilized)
	}
	f.Update(got)
	// Past the window the scale-down happens.
	f.Clock.Step(5 * time.Minute)
	f.syncOK(ctx, c, "web")
	if f.scaleReplicas != 4 {
		t.Errorf("scale replicas = %d after the window, want 4", f.scaleReplicas)
	}
}

func TestUpdateHandlerOnlyEnqueuesAutoscalingChanges(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	c := f.newController(ctx)
	defer c.workqueue.ShutDown()
	old := newSet("web", 5)

	statusOnly := old.DeepCopy()
	statusOnly.Status.LoadIndex = "0.5"
	replicasOnly := old.DeepCopy()
	replicasOnly.Spec.Replicas = ptr.To[int32](9)
	c.updateSet(klog.Background(), old, statusOnly)
	c.updateSet(klog.Background(), old, replicasOnly)
	if n := c.workqueue.Len(); n != 0 {
		t.Fatalf("queue length = %d after status/replicas changes, want 0", n)
	}
	paused := old.DeepCopy()
	paused.Annotations = map[string]string{gputaskv1.AnnotationPaused: "true"}
	c.updateSet(klog.Background(), old, paused)
	if n := c.workqueue.Len(); n != 1 {
		t.Fatalf("queue length = %d after pausing, want 1", n)
	}
	plain := old.DeepCopy()
	plain.Spec.Autoscaling = nil
	c.addSet(klog.Background(), plain)
	if n := c.workqueue.Len(); n != 1 {
		t.Errorf("a set without autoscaling was enqueued")
	}
}

func TestRunScalesAndStopsWithContext(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := newFixture(t)
	f.noPreload = true
	c := f.autoscale(ctx, newSet("web", 5), fakeSource{value: 0.91})
	f.Informers.Start(ctx.Done())
	f.KubeInformers.Start(ctx.Done())

	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 2) }()
	scaled := func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.scaleReplicas == 8
	}
	for deadline := time.Now().Add(10 * time.Second); !scaled(); {
		if time.Now().After(deadline) {
			t.Fatal("Run did not scale the set up within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	controllertest.ExpectStopped(t, done, "Run()")
	f.Informers.Shutdown()
	f.KubeInformers.Shutdown()
}

func TestDeleteForgetsTheSet(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("web", 5)
	c := f.autoscale(ctx, set, fakeSource{value: 0.6})
	f.syncOK(ctx, c, "web")
	if len(c.sets) != 1 {
		t.Fatalf("cached sets = %d, want 1", len(c.sets))
	}
	c.deleteSet(klog.Background(), cache.DeletedFinalStateUnknown{Key: "default/web", Obj: set})
	if len(c.sets) != 0 {
		t.Errorf("cached sets = %d after delete, want 0", len(c.sets))
	}
}

// drainQueue takes key off the queue, where the end of its read put it, as
// the worker that runs the next sync would.
func (f *fixture) drainQueue(c *Controller, key cache.ObjectName) {
	for c.workqueue.Len() > 0 {
		k, _ := c.workqueue.Get()
		c.workqueue.Done(k)
		if k != key {
			f.T.Fatalf("queue held %v, want only %v", k, key)
		}
	}
}
