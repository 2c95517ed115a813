package scaling

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func load(v float64) MetricInput {
	return MetricInput{Name: "load", Value: v, UpThreshold: 0.8, DownThreshold: 0.5, Target: 0.5}
}

func named(name string, m MetricInput) MetricInput { m.Name = name; return m }

func failing(name string) MetricInput {
	return MetricInput{Name: name, Err: errors.New("connection refused"), UpThreshold: 0.8, DownThreshold: 0.5, Target: 0.5}
}

func rec(ago time.Duration, n int32) gputaskv1.Recommendation {
	return gputaskv1.Recommendation{Time: metav1.NewTime(t0.Add(-ago)), Replicas: n}
}

// base is a Step set at 5 of [1, 20], stabilization off unless a case sets it.
func base(metrics ...MetricInput) Inputs {
	return Inputs{
		Now: t0, Current: 5, Min: 1, Max: 20,
		Policy:  Policy{Type: gputaskv1.StepPolicy, StepUp: 3, StepDown: 1, Tolerance: 0.1},
		Metrics: metrics, FailureThreshold: 3,
	}
}

func proportionalBase(metrics ...MetricInput) Inputs {
	in := base(metrics...)
	in.Policy.Type = gputaskv1.ProportionalPolicy
	return in
}

func with(in Inputs, mutate func(*Inputs)) Inputs { mutate(&in); return in }

// decideCase is one row of the Decide tables: the inputs and what the
// decision must say.
type decideCase struct {
	name       string
	in         Inputs
	want       int32
	reason     string
	limits     []string
	fallback   bool
	failures   int32
	stabilized bool
	msg        string
}

