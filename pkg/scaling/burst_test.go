package scaling

import (
	"strings"
	"testing"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

func burstOn(in Inputs) Inputs {
	in.Burst = &Burst{Factor: 2, Window: time.Minute}
	return in
}

// TestBurst: rule 14, the fast path for bursts.
func TestBurst(t *testing.T) {
	tests := []struct {
		name      string
		in        Inputs
		want      int32
		reason    string
		burstTill time.Time
		msg       string
	}{
		{name: "off: Step adds stepUp", in: base(load(4)), want: 8, reason: ReasonScaleUpAboveThreshold},
		{name: "below the factor: Step adds stepUp", in: burstOn(base(load(1.5))), want: 8, reason: ReasonScaleUpAboveThreshold},
		{name: "Step at 2× its up threshold: what the load asks for at once",
			in: burstOn(base(load(4))), want: 20 /* ceil(5 × 4 / 0.8) = 25, within max 20 */, reason: ReasonTooManyReplicas, burstTill: t0.Add(time.Minute)},
		{name: "Step burst within max", in: with(burstOn(base(load(2))), func(in *Inputs) { in.Max = 100 }),
			want: 13 /* ceil(5 × 2 / 0.8) */, reason: ReasonBurst, burstTill: t0.Add(time.Minute), msg: "load 2 is at least 2× its upThreshold 0.8: a burst; 13 tasks from the 5 serving"},
		{name: "Proportional at 2× target", in: with(burstOn(proportionalBase(load(1.5))), func(in *Inputs) { in.Max = 100 }),
			want: 15 /* ceil(5 × 1.5 / 0.5) */, reason: ReasonBurst, burstTill: t0.Add(time.Minute)},
		{name: "starting tasks do not hold a burst: it counts the serving ones",
			in: with(burstOn(base(load(2))), func(in *Inputs) { in.Max, in.Starting = 100, 3 }), want: 5 /* ceil(2 × 2 / 0.8) = 5 */, reason: ReasonWaitingForStartingTasks, burstTill: t0.Add(time.Minute)},
		{name: "starting tasks, a larger burst scales past them",
			in: with(burstOn(base(load(4))), func(in *Inputs) { in.Max, in.Starting = 100, 3 }), want: 10 /* ceil(2 × 4 / 0.8) */, reason: ReasonBurst, burstTill: t0.Add(time.Minute)},
		{name: "capacity bounds a burst", in: with(burstOn(base(load(4))), func(in *Inputs) { in.Max, in.Capacity = 100, ptrTo[int32](9) }),
			want: 9, reason: ReasonCapacityLimited, burstTill: t0.Add(time.Minute)},
		{name: "scaleUpLimit bounds a burst", in: with(burstOn(base(load(4))), func(in *Inputs) { in.Max, in.ScaleUpLimit = 100, &ScaleUpLimit{Tasks: 4, Period: time.Minute} }),
			want: 9, reason: ReasonScaleUpLimited, burstTill: t0.Add(time.Minute)},
		{name: "no scale-down while the burst lasts", in: with(burstOn(base(load(0.1))), func(in *Inputs) { in.BurstUntil = t0.Add(time.Second) }),
			want: 5, reason: ReasonHeldDuringBurst, burstTill: t0.Add(time.Second), msg: "waits for the burst to pass"},
		{name: "scale-down once it has passed", in: with(burstOn(base(load(0.1))), func(in *Inputs) { in.BurstUntil = t0 }),
			want: 4, reason: ReasonScaleDownBelowThreshold},
		{name: "a burst reading at the count it asks for holds and extends", in: with(burstOn(base(load(1.6))), func(in *Inputs) { in.Current, in.Max = 10, 10 }),
			want: 10, reason: ReasonTooManyReplicas, burstTill: t0.Add(time.Minute)},
		{name: "a failed metric is no burst", in: burstOn(base(failing("load"))), want: 5, reason: ReasonFailedGetLoadIndex},
		{name: "the one-step-per-interval rule still holds", in: with(burstOn(base(load(4))), func(in *Inputs) {
			in.Max, in.Interval, in.LastScaleTime = 100, 30*time.Second, t0.Add(-10*time.Second)
		}), want: 5, reason: ReasonWaitingForInterval, burstTill: t0.Add(time.Minute)},
		{name: "a factor below 1.1 is the default 2", in: with(base(load(1.5)), func(in *Inputs) { in.Burst = &Burst{Factor: 0.5, Window: time.Minute} }),
			want: 8, reason: ReasonScaleUpAboveThreshold},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.in)
			if d.Desired != tc.want || d.Reason != tc.reason {
				t.Errorf("Decide() = %d (%s: %s), want %d (%s)", d.Desired, d.Reason, d.Message, tc.want, tc.reason)
			}
			if !d.BurstUntil.Equal(tc.burstTill) {
				t.Errorf("BurstUntil = %v, want %v", d.BurstUntil, tc.burstTill)
			}
			if tc.msg != "" && !strings.Contains(d.Message, tc.msg) {
				t.Errorf("message %q does not contain %q", d.Message, tc.msg)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

// FuzzBurst: with the fast path on, a decision stays within [Min, Max],
// never scales down while a burst lasts, and a burst reading always sets
// BurstUntil one window ahead.
func FuzzBurst(f *testing.F) {
	f.Add(int32(5), int32(1), int32(20), 4.0, false, 0.5, 2.0, int64(60), int64(0), int32(0), int32(-1))
	f.Add(int32(3), int32(0), int32(3), 0.1, true, 0.5, 1.0, int64(-5), int64(30), int32(2), int32(4))
	f.Add(int32(-1), int32(9), int32(2), 1e300, true, 1e-300, 1e308, int64(1), int64(-30), int32(5), int32(0))
	f.Fuzz(func(t *testing.T, current, minR, maxR int32, value float64, proportionalPolicy bool, target, factor float64,
		windowSec, untilSec int64, starting, capacity int32) {
		in := Inputs{
			Now: t0, Current: current, Min: minR, Max: maxR,
			Metrics:    []MetricInput{{Name: "a", Value: value, UpThreshold: 0.8, DownThreshold: 0.5, Target: target}},
			Burst:      &Burst{Factor: factor, Window: time.Duration(windowSec) * time.Second},
			BurstUntil: t0.Add(time.Duration(untilSec) * time.Second),
			Starting:   starting,
		}
		if proportionalPolicy {
			in.Policy.Type = gputaskv1.ProportionalPolicy
		}
		if capacity >= 0 {
			in.Capacity = &capacity
		}
		d := Decide(in)
		lo := max(minR, 0)
		hi := max(maxR, lo)
		if d.Desired < lo || d.Desired > hi {
			t.Fatalf("Desired %d outside [%d, %d] (%s: %s)", d.Desired, lo, hi, d.Reason, d.Message)
		}
		cur := max(current, 0)
		if t0.Before(in.BurstUntil) && d.Desired < min(cur, hi) && d.Desired >= lo && cur <= hi {
			t.Fatalf("scaled down from %d to %d during a burst (%s: %s)", cur, d.Desired, d.Reason, d.Message)
		}
		if d.Reason == ReasonBurst && !d.BurstUntil.After(t0) && time.Duration(windowSec)*time.Second > 0 {
			t.Fatalf("a burst decision without a burst ahead: BurstUntil %v", d.BurstUntil)
		}
	})
}
