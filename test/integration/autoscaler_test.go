package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/autoscaler"
	informers "github.com/gputask/gputask-controller/pkg/generated/informers/externalversions"
	"github.com/gputask/gputask-controller/pkg/loadindex"
	"github.com/gputask/gputask-controller/pkg/scaling"
)

// TestAutoscalerOnRealAPIServer runs the autoscaler in-process against the
// package's kube-apiserver with the CRDs installed, to prove what fakes
// cannot: the scale subresource, the status subresource and events for
// GPUTaskSets. The package's gputask-controller is stopped first: it would
// scale the set too, and create its tasks.
//
//	go test -count=1 -run TestAutoscalerOnRealAPIServer ./test/integration/
func TestAutoscalerOnRealAPIServer(t *testing.T) {
	withoutController(t)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ns := cp.NamespaceT(t)

	var load atomic.Value
	load.Store("0.9")
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"data":{"load_balance":%s}}`, load.Load())
	}))
	defer backend.Close()

	sets := cp.GPUTask.GputaskV1().GPUTaskSets(ns)
	_, err := sets.Create(ctx, &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To[int32](2),
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{GPU: "A100"}},
			Autoscaling: &gputaskv1.AutoscalingSpec{
				MinReplicas: ptr.To[int32](1), MaxReplicas: 10,
				Interval:                     &gputaskv1.Duration{Duration: time.Second},
				ScaleDownStabilizationWindow: &gputaskv1.Duration{},
				// No set controller runs here, so no task is ever created
				// or Ready: a short startup timeout keeps the tasks asked
				// for from holding scale-up back.
				StartupTimeout: &gputaskv1.Duration{Duration: time.Second},
				Metrics:        []gputaskv1.MetricSpec{{Name: "queue", HTTP: &gputaskv1.HTTPSource{URL: backend.URL}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the set: %v", err)
	}

	// Only the test's namespace: other tests' sets are not this one's.
	inf := informers.NewSharedInformerFactoryWithOptions(cp.GPUTask, 0, informers.WithNamespace(ns))
	runAutoscaler(ctx, t, inf, autoscaler.Options{
		// The backend serves on loopback, which the default policy refuses.
		NewSource: loadindex.Factory{Destinations: &loadindex.DestinationPolicy{AllowLoopback: true}}.New,
	})

	waitFor := func(what string, cond func(*gputaskv1.GPUTaskSet) bool) *gputaskv1.GPUTaskSet {
		t.Helper()
		var last *gputaskv1.GPUTaskSet
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			s, err := sets.Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			last = s
			return cond(s), nil
		})
		if err != nil {
			t.Fatalf("waiting for %s: %v; last status %+v", what, err, last.Status)
		}
		return last
	}

	// High load: 2 → 5 through the scale subresource.
	set := waitFor("scale-up to 5", func(s *gputaskv1.GPUTaskSet) bool {
		return ptr.Deref(s.Spec.Replicas, 0) == 5 && s.Status.LastScaleTime != nil
	})
	if cond := meta.FindStatusCondition(set.Status.Conditions, gputaskv1.ConditionScalingActive); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("ScalingActive = %+v, want True", cond)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		events, err := cp.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=ScaledUp"})
		return err == nil && len(events.Items) > 0, err
	}); err != nil {
		t.Errorf("no ScaledUp event: %v", err)
	}

	// Steady load: no writes at all, so the resourceVersion stays put.
	load.Store("0.6")
	// Steady once the tasks the step asked for are no longer counted as
	// starting (the startup timeout is one interval here).
	set = waitFor("a hold", func(s *gputaskv1.GPUTaskSet) bool {
		return s.Status.LastDecision != nil && s.Status.LastDecision.Reason == scaling.ReasonWithinThresholds &&
			s.Status.StartingReplicas == 0
	})
	steadyRV := set.ResourceVersion
	time.Sleep(3 * time.Second) // three intervals
	if now := waitFor("the set", func(*gputaskv1.GPUTaskSet) bool { return true }); now.ResourceVersion != steadyRV {
		t.Errorf("steady state wrote the set: resourceVersion %s → %s", steadyRV, now.ResourceVersion)
	}

	// Low load: down to minReplicas, one step per interval.
	load.Store("0.1")
	waitFor("scale-down to 1", func(s *gputaskv1.GPUTaskSet) bool {
		return ptr.Deref(s.Spec.Replicas, 0) == 1 && s.Status.LastDecision != nil &&
			s.Status.LastDecision.Reason == scaling.ReasonTooFewReplicas
	})

	// A broken endpoint never scales down and reports why.
	backend.Close()
	set = waitFor("FailedGetLoadIndex", func(s *gputaskv1.GPUTaskSet) bool {
		cond := meta.FindStatusCondition(s.Status.Conditions, gputaskv1.ConditionScalingActive)
		return cond != nil && cond.Reason == scaling.ReasonFailedGetLoadIndex
	})
	if got := ptr.Deref(set.Spec.Replicas, 0); got != 1 {
		t.Errorf("replicas = %d after failures, want 1", got)
	}
}

// TestSLOAutoscalerOnRealAPIServer runs an SLO set whose role metrics an
// HTTP endpoint serves: the autoscaler reads each by its role and scales to
// the count the pure decision gives for the same readings, and reports the
// model's inputs in status.
//
//	go test -count=1 -run TestSLOAutoscalerOnRealAPIServer ./test/integration/
func TestSLOAutoscalerOnRealAPIServer(t *testing.T) {
	withoutController(t)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ns := cp.NamespaceT(t)

	readings := map[string]string{"/completions": "2", "/running": "20"}
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"data":{"load_balance":%s}}`, readings[r.URL.Path])
	}))
	defer backend.Close()

	slo := &gputaskv1.SLOSpec{Wait: &gputaskv1.Duration{Duration: time.Second}, Percentile: ptr.To(resource.MustParse("95")), SlotsPerTask: 8}
	sets := cp.GPUTask.GputaskV1().GPUTaskSets(ns)
	_, err := sets.Create(ctx, &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: "llm"},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To[int32](1),
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{GPU: "A100"}},
			Autoscaling: &gputaskv1.AutoscalingSpec{
				MinReplicas: ptr.To[int32](1), MaxReplicas: 20,
				// One decision within the test: the next one would learn
				// from this one's reading, which the pure decision below
				// does not have.
				Interval:       &gputaskv1.Duration{Duration: 10 * time.Minute},
				StartupTimeout: &gputaskv1.Duration{Duration: 2 * time.Minute},
				Policy:         gputaskv1.ScalingPolicy{Type: gputaskv1.SLOPolicy, SLO: slo},
				Metrics: []gputaskv1.MetricSpec{
					{Name: "completions", Role: gputaskv1.RoleCompletions, HTTP: &gputaskv1.HTTPSource{URL: backend.URL + "/completions"}},
					{Name: "running", Role: gputaskv1.RoleRunning, HTTP: &gputaskv1.HTTPSource{URL: backend.URL + "/running"}},
				},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the set: %v", err)
	}
	// What the model decides for these readings, from a fresh start and
	// no task yet Ready.
	pure := scaling.Decide(scaling.Inputs{
		Now: time.Now(), Current: 1, Min: 1, Max: 20,
		Policy:   scaling.Policy{Type: gputaskv1.SLOPolicy, SLO: scaling.SLOOf(slo)},
		Interval: 10 * time.Minute, Startup: 2 * time.Minute, StabilizationWindow: scaling.DefaultStabilizationWindow,
		Metrics: []scaling.MetricInput{
			{Name: "completions", Role: gputaskv1.RoleCompletions, Value: 2},
			{Name: "running", Role: gputaskv1.RoleRunning, Value: 20},
		},
	})
	if pure.Desired <= 1 {
		t.Fatalf("the pure decision is %d (%s): the test needs a scale-up", pure.Desired, pure.Message)
	}

	inf := informers.NewSharedInformerFactoryWithOptions(cp.GPUTask, 0, informers.WithNamespace(ns))
	runAutoscaler(ctx, t, inf, autoscaler.Options{
		NewSource: loadindex.Factory{Destinations: &loadindex.DestinationPolicy{AllowLoopback: true}}.New,
	})

	var set *gputaskv1.GPUTaskSet
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := sets.Get(ctx, "llm", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		set = s
		return s.Status.LastDecision != nil && s.Status.LastScaleTime != nil, nil
	}); err != nil {
		t.Fatalf("waiting for the SLO set's decision: %v; last status %+v", err, set.Status)
	}
	if got := ptr.Deref(set.Spec.Replicas, 0); got != pure.Desired {
		t.Errorf("replicas = %d, want %d as the pure decision: %s", got, pure.Desired, pure.Message)
	}
	d := set.Status.LastDecision
	if d.Reason != pure.Reason || d.Message != pure.Message || !strings.HasPrefix(d.Inputs, pure.Inputs+" predicted-p95-wait=") {
		t.Errorf("lastDecision = %+v, want reason %s, message %q, inputs %q and the predicted wait", d, pure.Reason, pure.Message, pure.Inputs)
	}
	if cond := meta.FindStatusCondition(set.Status.Conditions, gputaskv1.ConditionScalingActive); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("ScalingActive = %+v, want True", cond)
	}
	if cond := meta.FindStatusCondition(set.Status.Conditions, gputaskv1.ConditionScalingLimited); cond == nil || cond.Status != metav1.ConditionFalse {
		t.Errorf("ScalingLimited = %+v, want False", cond)
	}
}
