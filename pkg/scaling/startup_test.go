package scaling

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

func TestCountStarting(t *testing.T) {
	const timeout = 10 * time.Minute
	task := func(name string, age time.Duration, ready bool) TaskStart {
		return TaskStart{Name: name, Created: t0.Add(-age), Ready: ready}
	}
	tests := []struct {
		name      string
		tasks     []TaskStart
		current   int32
		lastScale time.Time
		timeout   time.Duration
		want      Startup
	}{
		{name: "no tasks", want: Startup{}},
		{name: "all ready", tasks: []TaskStart{task("a", time.Hour, true), task("b", time.Minute, true)}, current: 2,
			want: Startup{Ready: 2}},
		{name: "young unready tasks are starting", tasks: []TaskStart{task("a", time.Hour, true), task("b", time.Minute, false), task("c", 4*time.Minute, false)}, current: 3,
			want: Startup{Ready: 1, Starting: 2, NextExpiry: 6 * time.Minute, Ages: []time.Duration{time.Minute, 4 * time.Minute}}},
		{name: "timed out tasks no longer count", tasks: []TaskStart{task("z", 11*time.Minute, false), task("b", time.Minute, false), task("a", timeout, false)}, current: 3,
			want: Startup{Starting: 1, Expired: []string{"a", "z"}, NextExpiry: 9 * time.Minute, Ages: []time.Duration{time.Minute}}},
		{name: "tasks asked for but not created are starting", tasks: []TaskStart{task("a", time.Hour, true)}, current: 4, lastScale: t0.Add(-time.Minute),
			want: Startup{Ready: 1, Starting: 3, NextExpiry: 9 * time.Minute, Asked: time.Minute}},
		{name: "missing tasks stop counting after the timeout", tasks: []TaskStart{task("a", time.Hour, true)}, current: 4, lastScale: t0.Add(-timeout),
			want: Startup{Ready: 1}},
		{name: "missing tasks without an autoscaler step do not count", tasks: []TaskStart{task("a", time.Hour, true)}, current: 4,
			want: Startup{Ready: 1}},
		{name: "more tasks than current (scale-in under way)", tasks: []TaskStart{task("a", time.Hour, true), task("b", time.Minute, false)}, current: 1, lastScale: t0,
			want: Startup{Ready: 1, Starting: 1, NextExpiry: 9 * time.Minute, Ages: []time.Duration{time.Minute}}},
		{name: "queued tasks wait for quota, not for a start", tasks: []TaskStart{task("a", time.Hour, true), {Name: "q", Created: t0.Add(-time.Minute), Queued: true},
			{Name: "old", Created: t0.Add(-time.Hour), Queued: true}, task("b", time.Minute, false)}, current: 4,
			want: Startup{Ready: 1, Queued: 2, Starting: 1, NextExpiry: 9 * time.Minute, Ages: []time.Duration{time.Minute}}},
		{name: "zero timeout means the default", tasks: []TaskStart{task("a", 5*time.Minute, false)}, current: 1, timeout: -1,
			want: Startup{Starting: 1, NextExpiry: 5 * time.Minute, Ages: []time.Duration{5 * time.Minute}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			to := timeout
			if tt.timeout != 0 {
				to = tt.timeout
			}
			got := CountStarting(tt.tasks, tt.current, tt.lastScale, to, t0)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("CountStarting = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestStartupServeFor(t *testing.T) {
	tests := []struct {
		name             string
		st               Startup
		startup, slowest time.Duration
		want             time.Duration
	}{
		{name: "none starting", startup: 2 * time.Minute},
		{name: "each for as long as it has been on its way", st: Startup{Starting: 2, Ages: []time.Duration{time.Minute, 30 * time.Second}},
			startup: 2 * time.Minute, want: 90 * time.Second},
		{name: "one later than the start-up serves it whole, not its age", st: Startup{Starting: 2, Ages: []time.Duration{9 * time.Minute, 10 * time.Second}},
			startup: 2 * time.Minute, want: 130 * time.Second},
		{name: "tasks not created yet since they were asked for", st: Startup{Starting: 4, Ages: []time.Duration{time.Minute}, Asked: 20 * time.Second},
			startup: 2 * time.Minute, want: 2 * time.Minute},
		{name: "asked for longer ago than a start-up", st: Startup{Starting: 2, Asked: 5 * time.Minute},
			startup: 2 * time.Minute, want: 4 * time.Minute},
		{name: "saturates", st: Startup{Starting: math.MaxInt32, Asked: time.Hour},
			startup: time.Hour, want: math.MaxInt64},
		// The slowest recent start took a minute more than the median: a
		// task on its way serves a minute less than it has been on it,
		// none while younger than that minute, and still at most startup.
		{name: "less how much slower the slowest start was", st: Startup{Starting: 3, Ages: []time.Duration{90 * time.Second, 30 * time.Second, 9 * time.Minute}},
			startup: 2 * time.Minute, slowest: 3 * time.Minute, want: 150 * time.Second},
		{name: "tasks not created yet, less the same", st: Startup{Starting: 2, Asked: 100 * time.Second},
			startup: 2 * time.Minute, slowest: 3 * time.Minute, want: 80 * time.Second},
		{name: "a slowest under the median is no spread", st: Startup{Starting: 1, Ages: []time.Duration{time.Minute}},
			startup: 2 * time.Minute, slowest: time.Second, want: time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			slowest := tt.slowest
			if slowest == 0 {
				slowest = tt.startup
			}
			if got := tt.st.ServeFor(tt.startup, slowest); got != tt.want {
				t.Errorf("ServeFor(%v, %v) = %v, want %v", tt.startup, slowest, got, tt.want)
			}
		})
	}
}

func TestDecideStartupAware(t *testing.T) {
	tests := []struct {
		name   string
		in     Inputs
		want   int32
		reason string
		msg    string
	}{
		{name: "step waits for starting tasks", in: with(base(load(0.9)), func(in *Inputs) { in.Starting = 3 }),
			want: 5, reason: ReasonWaitingForStartingTasks, msg: "3 tasks are starting"},
		{name: "step steps once they are ready", in: base(load(0.9)), want: 8, reason: ReasonScaleUpAboveThreshold},
		{name: "starting tasks do not hold scale-down", in: with(base(load(0.1)), func(in *Inputs) { in.Starting = 3 }),
			want: 4, reason: ReasonScaleDownBelowThreshold},
		{name: "starting tasks do not hold a hold", in: with(base(load(0.6)), func(in *Inputs) { in.Starting = 3 }),
			want: 5, reason: ReasonWithinThresholds},
		{name: "min still applies", in: with(base(load(0.9)), func(in *Inputs) { in.Starting, in.Min = 3, 7 }),
			want: 7, reason: ReasonTooFewReplicas},
		{name: "fallback is not held", in: with(base(failing("a")), func(in *Inputs) {
			in.Starting, in.ConsecutiveFailures, in.Fallback = 3, 5, func() *int32 { v := int32(9); return &v }()
		}), want: 9, reason: ReasonFallbackReplicas},
		// Proportional at 5 tasks, target 0.5: load 0.9 asks ceil(5 × 1.8) = 9.
		{name: "proportional from serving tasks", in: with(proportionalBase(load(0.9)), func(in *Inputs) { in.Starting = 1 }),
			want: 8, reason: ReasonProportionalScaleUp, msg: "computed from the 4 serving tasks, as 1 are starting"},
		// The 3 serving tasks at 0.6 against 0.5 need 4: one of the 2
		// starting tasks is not needed (the HPA's Ready-pods rule).
		{name: "proportional scales down from the serving tasks", in: with(proportionalBase(load(0.6)), func(in *Inputs) { in.Starting = 2 }),
			want: 4, reason: ReasonProportionalScaleDown, msg: "asks for 4 tasks"},
		{name: "a recommendation still holds that scale-down", in: with(proportionalBase(load(0.6)), func(in *Inputs) {
			in.Starting, in.StabilizationWindow = 2, time.Minute
			in.Recommendations = []gputaskv1.Recommendation{rec(30*time.Second, 5)}
		}), want: 5, reason: ReasonScaleDownStabilized},
		{name: "proportional within tolerance of the serving tasks holds", in: with(proportionalBase(load(0.54)), func(in *Inputs) { in.Starting = 2 }),
			want: 5, reason: ReasonWithinTolerance},
		{name: "proportional with every task starting waits", in: with(proportionalBase(load(2)), func(in *Inputs) { in.Starting = 5 }),
			want: 5, reason: ReasonWaitingForStartingTasks},
		{name: "starting above current is clamped", in: with(base(load(0.9)), func(in *Inputs) { in.Starting = 50 }),
			want: 5, reason: ReasonWaitingForStartingTasks, msg: "5 tasks are starting"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.in)
			if d.Desired != tt.want || d.Reason != tt.reason {
				t.Fatalf("Decide = %d %s (%s), want %d %s", d.Desired, d.Reason, d.Message, tt.want, tt.reason)
			}
			if !strings.Contains(d.Message, tt.msg) {
				t.Errorf("Message %q does not contain %q", d.Message, tt.msg)
			}
		})
	}
}

// TestDecideRecordsWhatTheServingTasksAsk: a reading taken while half the
// set loads is recorded as what the serving tasks ask for. Multiplied by
// spec.replicas it would record twice the need, and the window would keep
// that overshoot for its whole length once the load falls.
func TestDecideRecordsWhatTheServingTasksAsk(t *testing.T) {
	in := proportionalBase(load(1))
	in.Current, in.Starting, in.Max, in.StabilizationWindow = 10, 5, 100, 5*time.Minute
	d := Decide(in)
	if d.Desired != 10 {
		t.Fatalf("Desired = %d (%s), want 10: the 5 serving tasks at 1 against 0.5 ask for 10", d.Desired, d.Message)
	}
	if n := len(d.Recommendations); n == 0 || d.Recommendations[n-1].Replicas != 10 {
		t.Fatalf("Recommendations = %v, want the last one 10", d.Recommendations)
	}
}

// TestDecideSlowStartsOneStepPerBatch replays a Step set under a steady
// load of 0.9 whose tasks take 3 intervals to become Ready: the count grows
// one step per batch of Ready tasks, not one step per interval.
func TestDecideSlowStartsOneStepPerBatch(t *testing.T) {
	const interval = 5 * time.Second
	const startup = 3 * interval
	in := base()
	in.Current, in.Min, in.Max, in.Interval = 1, 1, 100, interval
	created := []time.Time{t0.Add(-time.Hour)}
	now := t0
	var counts []int32
	for range 12 {
		tasks := make([]TaskStart, len(created))
		for i, c := range created {
			tasks[i] = TaskStart{Name: "t", Created: c, Ready: now.Sub(c) >= startup}
		}
		in.Now, in.Metrics = now, []MetricInput{load(0.9)}
		in.Starting = CountStarting(tasks, in.Current, in.LastScaleTime, 10*time.Minute, now).Starting
		d := Decide(in)
		if d.Desired > in.Current {
			for range d.Desired - in.Current {
				created = append(created, now)
			}
			in.LastScaleTime = now
		}
		in.Current = d.Desired
		counts = append(counts, d.Desired)
		now = now.Add(interval)
	}
	want := []int32{4, 4, 4, 7, 7, 7, 10, 10, 10, 13, 13, 13}
	if !reflect.DeepEqual(counts, want) {
		t.Fatalf("counts = %v, want %v (one step per batch of Ready tasks)", counts, want)
	}
}

func TestDecideScaleToZeroAndBack(t *testing.T) {
	zero := func(in Inputs) Inputs { in.Current, in.Min = 0, 0; return in }
	tests := []struct {
		name   string
		in     Inputs
		want   int32
		reason string
	}{
		{name: "step down to zero", in: with(base(load(0.1)), func(in *Inputs) { in.Current, in.Min = 1, 0 }), want: 0, reason: ReasonScaleDownBelowThreshold},
		{name: "step at zero holds below the up threshold", in: zero(base(load(0.7))), want: 0, reason: ReasonWithinThresholds},
		{name: "step at zero holds at the up threshold", in: zero(base(load(0.8))), want: 0, reason: ReasonWithinThresholds},
		{name: "step back from zero above the up threshold", in: zero(base(load(0.81))), want: 3, reason: ReasonScaleUpAboveThreshold},
		{name: "proportional to zero at no load", in: with(proportionalBase(load(0)), func(in *Inputs) { in.Current, in.Min = 2, 0 }), want: 0, reason: ReasonProportionalScaleDown},
		{name: "proportional at zero stays at no load", in: zero(proportionalBase(load(0))), want: 0, reason: ReasonWithinTolerance},
		{name: "proportional back from zero at any load", in: zero(proportionalBase(load(0.01))), want: 1, reason: ReasonProportionalScaleUp},
		{name: "proportional from zero reads the total", in: zero(proportionalBase(load(2.2))), want: 5, reason: ReasonProportionalScaleUp},
		{name: "failure at zero stays at zero", in: zero(base(failing("a"))), want: 0, reason: ReasonFailedGetLoadIndex},
		{name: "failures at zero stay at zero without fallback", in: with(zero(base(failing("a"))), func(in *Inputs) { in.ConsecutiveFailures = 10 }), want: 0, reason: ReasonFailedGetLoadIndex},
		{name: "fallback brings it back from zero", in: with(zero(base(failing("a"))), func(in *Inputs) {
			in.ConsecutiveFailures, in.Fallback = 2, func() *int32 { v := int32(2); return &v }()
		}), want: 2, reason: ReasonFallbackReplicas},
		{name: "window holds the last task", in: with(base(load(0.1)), func(in *Inputs) {
			in.Current, in.Min, in.StabilizationWindow = 1, 0, time.Minute
			in.Recommendations = []gputaskv1.Recommendation{rec(30*time.Second, 1)}
		}), want: 1, reason: ReasonScaleDownStabilized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.in)
			if d.Desired != tt.want || d.Reason != tt.reason {
				t.Fatalf("Decide = %d %s (%s), want %d %s", d.Desired, d.Reason, d.Message, tt.want, tt.reason)
			}
		})
	}
}

