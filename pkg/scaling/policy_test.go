package scaling

import (
	"reflect"
	"strings"
	"testing"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// TestRuleFor: the policy type picks the rule, the inputs pick the
// modifiers around it, and the SLO policy takes neither burst nor the
// level-based forecast.
func TestRuleFor(t *testing.T) {
	on := func(typ gputaskv1.ScalingPolicyType, mutate func(*Inputs)) Inputs {
		in := Inputs{Policy: Policy{Type: typ}}
		if mutate != nil {
			mutate(&in)
		}
		return in
	}
	all := func(in *Inputs) {
		in.Burst, in.Predictive, in.Schedule = &Burst{}, &Predictive{}, &Window{}
	}
	for _, tc := range []struct {
		name string
		in   Inputs
		want rule
	}{
		{"step", on(gputaskv1.StepPolicy, nil), stepRule{}},
		{"an unknown type is Step", on("Fancy", nil), stepRule{}},
		{"proportional", on(gputaskv1.ProportionalPolicy, nil), proportionalRule{}},
		{"slo", on(gputaskv1.SLOPolicy, nil), sloRule{}},
		{"step with every modifier", on(gputaskv1.StepPolicy, all),
			scheduled{bursting{forecasting{stepRule{}, stepRule{}}, stepRule{}}}},
		{"proportional with a burst", on(gputaskv1.ProportionalPolicy, func(in *Inputs) { in.Burst = &Burst{} }),
			bursting{proportionalRule{}, proportionalRule{}}},
		{"slo with every modifier keeps the schedule only", on(gputaskv1.SLOPolicy, all), scheduled{sloRule{}}},
	} {
		if got := ruleFor(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %#v, want %#v", tc.name, got, tc.want)
		}
	}
}

// TestCheckMetrics: only a policy that reads roles refuses metrics
// without them.
func TestCheckMetrics(t *testing.T) {
	noRoles := []MetricInput{{Name: "load"}}
	for _, tc := range []struct {
		typ    gputaskv1.ScalingPolicyType
		reason string
	}{
		{gputaskv1.StepPolicy, ""},
		{gputaskv1.ProportionalPolicy, ""},
		{gputaskv1.SLOPolicy, ReasonMissingMetricRole},
	} {
		if reason, _ := CheckMetrics(Policy{Type: tc.typ}, noRoles); reason != tc.reason {
			t.Errorf("%s: reason %q, want %q", tc.typ, reason, tc.reason)
		}
	}
}

// TestScheduledModifier: a schedule wraps any policy and bounds it the
// same way; here an SLO set with no load is held up by the floor.
func TestScheduledModifier(t *testing.T) {
	in := with(sloBase(0, 0), func(in *Inputs) {
		in.Schedule = &Window{Name: "day", Min: 4}
		in.Interval = time.Second
	})
	d := Decide(in)
	if d.Desired != 4 || d.Reason != ReasonTooFewReplicas || !strings.Contains(d.Message, "raised to minReplicas 4 of schedule day") {
		t.Errorf("got %d %s: %s", d.Desired, d.Reason, d.Message)
	}
}
