package scaling

import (
	"testing"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// TestDecideProportional: the HPA's rule, ceil(serving × value / target),
// with its tolerance, from zero tasks, and without a target.
func TestDecideProportional(t *testing.T) {
	runDecideCases(t, []decideCase{
		{name: "proportional up", in: proportionalBase(load(0.9)), want: 9, reason: ReasonProportionalScaleUp},
		{name: "proportional down", in: proportionalBase(load(0.2)), want: 2, reason: ReasonProportionalScaleDown},
		{name: "proportional within tolerance", in: proportionalBase(load(0.54)), want: 5, reason: ReasonWithinTolerance},
		{name: "proportional just outside tolerance", in: proportionalBase(load(0.56)), want: 6, reason: ReasonProportionalScaleUp},
		{name: "proportional rounds up", in: proportionalBase(load(0.41)), want: 5, reason: ReasonWithinTolerance},
		{name: "proportional zero tolerance", in: with(proportionalBase(load(0.54)), func(in *Inputs) { in.Policy.Tolerance = 0 }), want: 6, reason: ReasonProportionalScaleUp},
		{name: "proportional from zero tasks", in: with(proportionalBase(load(1.2)), func(in *Inputs) { in.Current, in.Min = 0, 0 }), want: 3, reason: ReasonProportionalScaleUp},
		{name: "proportional zero load zero tasks", in: with(proportionalBase(load(0)), func(in *Inputs) { in.Current, in.Min = 0, 0 }), want: 0, reason: ReasonWithinTolerance},
		{name: "proportional zero load", in: with(proportionalBase(load(0)), func(in *Inputs) { in.Min = 0 }), want: 0, reason: ReasonProportionalScaleDown},
		{name: "proportional huge load saturates at max", in: proportionalBase(load(1e300)), want: 20, reason: ReasonTooManyReplicas, limits: []string{ReasonTooManyReplicas}},
		{name: "proportional without target fails", in: proportionalBase(MetricInput{Name: "load", Value: 1}), want: 5, reason: ReasonFailedGetLoadIndex, failures: 1, msg: "target must be"},
	})
}

// TestProportionalLevels: a burst and demand are both read against the
// target.
func TestProportionalLevels(t *testing.T) {
	m := MetricInput{UpThreshold: 0.8, DownThreshold: 0.4, Target: 0.5}
	if l, name := (proportionalRule{}).burstLevel(m); l != 0.5 || name != "target" {
		t.Errorf("burst level %v %s, want 0.5 target", l, name)
	}
	if l := (proportionalRule{}).demandLevel(m); l != 0.5 {
		t.Errorf("demand level %v, want 0.5", l)
	}
}

// TestDecideProportionalKeepsHPAWindow checks that Proportional, whose asks
// are absolute, keeps the HPA rule: recommendations survive a scale-down.
func TestDecideProportionalKeepsHPAWindow(t *testing.T) {
	in := proportionalBase(load(0.25)) // target 0.5: asks ceil(8 × 0.5) = 4
	in.Current, in.StabilizationWindow = 8, 5*time.Minute
	in.Recommendations = []gputaskv1.Recommendation{rec(6*time.Minute, 8), rec(time.Minute, 4)}
	d := Decide(in)
	if d.Desired != 4 || len(d.Recommendations) == 0 {
		t.Fatalf("desired %d recommendations %v, want 4 and the window kept", d.Desired, d.Recommendations)
	}
}
