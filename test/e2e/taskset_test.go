package e2e

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/autoscaler"
	"github.com/gputask/gputask-controller/pkg/scaling"
)

// These tests drive the autoscaler of the package's controller (started in
// main_test.go; it watches every namespace, so a second controller here
// would only fight it over the same sets) with a load index that the test
// process serves on 127.0.0.1 and changes at will (loadserver_test.go). Each
// test has its own namespace and its own fake GPU nodes with a GPU model
// nobody else asks for, so the tests run in parallel without sharing GPUs.

// TestTaskSetScalesUpInStepsAndHolds: at load 0.9 a set of 1 grows by the
// default stepUp of 3 per decision, 1 → 4 → 7, and stops at maxReplicas 7
// with ScalingLimited True. At 0.6, between the thresholds, it holds.
func TestTaskSetScalesUpInStepsAndHolds(t *testing.T) {
	t.Parallel()
	ns, model, load, rec := setupPool(t, 1, 16, loadHigh)

	createPool(t, ns, poolSpec{replicas: 1, min: 1, max: 7, model: model, gpus: 1, url: load.URL()})

	rec.waitSet(t, "7 running tasks, held at maxReplicas", func(s *gputaskv1.GPUTaskSet) bool {
		return s.Status.RunningReplicas == 7 && decisionReason(s) == scaling.ReasonTooManyReplicas &&
			conditionIs(s, gputaskv1.ConditionScalingLimited, metav1.ConditionTrue, scaling.ReasonTooManyReplicas)
	})
	if got, want := rec.replicaSequence(), []int32{1, 4, 7}; !slices.Equal(got, want) {
		t.Errorf("spec.replicas went %v, want %v", got, want)
	}
	if got := rec.reasons(); !slices.Contains(got, scaling.ReasonScaleUpAboveThreshold) {
		t.Errorf("status.lastDecision.reason went %v, want %s among them", got, scaling.ReasonScaleUpAboveThreshold)
	}
	waitEvents(t, ns, gputaskv1.ReasonScaledUp, corev1.EventTypeNormal, "New size: 4", "New size: 7")

	load.Set(loadMid)
	rec.waitSet(t, "a decision within the thresholds", func(s *gputaskv1.GPUTaskSet) bool {
		return decisionReason(s) == scaling.ReasonWithinThresholds
	})
	reads := load.Reads()
	time.Sleep(5 * poolInterval)
	if n := load.Reads() - reads; n < 3 {
		t.Errorf("the load index was read %d times in 5 intervals; the hold proves nothing", n)
	}
	if got, want := rec.replicaSequence(), []int32{1, 4, 7}; !slices.Equal(got, want) {
		t.Errorf("at load %v spec.replicas went %v, want it held at 7 (%v)", loadMid, got, want)
	}
	t.Logf("kubectl get gts:\n%s", cp.KubectlT(t, "get", "gts", "-n", ns))
}

// TestTaskSetScalesDownPastYoungTasks: at load 0.3 a set of 4 shrinks by
// one task per decision down to minReplicas 1. Its tasks run but are younger
// than minTaskAge at first, so the first scale-in is held back
// (status.heldBackReplicas, then decisions TasksTooYoung) and nothing is
// deleted until they come of age.
func TestTaskSetScalesDownPastYoungTasks(t *testing.T) {
	t.Parallel()
	const minTaskAge = 20 * time.Second
	ns, model, load, rec := setupPool(t, 1, 8, loadMid)

	createPool(t, ns, poolSpec{replicas: 4, min: 1, max: 7, model: model, gpus: 1, url: load.URL(), minTaskAge: minTaskAge})
	rec.waitSet(t, "4 running tasks", func(s *gputaskv1.GPUTaskSet) bool { return s.Status.RunningReplicas == 4 })
	youngUntil := rec.oldestTask(t).Add(minTaskAge)
	if time.Until(youngUntil) < 5*time.Second {
		t.Fatalf("tasks took too long to run: they come of age in %v, too soon to test minTaskAge", time.Until(youngUntil))
	}

	load.Set(loadLow)
	rec.waitSet(t, "scale-in held back by young tasks", func(s *gputaskv1.GPUTaskSet) bool {
		return s.Status.HeldBackReplicas > 0 && decisionReason(s) == scaling.ReasonTasksTooYoung &&
			conditionIs(s, gputaskv1.ConditionAbleToScale, metav1.ConditionFalse, scaling.ReasonTasksTooYoung)
	})
	if time.Now().After(youngUntil) {
		t.Fatal("the tasks came of age before the hold could be checked")
	}
	set := rec.set(t)
	t.Logf("held: spec.replicas %d, status.replicas %d, heldBackReplicas %d, decision %q",
		*set.Spec.Replicas, set.Status.Replicas, set.Status.HeldBackReplicas, set.Status.LastDecision.Message)
	if set.Status.Replicas != 4 || len(rec.deletedTasks()) > 0 {
		t.Errorf("young tasks were removed: status.replicas %d, deleted %v", set.Status.Replicas, rec.deletedTasks())
	}

	rec.waitSet(t, "1 task at minReplicas", func(s *gputaskv1.GPUTaskSet) bool {
		return s.Status.Replicas == 1 && decisionReason(s) == scaling.ReasonTooFewReplicas
	})
	if got, want := rec.replicaSequence(), []int32{4, 3, 2, 1}; !slices.Equal(got, want) {
		t.Errorf("spec.replicas went %v, want %v", got, want)
	}
	deleted := rec.deletedTasks()
	if len(deleted) != 3 {
		t.Errorf("deleted tasks %v, want 3", deleted)
	}
	for _, d := range deleted {
		if age := d.deleted.Sub(d.created); age < minTaskAge {
			t.Errorf("task %s was deleted %v after its creation, before minTaskAge %v", d.name, age, minTaskAge)
		}
	}
	waitEvents(t, ns, gputaskv1.ReasonScaledDown, corev1.EventTypeNormal, "New size: 3", "New size: 2", "New size: 1")
}

