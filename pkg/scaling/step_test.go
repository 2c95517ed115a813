package scaling

import (
	"math"
	"reflect"
	"testing"
	"time"
)

// TestDecideStep: the Step policy adds StepUp above the up threshold and
// removes StepDown below the down threshold, the thresholds themselves
// holding.
func TestDecideStep(t *testing.T) {
	runDecideCases(t, []decideCase{
		{name: "step up above threshold", in: base(load(0.91)), want: 8, reason: ReasonScaleUpAboveThreshold, msg: "load 0.91 above up threshold 0.8"},
		{name: "step down below threshold", in: base(load(0.2)), want: 4, reason: ReasonScaleDownBelowThreshold, msg: "below down threshold 0.5"},
		{name: "within thresholds", in: base(load(0.6)), want: 5, reason: ReasonWithinThresholds},
		{name: "at up threshold holds", in: base(load(0.8)), want: 5, reason: ReasonWithinThresholds},
		{name: "at down threshold holds", in: base(load(0.5)), want: 5, reason: ReasonWithinThresholds},
		{name: "custom steps", in: with(base(load(0.9)), func(in *Inputs) { in.Policy.StepUp = 1 }), want: 6, reason: ReasonScaleUpAboveThreshold},
		{name: "default steps when unset", in: with(base(load(0.1)), func(in *Inputs) { in.Policy = Policy{} }), want: 4, reason: ReasonScaleDownBelowThreshold},
		{name: "step up from zero", in: with(base(load(0.9)), func(in *Inputs) { in.Current, in.Min = 0, 0 }), want: 3, reason: ReasonScaleUpAboveThreshold},
		{name: "step down to min", in: with(base(load(0.1)), func(in *Inputs) { in.Current, in.Min = 1, 1 }), want: 1, reason: ReasonTooFewReplicas, limits: []string{ReasonTooFewReplicas}},
		{name: "step down to zero with min 0", in: with(base(load(0.1)), func(in *Inputs) { in.Current, in.Min = 1, 0 }), want: 0, reason: ReasonScaleDownBelowThreshold},
	})
}

// TestStepLevels: a burst is read against the up threshold, demand
// against the middle of the thresholds.
func TestStepLevels(t *testing.T) {
	m := MetricInput{UpThreshold: 0.8, DownThreshold: 0.4, Target: 9}
	if l, name := (stepRule{}).burstLevel(m); l != 0.8 || name != "upThreshold" {
		t.Errorf("burst level %v %s, want 0.8 upThreshold", l, name)
	}
	if l := (stepRule{}).demandLevel(m); math.Abs(l-0.6) > 1e-12 {
		t.Errorf("demand level %v, want 0.6", l)
	}
}

// TestDecideStepWindowThenOneStepPerInterval replays evaluations every 30s: a
// set held at 7, then low load. The first step waits for the window since the
// last hold ask; after it, every low reading steps down by one, to min.
// A hold ask in between starts a new window.
func TestDecideStepWindowThenOneStepPerInterval(t *testing.T) {
	const interval = 30 * time.Second
	window := 5 * time.Minute
	in := base()
	in.Current, in.Min, in.StabilizationWindow = 7, 3, window

	now := t0
	evaluate := func(value float64) Decision {
		in.Now, in.Metrics = now, []MetricInput{load(value)}
		d := Decide(in)
		in.Current, in.Recommendations = d.Desired, d.Recommendations
		now = now.Add(interval)
		return d
	}

	for range 4 {
		evaluate(0.6)
	}
	lastHold := now.Add(-interval)
	var counts []int32
	var firstStep time.Time
	for range 16 {
		at := now
		d := evaluate(0.3)
		if d.Desired < 7 && firstStep.IsZero() {
			firstStep = at
		}
		counts = append(counts, d.Desired)
	}
	if wait := firstStep.Sub(lastHold); wait < window {
		t.Fatalf("first step %v after the last hold ask, want at least the %v window", wait, window)
	}
	want := []int32{7, 7, 7, 7, 7, 7, 7, 7, 7, 6, 5, 4, 3, 3, 3, 3}
	if !reflect.DeepEqual(counts, want) {
		t.Fatalf("counts = %v, want %v", counts, want)
	}

	// A hold ask records the count again, so the next low reading waits a window.
	in.Current = 6
	evaluate(0.6)
	if d := evaluate(0.3); d.Desired != 6 || d.Reason != ReasonScaleDownStabilized {
		t.Fatalf("after a hold ask: %d %s, want 6 %s", d.Desired, d.Reason, ReasonScaleDownStabilized)
	}
}