func runDecideCases(t *testing.T, tests []decideCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.in)
			if d.Desired != tt.want || d.Reason != tt.reason {
				t.Fatalf("Decide = %d %s (%s), want %d %s", d.Desired, d.Reason, d.Message, tt.want, tt.reason)
			}
			if !reflect.DeepEqual(d.Limits, tt.limits) {
				t.Errorf("Limits = %v, want %v", d.Limits, tt.limits)
			}
			if d.Fallback != tt.fallback {
				t.Errorf("Fallback = %v, want %v", d.Fallback, tt.fallback)
			}
			if d.ConsecutiveFailures != tt.failures {
				t.Errorf("ConsecutiveFailures = %d, want %d", d.ConsecutiveFailures, tt.failures)
			}
			if d.Stabilized != tt.stabilized {
				t.Errorf("Stabilized = %v, want %v", d.Stabilized, tt.stabilized)
			}
			if !strings.Contains(d.Message, tt.msg) {
				t.Errorf("Message %q does not contain %q", d.Message, tt.msg)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	runDecideCases(t, []decideCase{
		// Bounds.
		{name: "capped at max", in: with(base(load(0.9)), func(in *Inputs) { in.Max = 6 }), want: 6, reason: ReasonTooManyReplicas, limits: []string{ReasonTooManyReplicas}, msg: "capped at maxReplicas 6"},
		{name: "at max holds", in: with(base(load(0.9)), func(in *Inputs) { in.Max = 5 }), want: 5, reason: ReasonTooManyReplicas, limits: []string{ReasonTooManyReplicas}},
		{name: "below min raised", in: with(base(load(0.6)), func(in *Inputs) { in.Current, in.Min = 0, 2 }), want: 2, reason: ReasonTooFewReplicas, limits: []string{ReasonTooFewReplicas}},
		{name: "above max lowered", in: with(base(load(0.6)), func(in *Inputs) { in.Current = 30 }), want: 20, reason: ReasonTooManyReplicas, limits: []string{ReasonTooManyReplicas}},
		{name: "max below min is raised to min", in: with(base(load(0.6)), func(in *Inputs) { in.Min, in.Max = 7, 3 }), want: 7, reason: ReasonTooFewReplicas, limits: []string{ReasonTooFewReplicas}},

		// Several metrics.
		{name: "largest desired wins", in: base(named("a", load(0.2)), named("b", load(0.9))), want: 8, reason: ReasonScaleUpAboveThreshold},
		{name: "all down scales down", in: base(named("a", load(0.2)), named("b", load(0.1))), want: 4, reason: ReasonScaleDownBelowThreshold},
		{name: "hold beats down", in: base(named("a", load(0.2)), named("b", load(0.6))), want: 5, reason: ReasonWithinThresholds},
		{name: "partial failure may scale up", in: base(failing("a"), named("b", load(0.9))), want: 8, reason: ReasonScaleUpAboveThreshold, failures: 1},
		{name: "partial failure never scales down", in: base(failing("a"), named("b", load(0.1))), want: 5, reason: ReasonFailedGetLoadIndex, failures: 1, msg: `not scaling down to 4 while "a" failed`},
		{name: "partial failure holds", in: base(failing("a"), named("b", load(0.6))), want: 5, reason: ReasonWithinThresholds, failures: 1},
		{name: "partial failure does not use fallback", in: with(base(failing("a"), named("b", load(0.6))), func(in *Inputs) {
			in.ConsecutiveFailures, in.Fallback = 5, ptr.To[int32](2)
		}), want: 5, reason: ReasonWithinThresholds, failures: 6},

		// All metrics failing.
		{name: "failure holds", in: base(failing("a")), want: 5, reason: ReasonFailedGetLoadIndex, failures: 1, msg: "connection refused"},
		{name: "failure counts up", in: with(base(failing("a")), func(in *Inputs) { in.ConsecutiveFailures = 1 }), want: 5, reason: ReasonFailedGetLoadIndex, failures: 2},
		{name: "fallback before threshold holds", in: with(base(failing("a")), func(in *Inputs) {
			in.ConsecutiveFailures, in.Fallback = 1, ptr.To[int32](10)
		}), want: 5, reason: ReasonFailedGetLoadIndex, failures: 2},
		{name: "fallback at threshold", in: with(base(failing("a")), func(in *Inputs) {
			in.ConsecutiveFailures, in.Fallback = 2, ptr.To[int32](10)
		}), want: 10, reason: ReasonFallbackReplicas, fallback: true, failures: 3, msg: "failed 3 times in a row"},
		{name: "fallback clamped to max", in: with(base(failing("a")), func(in *Inputs) {
			in.ConsecutiveFailures, in.Fallback = 7, ptr.To[int32](50)
		}), want: 20, reason: ReasonTooManyReplicas, limits: []string{ReasonTooManyReplicas}, fallback: true, failures: 8},
		{name: "fallback zero clamped to min", in: with(base(failing("a")), func(in *Inputs) {
			in.ConsecutiveFailures, in.Fallback = 7, ptr.To[int32](0)
		}), want: 1, reason: ReasonTooFewReplicas, limits: []string{ReasonTooFewReplicas}, fallback: true, failures: 8},
		{name: "fallback below current ignores stabilization", in: with(base(failing("a")), func(in *Inputs) {
			in.ConsecutiveFailures, in.Fallback = 2, ptr.To[int32](2)
			in.StabilizationWindow, in.Recommendations = 5*time.Minute, []gputaskv1.Recommendation{rec(time.Minute, 9)}
		}), want: 2, reason: ReasonFallbackReplicas, fallback: true, failures: 3},
		{name: "no metrics holds", in: base(), want: 5, reason: ReasonFailedGetLoadIndex, failures: 1, msg: "no metrics"},
		{name: "NaN value is a failure", in: base(load(math.NaN())), want: 5, reason: ReasonFailedGetLoadIndex, failures: 1, msg: "invalid load index"},
		{name: "negative value is a failure", in: base(load(-1)), want: 5, reason: ReasonFailedGetLoadIndex, failures: 1},
		{name: "success resets failures", in: with(base(load(0.6)), func(in *Inputs) { in.ConsecutiveFailures = 4 }), want: 5, reason: ReasonWithinThresholds},
		{name: "failure below min still raises to min", in: with(base(failing("a")), func(in *Inputs) { in.Current, in.Min = 0, 2 }), want: 2, reason: ReasonTooFewReplicas, limits: []string{ReasonTooFewReplicas}, failures: 1},

		// Stabilization.
		{name: "scale-down stabilized by window", in: with(base(load(0.1)), func(in *Inputs) {
			in.StabilizationWindow = 5 * time.Minute
			in.Recommendations = []gputaskv1.Recommendation{rec(4*time.Minute, 9), rec(time.Minute, 6)}
		}), want: 5, reason: ReasonScaleDownStabilized, stabilized: true},
		{name: "stabilized partway", in: with(base(load(0.1)), func(in *Inputs) {
			in.Current, in.Policy.StepDown = 8, 4
			in.StabilizationWindow = 5 * time.Minute
			in.Recommendations = []gputaskv1.Recommendation{rec(time.Minute, 6)}
		}), want: 6, reason: ReasonScaleDownStabilized, stabilized: true, msg: "held at 6"},
		{name: "old recommendations expire", in: with(base(load(0.1)), func(in *Inputs) {
			in.StabilizationWindow = 5 * time.Minute
			in.Recommendations = []gputaskv1.Recommendation{rec(6*time.Minute, 9)}
		}), want: 4, reason: ReasonScaleDownBelowThreshold},
		{name: "stabilization never blocks scale-up", in: with(base(load(0.9)), func(in *Inputs) {
			in.StabilizationWindow = 5 * time.Minute
			in.Recommendations = []gputaskv1.Recommendation{rec(time.Minute, 2)}
		}), want: 8, reason: ReasonScaleUpAboveThreshold},

		// Scale-up limit.
		{name: "scale-up limited in size", in: with(base(load(0.9)), func(in *Inputs) {
			in.ScaleUpLimit = &ScaleUpLimit{Tasks: 2, Period: time.Minute}
		}), want: 7, reason: ReasonScaleUpLimited, limits: []string{ReasonScaleUpLimited}},
		{name: "scale-up waits for period", in: with(base(load(0.9)), func(in *Inputs) {
			in.ScaleUpLimit = &ScaleUpLimit{Tasks: 2, Period: time.Minute}
			in.LastScaleTime = t0.Add(-30 * time.Second)
		}), want: 5, reason: ReasonScaleUpLimited, limits: []string{ReasonScaleUpLimited}, msg: "waits 30s"},
		{name: "scale-up after period", in: with(base(load(0.9)), func(in *Inputs) {
			in.ScaleUpLimit = &ScaleUpLimit{Tasks: 5, Period: time.Minute}
			in.LastScaleTime = t0.Add(-time.Minute)
		}), want: 8, reason: ReasonScaleUpAboveThreshold},
		{name: "scale-up limit does not block scale-down", in: with(base(load(0.1)), func(in *Inputs) {
			in.ScaleUpLimit = &ScaleUpLimit{Tasks: 1, Period: time.Hour}
			in.LastScaleTime = t0
		}), want: 4, reason: ReasonScaleDownBelowThreshold},

		// Capacity.
		{name: "capacity caps scale-up", in: with(base(load(0.9)), func(in *Inputs) { in.Capacity = ptr.To[int32](6) }),
			want: 6, reason: ReasonCapacityLimited, limits: []string{ReasonCapacityLimited}, msg: "only 6 tasks fit the GPU nodes"},
		{name: "a queue's quota caps scale-up", in: with(base(load(0.9)), func(in *Inputs) {
			in.Capacity, in.CapacityLimit = ptr.To[int32](6), "the quota of ClusterQueue team-a"
		}), want: 6, reason: ReasonCapacityLimited, limits: []string{ReasonCapacityLimited}, msg: "only 6 tasks fit the quota of ClusterQueue team-a"},
		{name: "capacity below current holds", in: with(base(load(0.9)), func(in *Inputs) { in.Capacity = ptr.To[int32](2) }),
			want: 5, reason: ReasonCapacityLimited, limits: []string{ReasonCapacityLimited}, msg: "held at 5: only 2 tasks fit the GPU nodes"},
		{name: "capacity never forces scale-down", in: with(base(load(0.6)), func(in *Inputs) { in.Capacity = ptr.To[int32](2) }),
			want: 5, reason: ReasonWithinThresholds},
		{name: "capacity above desired", in: with(base(load(0.9)), func(in *Inputs) { in.Capacity = ptr.To[int32](100) }),
			want: 8, reason: ReasonScaleUpAboveThreshold},
		{name: "min beats capacity", in: with(base(load(0.6)), func(in *Inputs) { in.Current, in.Min, in.Capacity = 1, 3, ptr.To[int32](2) }),
			want: 3, reason: ReasonTooFewReplicas, limits: []string{ReasonTooFewReplicas, ReasonCapacityLimited}},

		// Young tasks.
		{name: "held back tasks block scale-down", in: with(base(load(0.1)), func(in *Inputs) { in.HeldBack = 2 }),
			want: 5, reason: ReasonTasksTooYoung, msg: "2 tasks are younger"},
		{name: "held back tasks allow scale-up", in: with(base(load(0.9)), func(in *Inputs) { in.HeldBack = 2 }),
			want: 8, reason: ReasonScaleUpAboveThreshold},

		// Paused and stopped.
		{name: "paused keeps current", in: with(base(load(0.9)), func(in *Inputs) { in.Paused = true }),
			want: 5, reason: ReasonPaused, msg: "would scale to 8"},
		{name: "stopped keeps current", in: with(base(load(0.9)), func(in *Inputs) { in.Stopped, in.Paused = true, true }),
			want: 5, reason: ReasonStopped, msg: "would scale to 8"},
		{name: "paused keeps out-of-range current", in: with(base(load(0.6)), func(in *Inputs) { in.Paused, in.Current = true, 40 }),
			want: 40, reason: ReasonPaused, limits: []string{ReasonTooManyReplicas}},
		{name: "dry run decides normally", in: with(base(load(0.9)), func(in *Inputs) { in.DryRun = true }),
			want: 8, reason: ReasonScaleUpAboveThreshold},
	})
}