// TestDecideStabilizationWindowStartsAtLastHighReading pins down when the
// scale-down window starts: at the last reading that did not ask for fewer
// tasks, not at the first low one. With readings every interval, the first
// step comes exactly one window after the last high reading, which is
// window − interval after the first low one.
func TestDecideStabilizationWindowStartsAtLastHighReading(t *testing.T) {
	const interval = 30 * time.Second
	const window = 2 * time.Minute
	in := base()
	in.Current, in.StabilizationWindow = 5, window
	now := t0
	evaluate := func(v float64) Decision {
		in.Now, in.Metrics = now, []MetricInput{load(v)}
		d := Decide(in)
		in.Current, in.Recommendations = d.Desired, d.Recommendations
		return d
	}
	evaluate(0.6)
	lastHigh := now
	var firstLow, firstStep time.Time
	for range 10 {
		now = now.Add(interval)
		if firstLow.IsZero() {
			firstLow = now
		}
		if d := evaluate(0.1); d.Desired < 5 {
			firstStep = now
			break
		}
	}
	if got := firstStep.Sub(lastHigh); got != window {
		t.Errorf("first step %v after the last high reading, want exactly the window %v", got, window)
	}
	if got := firstStep.Sub(firstLow); got != window-interval {
		t.Errorf("first step %v after the first low reading, want window − interval = %v", got, window-interval)
	}
}
