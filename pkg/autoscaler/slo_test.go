package autoscaler

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/scaling"
)

// sloSet is newSet under the SLO policy: a p95 wait within 1s, 8 slots a
// task, read from metrics named after their roles.
func sloSet(name string, replicas, maxReplicas int32, roles ...gputaskv1.MetricRole) *gputaskv1.GPUTaskSet {
	set := newSet(name, replicas)
	as := set.Spec.Autoscaling
	as.MaxReplicas = maxReplicas
	as.Interval = &gputaskv1.Duration{Duration: 15 * time.Second}
	as.StartupTimeout = &gputaskv1.Duration{Duration: 2 * time.Minute}
	as.Policy = gputaskv1.ScalingPolicy{Type: gputaskv1.SLOPolicy, SLO: &gputaskv1.SLOSpec{
		Wait: &gputaskv1.Duration{Duration: time.Second}, Percentile: ptr.To(resource.MustParse("95")), SlotsPerTask: 8,
	}}
	as.Metrics = nil
	for _, r := range roles {
		as.Metrics = append(as.Metrics, gputaskv1.MetricSpec{Name: strings.ToLower(string(r)), Role: r,
			HTTP: &gputaskv1.HTTPSource{URL: "http://127.0.0.1:1/" + strings.ToLower(string(r))}})
	}
	return set
}

// startedTask is a task of owner created at created that became Ready
// took later.
func startedTask(name string, owner *gputaskv1.GPUTaskSet, created time.Time, took time.Duration) *gputaskv1.GPUTask {
	tk := readyTask(name, owner, created)
	tk.Status.Conditions[0].LastTransitionTime = metav1.NewTime(created.Add(took))
	return tk
}

// sloStatus is the autoscaler's status of an SLO set read at t0 as
// completions=2/s and running=20, whose decision went from one count to to.
func sloStatus(set *gputaskv1.GPUTaskSet, from, to int32, startup, wait string, reason, message string, limited metav1.Condition, able metav1.Condition) gputaskv1.GPUTaskSetStatus {
	ts := metav1.NewTime(t0)
	inputs := "arrivals=2/s expected=2/s backlog=0/s service=10s slots=8 ca2=1 cs2=1 correction=1 startup=" + startup
	limited.LastTransitionTime, able.LastTransitionTime = ts, ts
	status := set.Status
	status.LoadIndex, status.DesiredReplicas = "2", ptr.To(to)
	if to != from {
		status.LastScaleTime = &ts
	}
	status.LastDecision = &gputaskv1.ScalingDecision{Time: ts, Inputs: inputs + " predicted-p95-wait=" + wait, From: from, To: to, Reason: reason, Message: message, PredictedWait: wait,
		Capacity: &gputaskv1.TaskCapacity{SlotsPerTask: 8, Source: gputaskv1.CapacityOverride}}
	status.Metrics = []gputaskv1.MetricStatus{
		{Name: "completions", Value: "2", DesiredReplicas: ptr.To[int32](4), LastReadTime: &ts},
		{Name: "running", Value: "20", DesiredReplicas: ptr.To[int32](4), LastReadTime: &ts},
	}
	status.Recommendations = []gputaskv1.Recommendation{{Time: ts, Replicas: to}}
	status.Conditions = []metav1.Condition{able,
		{Type: gputaskv1.ConditionScalingActive, Status: metav1.ConditionTrue, Reason: ReasonValidMetricFound, Message: "the autoscaler read every load index: " + inputs, LastTransitionTime: ts},
		limited,
	}
	return status
}

var withinRange = metav1.Condition{Type: gputaskv1.ConditionScalingLimited, Status: metav1.ConditionFalse, Reason: ReasonDesiredWithinRange, Message: "the desired count is within the acceptable range"}

func rescaled(to int32) metav1.Condition {
	return metav1.Condition{Type: gputaskv1.ConditionAbleToScale, Status: metav1.ConditionTrue, Reason: ReasonSucceededRescale, Message: fmt.Sprintf("the autoscaler set the size to %d", to)}
}

