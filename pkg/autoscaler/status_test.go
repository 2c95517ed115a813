package autoscaler

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	applyv1 "github.com/gputask/gputask-controller/pkg/generated/applyconfiguration/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/scaling"
)

func TestAbleToScale(t *testing.T) {
	tests := []struct {
		name     string
		in       scaling.Inputs
		d        scaling.Decision
		scaled   bool
		scaleErr error
		status   metav1.ConditionStatus
		reason   string
	}{
		{name: "paused", in: scaling.Inputs{Paused: true}, status: metav1.ConditionFalse, reason: ReasonScalingDisabled},
		{name: "stopped", in: scaling.Inputs{Stopped: true}, status: metav1.ConditionFalse, reason: scaling.ReasonStopped},
		{name: "stopped and paused", in: scaling.Inputs{Stopped: true, Paused: true}, status: metav1.ConditionFalse, reason: scaling.ReasonStopped},
		{name: "waiting for the interval", in: scaling.Inputs{Current: 4}, d: scaling.Decision{Desired: 4, Reason: scaling.ReasonWaitingForInterval}, status: metav1.ConditionFalse, reason: scaling.ReasonWaitingForInterval},
		{name: "waiting for starting tasks", in: scaling.Inputs{Current: 4}, d: scaling.Decision{Desired: 4, Reason: scaling.ReasonWaitingForStartingTasks}, status: metav1.ConditionFalse, reason: scaling.ReasonWaitingForStartingTasks},
		{name: "failed rescale", scaleErr: errors.New("forbidden"), status: metav1.ConditionFalse, reason: ReasonFailedUpdateScale},
		{name: "rescaled", scaled: true, d: scaling.Decision{Desired: 3}, status: metav1.ConditionTrue, reason: ReasonSucceededRescale},
		{name: "stabilized", d: scaling.Decision{Reason: scaling.ReasonScaleDownStabilized}, status: metav1.ConditionFalse, reason: scaling.ReasonScaleDownStabilized},
		{name: "young tasks", d: scaling.Decision{Reason: scaling.ReasonTasksTooYoung}, status: metav1.ConditionFalse, reason: scaling.ReasonTasksTooYoung},
		{name: "held during a burst", d: scaling.Decision{Reason: scaling.ReasonHeldDuringBurst}, status: metav1.ConditionFalse, reason: scaling.ReasonHeldDuringBurst},
		{name: "rescaled by a burst", scaled: true, d: scaling.Decision{Desired: 9, Reason: scaling.ReasonBurst}, status: metav1.ConditionTrue, reason: scaling.ReasonBurst},
		{name: "scale-up period", in: scaling.Inputs{Current: 4}, d: scaling.Decision{Desired: 4, Reason: scaling.ReasonScaleUpLimited}, status: metav1.ConditionFalse, reason: ReasonBackoffUpscale},
		{name: "scale-up limited in size", in: scaling.Inputs{Current: 4}, d: scaling.Decision{Desired: 6, Reason: scaling.ReasonScaleUpLimited}, status: metav1.ConditionTrue, reason: ReasonReadyForNewScale},
		{name: "ready", status: metav1.ConditionTrue, reason: ReasonReadyForNewScale},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ableToScale(tt.in, tt.d, tt.scaled, tt.scaleErr)
			if got.Type != gputaskv1.ConditionAbleToScale || got.Status != tt.status || got.Reason != tt.reason {
				t.Errorf("ableToScale = %s/%s/%s, want %s/%s", got.Type, got.Status, got.Reason, tt.status, tt.reason)
			}
		})
	}
}

func TestScalingLimitedAndFallbackConditions(t *testing.T) {
	if c := scalingLimited(scaling.Decision{}); c.Status != metav1.ConditionFalse || c.Reason != ReasonDesiredWithinRange {
		t.Errorf("no limits: %s/%s", c.Status, c.Reason)
	}
	if c := scalingLimited(scaling.Decision{Limits: []string{scaling.ReasonTooManyReplicas, scaling.ReasonCapacityLimited}}); c.Status != metav1.ConditionTrue || c.Reason != scaling.ReasonCapacityLimited {
		t.Errorf("limits: %s/%s, want the last limit applied", c.Status, c.Reason)
	}
	if c := fallbackCondition(scaling.Decision{Fallback: true}); c.Status != metav1.ConditionTrue || c.Reason != scaling.ReasonFallbackReplicas {
		t.Errorf("fallback: %s/%s", c.Status, c.Reason)
	}
	if c := scalingActive(scaling.Inputs{}, scaling.Decision{}, nil); c.Status != metav1.ConditionFalse || c.Reason != gputaskv1.ReasonInvalidMetricSpec {
		t.Errorf("no metrics: %s/%s", c.Status, c.Reason)
	}
}