func TestDecideRecommendations(t *testing.T) {
	window := 5 * time.Minute
	tests := []struct {
		name string
		in   Inputs
		want []gputaskv1.Recommendation
	}{
		{name: "first recommendation recorded", in: with(base(load(0.9)), func(in *Inputs) { in.StabilizationWindow = window }),
			want: []gputaskv1.Recommendation{rec(0, 8)}},
		{name: "expired and dominated entries pruned", in: with(base(load(0.6)), func(in *Inputs) {
			in.StabilizationWindow = window
			in.Recommendations = []gputaskv1.Recommendation{rec(10*time.Minute, 20), rec(3*time.Minute, 9), rec(2*time.Minute, 4), rec(time.Minute, 5)}
		}), want: []gputaskv1.Recommendation{rec(3*time.Minute, 9), rec(0, 5)}},
		{name: "unsorted input is ordered", in: with(base(load(0.1)), func(in *Inputs) {
			in.StabilizationWindow = window
			in.Recommendations = []gputaskv1.Recommendation{rec(time.Minute, 6), rec(2*time.Minute, 7)}
		}), want: []gputaskv1.Recommendation{rec(2*time.Minute, 7), rec(time.Minute, 6), rec(0, 4)}},
		{name: "recommendation is bounded", in: with(base(load(0.9)), func(in *Inputs) { in.StabilizationWindow, in.Max = window, 6 }),
			want: []gputaskv1.Recommendation{rec(0, 6)}},
		{name: "failure records nothing", in: with(base(failing("a")), func(in *Inputs) {
			in.StabilizationWindow = window
			in.Recommendations = []gputaskv1.Recommendation{rec(time.Minute, 6)}
		}), want: []gputaskv1.Recommendation{rec(time.Minute, 6)}},
		{name: "no window keeps nothing", in: with(base(load(0.9)), func(in *Inputs) {
			in.Recommendations = []gputaskv1.Recommendation{rec(time.Minute, 6)}
		}), want: nil},
		{name: "paused still records", in: with(base(load(0.9)), func(in *Inputs) { in.StabilizationWindow, in.Paused = window, true }),
			want: []gputaskv1.Recommendation{rec(0, 8)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.in)
			if !reflect.DeepEqual(d.Recommendations, tt.want) {
				t.Errorf("Recommendations = %v, want %v", d.Recommendations, tt.want)
			}
		})
	}
}