// The model's count for 2 requests/s of 10 s each (20 busy slots) within a
// p95 wait of 1 s: 3 tasks (24 slots) leave too many waiting, 4 (32
// slots) almost none, so the p95 wait is 0. The start-up time shown is
// the one the set's task took.
func TestSLOScalesUpFromRoleReadings(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := sloSet("web", 1, 20, gputaskv1.RoleCompletions, gputaskv1.RoleRunning)
	f.Add(set, startedTask("web-0", set, t0.Add(-time.Hour), 90*time.Second))
	f.scaleReplicas = 1
	f.readings["completions"] = fakeSource{value: 2}
	f.readings["running"] = fakeSource{value: 20}
	c := f.newController(ctx)

	f.syncOK(ctx, c, "web")
	f.expectScale("web", 4)
	want := set.DeepCopy()
	want.Status = sloStatus(set, 1, 4, "1m30s", "0s", scaling.ReasonSLOScaleUp,
		"2/s expected (2/s now) at 10s per request need 4 tasks of 8 slots for a p95 wait within 1s", withinRange, rescaled(4))
	f.ExpectApplyStatus(want)
	f.CheckActions()
	f.ExpectEvents("Normal ScaledUp New size: 4; reason: 2/s expected (2/s now) at 10s per request need 4 tasks of 8 slots for a p95 wait within 1s")
}

// A set stored before the CRD required a Running metric is not evaluated:
// its count stays, SpecValid names the field, and ScalingActive says what
// the policy lacks.
func TestSLOWithoutRunningRoleHolds(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := sloSet("web", 3, 20, gputaskv1.RoleCompletions, gputaskv1.RoleWaiting)
	f.Add(set)
	f.scaleReplicas = 3
	f.readings["completions"] = fakeSource{value: 50}
	f.readings["waiting"] = fakeSource{value: 400}
	c := f.newController(ctx)

	f.syncOK(ctx, c, "web")
	ts := metav1.NewTime(t0)
	want := set.DeepCopy()
	want.Status.Conditions = []metav1.Condition{
		{Type: gputaskv1.ConditionSpecValid, Status: metav1.ConditionFalse, Reason: gputaskv1.ReasonInvalidSpec, LastTransitionTime: ts,
			Message: "spec.autoscaling.metrics: Required value: the SLO policy needs a metric of role Running and one of role Arrivals or Completions"},
		{Type: gputaskv1.ConditionScalingActive, Status: metav1.ConditionFalse, Reason: scaling.ReasonMissingMetricRole, LastTransitionTime: ts,
			Message: "the SLO policy needs a metric of role Running; holding at 3"},
	}
	f.ExpectApplyStatus(want)
	f.CheckActions() // no scale write
	if f.scaleReplicas != 3 {
		t.Errorf("scale replicas = %d, want 3", f.scaleReplicas)
	}
}

// maxReplicas keeps the pool from the SLO: the set goes to the maximum,
// and ScalingLimited says by how much the SLO is missed.
func TestSLOOutOfReachAtMaxReplicas(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := sloSet("web", 1, 2, gputaskv1.RoleCompletions, gputaskv1.RoleRunning)
	f.Add(set)
	f.scaleReplicas = 1
	f.readings["completions"] = fakeSource{value: 2}
	f.readings["running"] = fakeSource{value: 20}
	c := f.newController(ctx)

	f.syncOK(ctx, c, "web")
	f.expectScale("web", 2)
	want := set.DeepCopy()
	want.Status = sloStatus(set, 1, 2, "2m0s", "unbounded", scaling.ReasonTooManyReplicas,
		"2/s expected (2/s now) at 10s per request need 4 tasks of 8 slots for a p95 wait within 1s; capped at maxReplicas 2",
		metav1.Condition{Type: gputaskv1.ConditionScalingLimited, Status: metav1.ConditionTrue, Reason: scaling.ReasonSLOOutOfReach,
			Message: "the SLO needs 4 tasks, 2 more than maxReplicas 2; with 2 the p95 wait is unbounded (the slots cannot keep up), above the SLO of 1s"},
		rescaled(2))
	f.ExpectApplyStatus(want)
	f.CheckActions()
}