func TestSameIgnoringTimes(t *testing.T) {
	base := func(at time.Time) *gputaskv1.GPUTaskSetStatus {
		ts := metav1.NewTime(at)
		return &gputaskv1.GPUTaskSetStatus{
			Replicas:  3,
			LoadIndex: "0.6",
			LastDecision: &gputaskv1.ScalingDecision{Time: ts, From: 3, To: 3, Reason: scaling.ReasonWithinThresholds,
				Capacity: &gputaskv1.TaskCapacity{SlotsPerTask: 64, Source: gputaskv1.CapacityFit,
					Fit: &gputaskv1.ITLFitStatus{Alpha: "7ms", Beta: "51µs", Readings: "12", LastReadingTime: ts}}},
			Metrics:         []gputaskv1.MetricStatus{{Name: "q", Value: "0.6", LastReadTime: &ts}},
			Recommendations: []gputaskv1.Recommendation{{Time: ts, Replicas: 3}},
			Conditions:      []metav1.Condition{{Type: gputaskv1.ConditionAbleToScale, Status: metav1.ConditionTrue, Reason: ReasonReadyForNewScale, LastTransitionTime: ts}},
		}
	}
	a, b := base(t0), base(t0.Add(time.Minute))
	if !sameIgnoringTimes(a, b) {
		t.Error("statuses differing only in times compare unequal")
	}
	b.Replicas = 7 // the set controller's field is not ours to compare
	if !sameIgnoringTimes(a, b) {
		t.Error("a set controller field made the autoscaler's status differ")
	}
	b.LoadIndex = "0.7"
	if sameIgnoringTimes(a, b) {
		t.Error("a changed load index compares equal")
	}
	c := base(t0)
	c.Recommendations[0].Replicas = 4
	if sameIgnoringTimes(a, c) {
		t.Error("a changed recommendation compares equal")
	}
	d := base(t0)
	d.LastDecision.Capacity.Fit.Beta = "60µs"
	if sameIgnoringTimes(a, d) {
		t.Error("a changed ITL fit compares equal")
	}
}

// TestStatusApplyIsExactlyTheAutoscalersFields: the apply carries every
// field of the autoscaler's that is set, nested ones included, and no field
// of the set controller's, so it never takes one over. Every field is set
// here, so a field the apply drops fails the test.
func TestStatusApplyIsExactlyTheAutoscalersFields(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 11, 24, 0, 1, 0, 0, time.UTC))
	set := &gputaskv1.GPUTaskSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: metav1.NamespaceDefault}}
	set.Status = gputaskv1.GPUTaskSetStatus{
		Replicas: 4, RunningReplicas: 3, PendingReplicas: 1, ReadyReplicas: 3, DrainingReplicas: 1, HeldBackReplicas: 1, Nodes: 2,
		Selector: "gputask.io/taskset=web", ObservedGeneration: 7,
		LoadIndex: "0.5", DesiredReplicas: ptr.To[int32](0), CapacityReplicas: ptr.To[int32](6),
		StartingReplicas: 1, QueuedReplicas: 2, LastScaleTime: &at,
		LastDecision: &gputaskv1.ScalingDecision{Time: at, Inputs: "queue: load=0.5", From: 4, To: 5, Reason: "ScaleUp", Message: "up",
			PredictedWait: "0s", PredictedTTFT: "1.2s", PredictedITL: "27.6ms", BurstHeadroom: "3.5",
			Capacity: &gputaskv1.TaskCapacity{SlotsPerTask: 159, Source: gputaskv1.CapacityProfile, Context: "1397",
				Fit: &gputaskv1.ITLFitStatus{Alpha: "7ms", Beta: "51.2µs", Readings: "12.5", LastReadingTime: at}}},
		Metrics: []gputaskv1.MetricStatus{
			{Name: "queue", Value: "0.5", DesiredReplicas: ptr.To[int32](5), LastReadTime: &at},
			{Name: "util", Error: "timed out", LastReadTime: &at},
		},
		ConsecutiveFailures: 3, BurstUntil: &at,
		Predictive:      &gputaskv1.PredictiveStatus{History: "h", ForecastReplicas: ptr.To[int32](4), Message: "m"},
		Recommendations: []gputaskv1.Recommendation{{Time: at, Replicas: 5}},
		Conditions: []metav1.Condition{
			{Type: gputaskv1.ConditionReplicaFailure, Status: metav1.ConditionTrue, Reason: "FailedCreate", LastTransitionTime: at},
			{Type: gputaskv1.ConditionAbleToScale, Status: metav1.ConditionTrue, Reason: ReasonReadyForNewScale, Message: "ok", LastTransitionTime: at},
			{Type: gputaskv1.ConditionFallback, Status: metav1.ConditionFalse, Reason: ReasonLoadIndexAvailable, ObservedGeneration: 7, LastTransitionTime: at},
		},
	}
	apply := applyv1.GPUTaskSet(set.Name, set.Namespace).WithStatus(statusApply(&set.Status))
	got, err := json.Marshal(apply)
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.Marshal(ownedStatus(set))
	if err != nil {
		t.Fatal(err)
	}
	var g, w map[string]any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(w, g) {
		t.Errorf("apply differs (-want +got):\n%s", diff.Diff(w, g))
	}
	if len(autoscalerStatusFields) != len(g["status"].(map[string]any))-1 {
		t.Errorf("the apply sets %d fields besides conditions, want all %d of the autoscaler's", len(g["status"].(map[string]any))-1, len(autoscalerStatusFields))
	}
}