func TestDecideDoesNotModifyInputs(t *testing.T) {
	in := with(base(load(0.9)), func(in *Inputs) {
		in.StabilizationWindow = 5 * time.Minute
		in.Recommendations = []gputaskv1.Recommendation{rec(2*time.Minute, 3), rec(time.Minute, 4)}
	})
	before := append([]gputaskv1.Recommendation(nil), in.Recommendations...)
	Decide(in)
	if !reflect.DeepEqual(in.Recommendations, before) {
		t.Errorf("Decide modified its input: %v, was %v", in.Recommendations, before)
	}
}

func TestDecideMetricsAndSummary(t *testing.T) {
	d := Decide(base(named("a", load(0.2)), failing("b"), named("c", load(0.9))))
	if d.Winner != 2 {
		t.Errorf("Winner = %d, want 2", d.Winner)
	}
	if got := []int32{d.Metrics[0].Desired, d.Metrics[2].Desired}; !reflect.DeepEqual(got, []int32{4, 8}) {
		t.Errorf("per-metric desired = %v, want [4 8]", got)
	}
	if d.Metrics[1].Err == nil {
		t.Error("metric b has no error")
	}
	want := "a: load=0.2 up=0.8 down=0.5, b: error up=0.8 down=0.5, c: load=0.9 up=0.8 down=0.5"
	if d.Inputs != want {
		t.Errorf("Inputs = %q, want %q", d.Inputs, want)
	}
	if got := d.Direction(5); got != "up" {
		t.Errorf("Direction = %q, want up", got)
	}
}