// The second evaluation learns from the first: the running requests grew
// from 20 to 40 in 15 s, so 20 more arrived than finished (3.333/s), and
// the service time is the 5-minute average, 20 + (40 − 20)(1 − e^(−15/300))
// running over 2/s finished, 10.488 s. Without the first reading it would
// be 40 / 2 = 20 s at 2/s.
func TestSLOQueueStateCarriesOver(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := sloSet("web", 4, 20, gputaskv1.RoleCompletions, gputaskv1.RoleRunning)
	f.Add(set)
	f.scaleReplicas = 4
	f.readings["completions"] = fakeSource{value: 2}
	f.readings["running"] = fakeSource{value: 20}
	c := f.newController(ctx)
	f.syncOK(ctx, c, "web")
	f.expectStatus("web")
	f.CheckActions()
	first := f.lastStatus()
	f.Update(first)
	f.Client.ClearActions()

	f.Clock.Step(15 * time.Second)
	f.readings["running"] = fakeSource{value: 40}
	f.syncOK(ctx, c, "web")
	f.expectScale("web", 6)
	ts := metav1.NewTime(f.Clock.Now())
	inputs := "arrivals=3.33333/s expected=3.33333/s backlog=0/s service=10.488s slots=8 ca2=1 cs2=1 correction=1 startup=2m0s"
	message := "3.33333/s expected (3.33333/s now) at 10.488s per request need 6 tasks of 8 slots for a p95 wait within 1s"
	want := first.DeepCopy()
	want.Status.DesiredReplicas, want.Status.LastScaleTime = ptr.To[int32](6), &ts
	want.Status.LastDecision = &gputaskv1.ScalingDecision{Time: ts, Inputs: inputs + " predicted-p95-wait=0s", From: 4, To: 6, Reason: scaling.ReasonSLOScaleUp, Message: message, PredictedWait: "0s",
		Capacity: &gputaskv1.TaskCapacity{SlotsPerTask: 8, Source: gputaskv1.CapacityOverride}}
	want.Status.Metrics = []gputaskv1.MetricStatus{
		{Name: "completions", Value: "2", DesiredReplicas: ptr.To[int32](6), LastReadTime: &ts},
		{Name: "running", Value: "40", DesiredReplicas: ptr.To[int32](6), LastReadTime: &ts},
	}
	want.Status.Recommendations = []gputaskv1.Recommendation{{Time: ts, Replicas: 6}}
	t1 := metav1.NewTime(t0)
	want.Status.Conditions = []metav1.Condition{
		{Type: gputaskv1.ConditionAbleToScale, Status: metav1.ConditionTrue, Reason: ReasonSucceededRescale, Message: "the autoscaler set the size to 6", LastTransitionTime: t1},
		{Type: gputaskv1.ConditionScalingActive, Status: metav1.ConditionTrue, Reason: ReasonValidMetricFound, Message: "the autoscaler read every load index: " + inputs, LastTransitionTime: t1},
		withinRange,
	}
	want.Status.Conditions[2].LastTransitionTime = t1
	f.ExpectApplyStatus(want)
	f.CheckActions()
}

// Until a request has finished the service time is unknown: the count
// only rises to the tasks the requests in the pool fill, and ScalingActive
// says the model is not in use.
func TestSLOServiceTimeUnknown(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := sloSet("web", 1, 20, gputaskv1.RoleCompletions, gputaskv1.RoleRunning)
	f.Add(set)
	f.scaleReplicas = 1
	f.readings["completions"] = fakeSource{value: 0}
	f.readings["running"] = fakeSource{value: 20}
	c := f.newController(ctx)

	f.syncOK(ctx, c, "web")
	f.expectScale("web", 3)
	f.expectStatus("web")
	f.CheckActions()
	got := f.lastStatus()
	assertCondition(t, got, gputaskv1.ConditionScalingActive, metav1.ConditionFalse, scaling.ReasonServiceTimeUnknown)
	if d := got.Status.LastDecision; d == nil || d.Inputs != "arrivals=0/s expected=0/s backlog=0/s service=unknown slots=8 ca2=0 cs2=1 correction=1 startup=2m0s" {
		t.Errorf("lastDecision = %+v; want the inputs without a predicted wait", d)
	}
}
