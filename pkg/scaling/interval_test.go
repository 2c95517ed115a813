package scaling

import (
	"testing"
	"time"
)

func TestNextStep(t *testing.T) {
	tests := []struct {
		name     string
		last     time.Time
		interval time.Duration
		ok       bool
		wait     time.Duration
	}{
		{name: "never scaled", last: time.Time{}, interval: 30 * time.Second, ok: true},
		{name: "no interval", last: t0, interval: 0, ok: true},
		{name: "just scaled", last: t0, interval: 30 * time.Second, wait: 30 * time.Second},
		{name: "within the interval", last: t0.Add(-20 * time.Second), interval: 30 * time.Second, wait: 10 * time.Second},
		{name: "exactly one interval", last: t0.Add(-30 * time.Second), interval: 30 * time.Second, ok: true},
		{name: "long ago", last: t0.Add(-time.Hour), interval: 30 * time.Second, ok: true},
		{name: "last step in the future (clock skew) waits", last: t0.Add(5 * time.Second), interval: 30 * time.Second, wait: 35 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, wait := NextStep(tt.last, tt.interval, t0)
			if ok != tt.ok || wait != tt.wait {
				t.Errorf("NextStep = %v %v, want %v %v", ok, wait, tt.ok, tt.wait)
			}
		})
	}
}

func TestDecideOneStepPerInterval(t *testing.T) {
	const interval = 5 * time.Second
	tests := []struct {
		name   string
		in     Inputs
		want   int32
		reason string
		retry  time.Duration
	}{
		{name: "step after a full interval", in: with(base(load(0.9)), func(in *Inputs) { in.Interval, in.LastScaleTime = interval, t0.Add(-interval) }),
			want: 8, reason: ReasonScaleUpAboveThreshold},
		{name: "step within the interval waits", in: with(base(load(0.9)), func(in *Inputs) { in.Interval, in.LastScaleTime = interval, t0.Add(-2*time.Second) }),
			want: 5, reason: ReasonWaitingForInterval, retry: 3 * time.Second},
		{name: "scale-down within the interval waits", in: with(base(load(0.1)), func(in *Inputs) { in.Interval, in.LastScaleTime = interval, t0.Add(-time.Second) }),
			want: 5, reason: ReasonWaitingForInterval, retry: 4 * time.Second},
		{name: "a raised minReplicas waits too", in: with(base(load(0.6)), func(in *Inputs) { in.Min, in.Interval, in.LastScaleTime = 9, interval, t0 }),
			want: 5, reason: ReasonWaitingForInterval, retry: interval},
		{name: "a hold is not a step", in: with(base(load(0.6)), func(in *Inputs) { in.Interval, in.LastScaleTime = interval, t0 }),
			want: 5, reason: ReasonWithinThresholds},
		{name: "paused keeps its reason", in: with(base(load(0.9)), func(in *Inputs) { in.Paused, in.Interval, in.LastScaleTime = true, interval, t0 }),
			want: 5, reason: ReasonPaused, retry: interval},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.in)
			if d.Desired != tt.want || d.Reason != tt.reason || d.RetryAfter != tt.retry {
				t.Fatalf("Decide = %d %s retry %v (%s), want %d %s retry %v", d.Desired, d.Reason, d.RetryAfter, d.Message, tt.want, tt.reason, tt.retry)
			}
		})
	}
}

// TestDecideStepsNeverCloserThanInterval replays what used to cause double
// steps: evaluations far more often than the interval (a spec edit, an
// annotation toggle, a retry after an error), under a steady load of 0.9.
// Whatever the cadence of evaluations, the count changes at most once per
// interval.
func TestDecideStepsNeverCloserThanInterval(t *testing.T) {
	const interval = 5 * time.Second
	in := base()
	in.Max, in.Interval = 1000, interval
	var steps []time.Time
	// Evaluate at irregular times, 0.2s to 2.4s apart, for 60s.
	gaps := []time.Duration{200 * time.Millisecond, 2400 * time.Millisecond, 300 * time.Millisecond, time.Second, 5 * time.Second, 100 * time.Millisecond}
	now := t0
	for i := 0; now.Before(t0.Add(time.Minute)); i++ {
		in.Now, in.Metrics = now, []MetricInput{load(0.9)}
		d := Decide(in)
		if d.Desired != in.Current {
			steps = append(steps, now)
			in.Current, in.LastScaleTime = d.Desired, now
		}
		now = now.Add(gaps[i%len(gaps)])
	}
	if len(steps) < 6 {
		t.Fatalf("only %d steps in a minute at a %v interval", len(steps), interval)
	}
	for i := 1; i < len(steps); i++ {
		if gap := steps[i].Sub(steps[i-1]); gap < interval {
			t.Errorf("steps %d and %d are %v apart, want at least %v", i-1, i, gap, interval)
		}
	}
}
