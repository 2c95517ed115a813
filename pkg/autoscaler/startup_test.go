package autoscaler

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
	"github.com/gputask/gputask-controller/pkg/scaling"
)

// TestStartingTasksHoldStepAndTimeOut: a Step set with tasks that are not
// Ready yet adds none and says how many are starting; once the startup
// timeout passes, a Warning names the late task, once, and scale-up resumes.
func TestStartingTasksHoldStepAndTimeOut(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := newSet("web", 3)
	set.Spec.Autoscaling.StartupTimeout = &gputaskv1.Duration{Duration: 2 * time.Minute}
	f.Add(set)
	late := readyTask("web-late", set, t0.Add(-time.Minute))
	late.Status.Conditions = nil
	f.Add(readyTask("web-a", set, t0.Add(-time.Hour)), readyTask("web-b", set, t0.Add(-time.Hour)), late)
	f.scaleReplicas = 3
	f.readings["queue"] = fakeSource{value: 0.95}
	c := f.newController(ctx)
	inf := f.Informers

	if _, err := f.sync(ctx, c, "web"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	f.expectStatus("web")
	f.CheckActions()
	got := f.lastStatus()
	if got.Status.StartingReplicas != 1 || got.Status.LastDecision.Reason != scaling.ReasonWaitingForStartingTasks {
		t.Fatalf("startingReplicas %d, decision %+v; want 1 and %s", got.Status.StartingReplicas, got.Status.LastDecision, scaling.ReasonWaitingForStartingTasks)
	}
	assertCondition(t, got, gputaskv1.ConditionAbleToScale, metav1.ConditionFalse, scaling.ReasonWaitingForStartingTasks)
	f.ExpectEvents()

	// A minute later the task is past its startup timeout.
	f.Update(got)
	f.Client.ClearActions()
	f.Clock.Step(time.Minute)
	if _, err := f.sync(ctx, c, "web"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if f.scaleReplicas != 6 {
		t.Errorf("scale replicas = %d, want 6", f.scaleReplicas)
	}
	f.ExpectEvents("Warning TaskStartupTimeout Task web-late is not Ready 2m0s", "Normal ScaledUp")
	if got := f.lastStatus(); got.Status.StartingReplicas != 0 {
		t.Errorf("startingReplicas = %d, want 0", got.Status.StartingReplicas)
	}

	// The late task is reported once only.
	scaled := f.lastStatus().DeepCopy()
	scaled.Spec.Replicas = &f.scaleReplicas
	controllertest.Update(t, inf.Gputask().V1().GPUTaskSets().Informer().GetIndexer(), scaled)
	f.Clock.Step(time.Minute)
	if _, err := f.sync(ctx, c, "web"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	for _, e := range f.events() {
		if strings.HasPrefix(e, "Warning TaskStartupTimeout") {
			t.Errorf("late task reported again: %q", e)
		}
	}
}

func TestLastStep(t *testing.T) {
	exact := t0.Add(700 * time.Millisecond)
	persisted := func(ts time.Time) *gputaskv1.GPUTaskSet {
		s := newSet("web", 1)
		if !ts.IsZero() {
			s.Status.LastScaleTime = &metav1.Time{Time: ts}
		}
		return s
	}
	tests := []struct {
		name       string
		set        *gputaskv1.GPUTaskSet
		remembered time.Time
		want       time.Time
	}{
		{name: "never scaled", set: persisted(time.Time{}), want: time.Time{}},
		{name: "remembered, status not written yet", set: persisted(time.Time{}), remembered: exact, want: exact},
		{name: "remembered and persisted to the second", set: persisted(t0), remembered: exact, want: exact},
		{name: "new leader rounds the persisted second up", set: persisted(t0), want: t0.Add(time.Second)},
		{name: "another leader stepped later", set: persisted(t0.Add(10 * time.Second)), remembered: exact, want: t0.Add(11 * time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := lastStep(tt.set, tt.remembered); !got.Equal(tt.want) {
				t.Errorf("lastStep = %v, want %v", got, tt.want)
			}
		})
	}
}