// TestTaskSetHoldsWhileLoadIndexFails: while the endpoint answers 500, hangs
// past the read timeout, or refuses connections, the count stays as it was,
// even past the failure threshold (no fallback is set). ScalingActive turns
// False with reason FailedGetLoadIndex and a Warning event says why; a good
// answer makes it True again.
func TestTaskSetHoldsWhileLoadIndexFails(t *testing.T) {
	t.Parallel()
	ns, model, load, rec := setupPool(t, 1, 8, loadMid)

	createPool(t, ns, poolSpec{replicas: 3, min: 1, max: 7, model: model, gpus: 1, url: load.URL(), timeout: time.Second})
	rec.waitSet(t, "3 running tasks, load index read", func(s *gputaskv1.GPUTaskSet) bool {
		return s.Status.RunningReplicas == 3 &&
			conditionIs(s, gputaskv1.ConditionScalingActive, metav1.ConditionTrue, autoscaler.ReasonValidMetricFound)
	})

	outages := []struct {
		name  string
		start func()
		// message is part of the ScalingActive message.
		message string
	}{
		{"HTTP 500", func() { load.Fail(http.StatusInternalServerError) }, "the server answered HTTP 5xx"},
		{"timeout", load.Hang, "load index unreachable"},
		{"connection refused", load.Close, "load index unreachable"},
	}
	for i, outage := range outages {
		if i > 0 {
			// Recover in between, so each outage starts from a good reading.
			load.Set(loadMid)
			rec.waitSet(t, "recovery before "+outage.name, func(s *gputaskv1.GPUTaskSet) bool {
				return conditionIs(s, gputaskv1.ConditionScalingActive, metav1.ConditionTrue, autoscaler.ReasonValidMetricFound) &&
					s.Status.ConsecutiveFailures == 0
			})
		}
		outage.start()
		rec.waitSet(t, outage.name+": ScalingActive False past the failure threshold", func(s *gputaskv1.GPUTaskSet) bool {
			c := meta.FindStatusCondition(s.Status.Conditions, gputaskv1.ConditionScalingActive)
			return conditionIs(s, gputaskv1.ConditionScalingActive, metav1.ConditionFalse, scaling.ReasonFailedGetLoadIndex) &&
				strings.Contains(c.Message, outage.message) && s.Status.ConsecutiveFailures > scaling.DefaultFailureThreshold &&
				decisionReason(s) == scaling.ReasonFailedGetLoadIndex
		})
		set := rec.set(t)
		t.Logf("%s: %d failures in a row, decision %q", outage.name, set.Status.ConsecutiveFailures, set.Status.LastDecision.Message)
		waitEvents(t, ns, scaling.ReasonFailedGetLoadIndex, corev1.EventTypeWarning, outage.message)
		if got := rec.replicaSequence(); !slices.Equal(got, []int32{3}) {
			t.Errorf("%s: spec.replicas went %v, want it held at 3", outage.name, got)
		}
		if set.Status.Replicas != 3 {
			t.Errorf("%s: status.replicas %d, want 3", outage.name, set.Status.Replicas)
		}
	}
}

// TestTaskSetStopsAtGPUCapacity: with capacityAware, a set of 3-GPU tasks on
// two nodes of 8 GPUs grows to the 4 tasks that fit (two per node) and no
// further, although load 0.9 and maxReplicas 10 ask for more.
func TestTaskSetStopsAtGPUCapacity(t *testing.T) {
	t.Parallel()
	ns, model, load, rec := setupPool(t, 2, 8, loadHigh)

	createPool(t, ns, poolSpec{replicas: 1, min: 1, max: 10, model: model, gpus: 3, url: load.URL(), capacityAware: true})
	rec.waitSet(t, "4 running tasks, capped at capacity", func(s *gputaskv1.GPUTaskSet) bool {
		return s.Status.RunningReplicas == 4 && s.Status.CapacityReplicas != nil && *s.Status.CapacityReplicas == 4 &&
			decisionReason(s) == scaling.ReasonCapacityLimited &&
			conditionIs(s, gputaskv1.ConditionScalingLimited, metav1.ConditionTrue, scaling.ReasonCapacityLimited)
	})
	reads := load.Reads()
	time.Sleep(3 * poolInterval)
	if n := load.Reads() - reads; n < 2 {
		t.Errorf("the load index was read %d times in 3 intervals; the cap proves nothing", n)
	}
	if got, want := rec.replicaSequence(), []int32{1, 4}; !slices.Equal(got, want) {
		t.Errorf("spec.replicas went %v, want %v", got, want)
	}
	set := rec.set(t)
	t.Logf("capped: %s", set.Status.LastDecision.Message)
	if set.Status.PendingReplicas != 0 {
		t.Errorf("%d tasks pending; capacity should have kept them from being created", set.Status.PendingReplicas)
	}
	t.Logf("kubectl get gt:\n%s", cp.KubectlT(t, "get", "gt", "-n", ns))
}