// TestBurstUntilInStatus: the end of a burst under way is kept in status,
// where the next evaluation, or a new leader, reads it; a past one is not.
func TestBurstUntilInStatus(t *testing.T) {
	now := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	set := &gputaskv1.GPUTaskSet{Spec: gputaskv1.GPUTaskSetSpec{Autoscaling: &gputaskv1.AutoscalingSpec{
		MaxReplicas: 4, Burst: &gputaskv1.BurstSpec{},
	}}}
	for _, tc := range []struct {
		until time.Time
		want  bool
	}{{now.Add(time.Minute), true}, {now, false}, {time.Time{}, false}} {
		status := desiredStatus(set, scaling.Inputs{}, scaling.Decision{Winner: -1, BurstUntil: tc.until}, now, nil, time.Time{}, nil)
		if got := status.BurstUntil != nil && status.BurstUntil.Time.Equal(tc.until); got != tc.want {
			t.Errorf("BurstUntil %v: status has %v, want it kept: %v", tc.until, status.BurstUntil, tc.want)
		}
		set.Status.BurstUntil = status.BurstUntil
		in := scaling.InputsFor(set, now, nil, nil, nil)
		if tc.want && (in.Burst == nil || in.Burst.Factor != scaling.DefaultBurstFactor || in.Burst.Window != scaling.DefaultBurstWindow || !in.BurstUntil.Equal(tc.until)) {
			t.Errorf("InputsFor read burst %+v until %v, want the defaults until %v", in.Burst, in.BurstUntil, tc.until)
		}
	}
}

// TestPredictiveHistoryInStatus: what predictive pre-warming learned is kept
// in status, where the next evaluation, or a new leader, reads it back.
func TestPredictiveHistoryInStatus(t *testing.T) {
	now := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	set := &gputaskv1.GPUTaskSet{Spec: gputaskv1.GPUTaskSetSpec{Replicas: ptr.To[int32](4), Autoscaling: &gputaskv1.AutoscalingSpec{
		MaxReplicas: 10, Predictive: &gputaskv1.PredictiveSpec{LeadTime: &gputaskv1.Duration{Duration: 5 * time.Minute}},
		Metrics: []gputaskv1.MetricSpec{{Name: "load"}},
	}}}
	reading := scaling.MetricFor(set.Spec.Autoscaling.Metrics[0])
	reading.Value = 0.65
	in := scaling.InputsFor(set, now, []scaling.MetricInput{reading}, nil, nil)
	d := scaling.Decide(in)
	status := desiredStatus(set, in, d, now, nil, time.Time{}, nil)
	if status.Predictive == nil || status.Predictive.History == "" || status.Predictive.ForecastReplicas != nil ||
		!strings.Contains(status.Predictive.Message, "not enough history") {
		t.Fatalf("status.predictive = %+v, want a history and no forecast yet", status.Predictive)
	}
	// A new leader, a day later, reads the history from status.
	set.Status.Predictive = status.Predictive
	in = scaling.InputsFor(set, now.Add(24*time.Hour-5*time.Minute), []scaling.MetricInput{reading}, nil, nil)
	d = scaling.Decide(in)
	if d.Forecast == nil || *d.Forecast != 4 {
		t.Errorf("forecast from the stored history = %v, want the 4 tasks learned (%s)", d.Forecast, d.ForecastMessage)
	}
	set.Spec.Autoscaling.Predictive = nil
	if status := desiredStatus(set, in, d, now, nil, time.Time{}, nil); status.Predictive != nil {
		t.Errorf("status.predictive kept with predictive off: %+v", status.Predictive)
	}
}
