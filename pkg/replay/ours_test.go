package replay

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
	"github.com/gputask/gputask-controller/pkg/scaling"
)

var t0 = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

func testSet(t *testing.T, yaml string) *gputaskv1.GPUTaskSet {
	t.Helper()
	set, err := ParseSet([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return set
}

const stepSetYAML = `
apiVersion: gputask.io/v1
kind: GPUTaskSet
metadata: {name: pool}
spec:
  minTaskAge: MINAGE
  scaleIn: {drainTimeout: 10m}
  template: {spec: {gpu: A100}}
  autoscaling:
    minReplicas: 1
    maxReplicas: 20
    interval: 30s
    startupTimeout: 10m
    metrics:
    - name: load
      http: {url: "http://backend/load"}
      upThreshold: "0.8"
      downThreshold: "0.5"
    policy: {type: Step, stepUp: 2, stepDown: 1}
    scaleDownStabilizationWindow: 0s
`

func stepSet(t *testing.T, minAge string) *gputaskv1.GPUTaskSet {
	return testSet(t, strings.ReplaceAll(stepSetYAML, "MINAGE", minAge))
}

// busyTrace keeps n requests of service d in flight from the start.
func busyTrace(n int, d time.Duration) workload.Trace {
	var tr workload.Trace
	for range n {
		tr.Requests = append(tr.Requests, workload.Served{Arrival: 0, Service: d})
	}
	return tr
}

func newTestSim(t *testing.T, set *gputaskv1.GPUTaskSet, tr workload.Trace, concurrency int, startup time.Duration) *Sim {
	t.Helper()
	ours, err := NewOurs(set, sim.LoadDemand)
	if err != nil {
		t.Fatal(err)
	}
	return NewSim(sim.NewPool(tr, t0, concurrency, startup), ours)
}

// A Step set adds stepUp tasks above the up threshold, then holds while
// they start (scaling.Decide's startup rule), and steps again once they
// are Ready and the load is still high.
func TestOursStepWaitsForStartingTasks(t *testing.T) {
	sm := newTestSim(t, stepSet(t, "0s"), busyTrace(40, time.Hour), 4, 2*time.Minute)
	steps := []struct {
		at     time.Duration
		want   int32
		reason string
	}{
		{0, 3, scaling.ReasonScaleUpAboveThreshold},
		{30 * time.Second, 3, scaling.ReasonWaitingForStartingTasks},
		{90 * time.Second, 3, scaling.ReasonWaitingForStartingTasks},
		{2*time.Minute + 30*time.Second, 5, scaling.ReasonScaleUpAboveThreshold},
	}
	for _, s := range steps {
		got := sm.Step(t0.Add(s.at))
		if got != s.want || sm.Ours.Last.Reason != s.reason {
			t.Errorf("at %v: %d (%s), want %d (%s)", s.at, got, sm.Ours.Last.Reason, s.want, s.reason)
		}
	}
	if got := len(sm.Pool.Workers()); got != 5 {
		t.Errorf("workers = %d, want 5: the set controller created what was asked", got)
	}
}

// The count changes at most once per interval, even when evaluated sooner
// (scaling.NextStep through Decide).
func TestOursOneStepPerInterval(t *testing.T) {
	sm := newTestSim(t, stepSet(t, "0s"), busyTrace(40, time.Hour), 4, 0)
	if got := sm.Step(t0); got != 3 {
		t.Fatalf("first step: %d", got)
	}
	if got := sm.Step(t0.Add(10 * time.Second)); got != 3 || sm.Ours.Last.Reason != scaling.ReasonWaitingForInterval {
		t.Errorf("10s later: %d (%s), want 3 (WaitingForInterval)", got, sm.Ours.Last.Reason)
	}
	if got := sm.Step(t0.Add(30 * time.Second)); got != 5 {
		t.Errorf("an interval later: %d, want 5", got)
	}
}

// Scale-in drains a busy worker instead of deleting it (setplan.Make):
// it takes no new requests, finishes the ones in flight, and is deleted the
// moment it falls idle. No request is lost.
func TestOursDrainsBusyWorkers(t *testing.T) {
	set := stepSet(t, "0s")
	// Two long requests keep two of three workers busy; the load is low.
	tr := workload.Trace{Requests: []workload.Served{{Arrival: 0, Service: 5 * time.Minute}, {Arrival: 0, Service: 7 * time.Minute}}}
	ours, err := NewOurs(set, sim.LoadDemand)
	if err != nil {
		t.Fatal(err)
	}
	ours.Initial = 3
	sm := NewSim(sim.NewPool(tr, t0, 4, 0), ours)
	sm.Step(t0)                       // idle worker removed first
	sm.Step(t0.Add(30 * time.Second)) // a busy one drains
	var draining int
	for _, w := range sm.Pool.Workers() {
		if w.Draining {
			draining++
		}
	}
	if got := len(sm.Pool.Workers()); got != 2 || draining != 1 {
		t.Fatalf("workers = %d (draining %d), want 2 with 1 draining", got, draining)
	}
	sm.Step(t0.Add(8 * time.Minute))
	if !sm.Pool.Finished() {
		t.Fatal("requests still in flight")
	}
	res := sim.Measure(sm.Pool.Outcomes(), sim.SLOTargets{Wait: time.Second})
	if res.FailedRequests != 0 {
		t.Errorf("failed = %d, want 0: drained workers finish their work", res.FailedRequests)
	}
	for _, w := range sm.Pool.AllWorkers() {
		if !w.Removed.IsZero() && w.InFlight() > 0 {
			t.Errorf("%s removed while busy", w.Name)
		}
	}
}

// A Running task younger than minTaskAge is never removed
// (setplan.ChooseVictims); the set wakes when it comes of age.
func TestOursMinTaskAgeHoldsScaleIn(t *testing.T) {
	ours, err := NewOurs(stepSet(t, "5m"), sim.LoadDemand)
	if err != nil {
		t.Fatal(err)
	}
	ours.Initial = 3
	sm := NewSim(sim.NewPool(workload.Trace{Requests: []workload.Served{{Arrival: time.Hour, Service: time.Second}}}, t0, 4, 0), ours)
	if got := sm.Step(t0); got != 2 {
		t.Fatalf("replicas = %d, want 2", got)
	}
	if got := len(sm.Pool.Workers()); got != 3 || sm.Ours.set.Status.HeldBackReplicas != 1 {
		t.Errorf("workers = %d held back %d, want 3 and 1", got, sm.Ours.set.Status.HeldBackReplicas)
	}
	if w := sm.Ours.Wake(); !w.Equal(t0.Add(5 * time.Minute)) {
		t.Errorf("wake = %v, want when the tasks come of age", w)
	}
	sm.Step(t0.Add(30 * time.Second)) // TasksTooYoung holds the count
	if sm.Ours.Last.Reason != scaling.ReasonTasksTooYoung {
		t.Errorf("reason = %s, want TasksTooYoung", sm.Ours.Last.Reason)
	}
	sm.Step(t0.Add(5*time.Minute + time.Second))
	if got := len(sm.Pool.Workers()); got > 2 {
		t.Errorf("workers = %d after minTaskAge, want at most 2", got)
	}
}

// A scale-up takes drains back before it creates a worker.
func TestOursScaleUpTakesDrainsBack(t *testing.T) {
	ours, err := NewOurs(stepSet(t, "0s"), sim.LoadDemand)
	if err != nil {
		t.Fatal(err)
	}
	ours.Initial = 2
	p := sim.NewPool(workload.Trace{Requests: []workload.Served{{Arrival: 0, Service: time.Hour}}}, t0, 4, time.Minute)
	sm := NewSim(p, ours)
	sm.Step(t0) // low load: the busy worker is kept, the idle one deleted
	w := p.Workers()[0]
	zero, one := int32(0), int32(1)
	ours.set.Spec.Replicas = &zero
	ours.Sync(p)
	if !w.Draining {
		t.Fatal("the busy worker did not drain")
	}
	ours.set.Spec.Replicas = &one
	ours.Sync(p)
	if w.Draining || len(p.Workers()) != 1 || len(p.AllWorkers()) != 2 {
		t.Errorf("draining %v, workers %d of %d created; want the drain taken back and nothing created", w.Draining, len(p.Workers()), len(p.AllWorkers()))
	}
}

// The default set is the embedded inference pool on the SLO policy, and
// parses as valid; hpa and keda beside it aim at 0.7, as beside the
// proportional variant.
func TestDefaultSet(t *testing.T) {
	set := DefaultSet()
	if set.Spec.Autoscaling.Policy.Type != gputaskv1.SLOPolicy {
		t.Errorf("policy = %s", set.Spec.Autoscaling.Policy.Type)
	}
	c := Config{Set: set}
	if got := c.Target(); math.Abs(got-0.7) > 1e-9 {
		t.Errorf("target = %v, want 0.7", got)
	}
	v, err := ParseVariant("proportional")
	if err != nil {
		t.Fatal(err)
	}
	if v.Set.Spec.Autoscaling.Policy.Type != gputaskv1.ProportionalPolicy {
		t.Errorf("proportional variant's policy = %s", v.Set.Spec.Autoscaling.Policy.Type)
	}
	c = Config{Set: v.Set}
	if got := c.Target(); math.Abs(got-0.7) > 1e-9 {
		t.Errorf("proportional target = %v, want 0.7", got)
	}
	c = Config{Set: stepSet(t, "0s")}
	if got := c.Target(); math.Abs(got-0.65) > 1e-9 {
		t.Errorf("step target = %v, want the middle of 0.5 and 0.8", got)
	}
}

func TestParseSetErrors(t *testing.T) {
	for name, yaml := range map[string]string{
		"no autoscaling": "apiVersion: gputask.io/v1\nkind: GPUTaskSet\nmetadata: {name: a}\nspec: {template: {spec: {}}}\n",
		"wrong kind":     "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n",
		"unknown field":  strings.Replace(stepSetYAML, "minTaskAge: MINAGE", "minTaskAges: 1m", 1),
		"invalid":        strings.Replace(strings.ReplaceAll(stepSetYAML, "MINAGE", "0s"), `upThreshold: "0.8"`, `upThreshold: "0.1"`, 1),
	} {
		if _, err := ParseSet([]byte(yaml)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// Ours learns the start-up from the tasks it sees, as the controller
// does: the pool's first workers show the starts they drew, and the
// look-ahead is their median, not the model's.
func TestOursLearnsStartupFromTasks(t *testing.T) {
	p := sim.NewPool(workload.Trace{}, t0, 8, 0)
	p.SetStartup(sim.StartupModel{Median: 2 * time.Minute, Sigma: 0.8, Floor: 10 * time.Second}, 7)
	ours, err := NewOurs(withSlots(DefaultSet(), 8, false), sim.LoadDemand)
	if err != nil {
		t.Fatal(err)
	}
	ours.Initial = 3
	ours.Start(p)
	var took []time.Duration
	for _, w := range p.Workers() {
		took = append(took, w.StartedBefore)
	}
	slices.Sort(took)
	got := scaling.StartupOf(ours.startedTasks(p), 10*time.Minute)
	// Whole seconds as the API shows them do not matter here: the
	// modelled tasks carry exact times.
	if got != took[1] || got == p.Startup() {
		t.Errorf("ours looks ahead by %v; the first workers took %v (median %v), the model's median is %v", got, took, took[1], p.Startup())
	}
}