func TestDecideIsDeterministic(t *testing.T) {
	in := with(base(named("a", load(0.9)), named("b", load(0.95))), func(in *Inputs) { in.StabilizationWindow = time.Minute })
	first := Decide(in)
	for i := 0; i < 10; i++ {
		if got := Decide(in); !reflect.DeepEqual(got, first) {
			t.Fatalf("Decide differed on run %d: %+v vs %+v", i, got, first)
		}
	}
}

// FuzzDecide checks that Decide never panics and, unless paused or stopped,
// always lands within [Min, Max] (after the same normalization Decide does:
// negative bounds count as 0 and Max below Min counts as Min). Paused and
// stopped sets keep their current count, whatever it is. A failure never
// lowers the count except through a configured fallback or Max.
func FuzzDecide(f *testing.F) {
	f.Add(int32(5), int32(1), int32(20), 0.91, false, 0.5, uint8(0), int32(0), int32(-1), int32(-1), int32(0), int64(0), false)
	f.Add(int32(0), int32(0), int32(3), 0.0, true, 0.5, uint8(1), int32(2), int32(1), int32(2), int32(1), int64(60), true)
	f.Add(int32(30), int32(2), int32(10), math.Inf(1), false, 0.0, uint8(2), int32(5), int32(7), int32(0), int32(0), int64(-5), false)
	f.Add(int32(-3), int32(9), int32(2), 1e300, true, 1e-300, uint8(3), int32(1), int32(-1), int32(100), int32(3), int64(1), false)
	f.Fuzz(func(t *testing.T, current, minR, maxR int32, value float64, proportionalPolicy bool, target float64,
		failMask uint8, failures, fallback, capacity, heldBack int32, lastScaleAgo int64, paused bool) {
		in := Inputs{
			Now: t0, Current: current, Min: minR, Max: maxR,
			Metrics: []MetricInput{
				{Name: "a", Value: value, UpThreshold: 0.8, DownThreshold: 0.5, Target: target},
				{Name: "b", Value: value / 2, UpThreshold: 0.8, DownThreshold: 0.5, Target: target},
			},
			ConsecutiveFailures: failures, HeldBack: heldBack, Paused: paused,
			StabilizationWindow: time.Minute,
			Recommendations:     []gputaskv1.Recommendation{rec(30*time.Second, current), rec(2*time.Minute, maxR)},
			ScaleUpLimit:        &ScaleUpLimit{Tasks: 2, Period: time.Minute},
			LastScaleTime:       t0.Add(-time.Duration(lastScaleAgo) * time.Second),
		}
		if proportionalPolicy {
			in.Policy.Type = gputaskv1.ProportionalPolicy
		}
		for i := range in.Metrics {
			if failMask&(1<<i) != 0 {
				in.Metrics[i].Err = errors.New("boom")
			}
		}
		if fallback >= 0 {
			in.Fallback = &fallback
		}
		if capacity >= 0 {
			in.Capacity = &capacity
		}
		d := Decide(in)
		lo := max(minR, 0)
		hi := max(maxR, lo)
		cur := max(current, 0)
		if paused {
			if d.Desired != cur {
				t.Fatalf("paused: Desired = %d, want current %d", d.Desired, cur)
			}
			return
		}
		if d.Desired < lo || d.Desired > hi {
			t.Fatalf("Desired %d outside [%d, %d] (%s: %s)", d.Desired, lo, hi, d.Reason, d.Message)
		}
		if d.AllFailed && !d.Fallback && d.Desired < min(cur, hi) {
			t.Fatalf("failure lowered %d to %d (%s)", cur, d.Desired, d.Message)
		}
		if d.Reason == "" || d.Message == "" {
			t.Fatalf("empty reason or message: %+v", d)
		}
	})
}

// BenchmarkDecide measures one decision with three metrics, a full
// stabilization history and every limit on. Target: under 50µs, so the
// decision never matters next to reading the load index.
func BenchmarkDecide(b *testing.B) {
	in := with(base(named("a", load(0.2)), failing("b"), named("c", load(0.9))), func(in *Inputs) {
		in.StabilizationWindow = 5 * time.Minute
		in.ScaleUpLimit = &ScaleUpLimit{Tasks: 2, Period: time.Minute}
		in.Capacity = ptr.To[int32](7)
		for i := 0; i < 10; i++ {
			in.Recommendations = append(in.Recommendations, rec(time.Duration(10-i)*30*time.Second, int32(20-i)))
		}
	})
	b.ReportAllocs()
	for b.Loop() {
		Decide(in)
	}
}
