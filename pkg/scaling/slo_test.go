package scaling

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/queueing"
	"k8s.io/utils/ptr"
)

func role(r gputaskv1.MetricRole, v float64) MetricInput {
	return MetricInput{Name: strings.ToLower(string(r)), Role: r, Value: v, UpThreshold: 0.8, DownThreshold: 0.5}
}

// sloBase is an SLO set at 5 of [1, 100]: 8 slots a task, 10 s at the
// 95th percentile, 2-minute starts, read every 15 s, reading arrivals and
// running requests. On a first reading the completions are the arrivals,
// so running/arrivals is the service time.
func sloBase(arrivals, running float64, more ...MetricInput) Inputs {
	return Inputs{
		Now: t0, Current: 5, Min: 1, Max: 100,
		Policy: Policy{Type: gputaskv1.SLOPolicy, SLO: SLO{
			Wait: 10 * time.Second, Percentile: 95, SlotsPerTask: 8, ServiceVariability: 1,
		}},
		Metrics:          append([]MetricInput{role(gputaskv1.RoleArrivals, arrivals), role(gputaskv1.RoleRunning, running)}, more...),
		FailureThreshold: 3, Startup: 2 * time.Minute, Interval: 15 * time.Second,
	}
}

// steady is the state of a pool that has served 20 running requests at
// 2 completions a second (10 s each) until 15 s ago, with rates rising by
// slope per second up to now's rate.
func steady(now float64, slope float64) QueueState {
	q := QueueState{LastTime: t0.Add(-15 * time.Second), Little: queueing.Little{Running: 20, Completions: 2}}
	for ago := 105; ago >= 15; ago -= 15 {
		q.Rates = append(q.Rates, RateSample{Time: t0.Add(-time.Duration(ago) * time.Second), Rate: now - slope*float64(ago), InPool: 20})
	}
	return q
}

// askedBefore is a pool of 5 tasks running running requests at 2/s,
// rising by 0.018/s, that last asked for more than it had a minute and a
// reading ago.
func askedBefore(running float64) Inputs {
	return with(sloBase(2, running), func(in *Inputs) {
		in.Queue = steady(2, 0.018)
		in.Queue.AskedMore = t0.Add(-CountWindow - 15*time.Second)
	})
}

// slowStart is a pool of current tasks at rate, rising by 0.003/s, whose
// tasks take 5 minutes to start, behind a scale-down window, that last
// asked for more than it had a minute and a reading ago.
func slowStart(rate float64, current int32, window time.Duration) Inputs {
	in := sloBase(rate, rate*10)
	in.Current, in.Startup, in.StabilizationWindow = current, 5*time.Minute, window
	in.Queue = steady(rate, 0.003)
	in.Queue.Little = queueing.Little{Running: rate * 10, Completions: rate}
	in.Queue.AskedMore = t0.Add(-CountWindow - 15*time.Second)
	return in
}

// busyHistory is sloBase's 2/s of 100 output tokens a request, reading
// 10 s now, by a pool whose last ten start-ups each read service s at
// their longest, perToken s a token.
func busyHistory(s, perToken float64) Inputs {
	return with(sloBase(2, 20), func(in *Inputs) {
		in.Engine = &Engine{GenerationTokens: 200}
		for k := 10; k >= 1; k-- {
			at := t0.Add(-time.Duration(k) * in.Startup)
			in.Queue.Rises = in.Queue.Rises.Record(at, at, time.Time{}, 0, 0, in.Startup).Served(at, s, perToken)
		}
	})
}

func TestDecideSLO(t *testing.T) {
	tests := []struct {
		name   string
		in     Inputs
		want   int32
		reason string
		msg    string
		check  func(t *testing.T, d Decision)
	}{
		{
			// 2/s × 10 s = 20 busy slots: 3 tasks (24 slots) keep the p95
			// wait at 4.5 s; 2 tasks (16 slots) cannot keep up.
			name: "scales down to what the SLO needs", in: sloBase(2, 20), want: 3, reason: ReasonSLOScaleDown,
			msg: "2/s expected (2/s now) at 10s per request need 3 tasks of 8 slots for a p95 wait within 10s",
			check: func(t *testing.T, d Decision) {
				o := d.SLO
				if o.ServiceTime != 10*time.Second || o.Slots != 8 || o.Ca2 != 1 || o.Cs2 != 1 || o.Correction != 1 || o.Tasks != 3 {
					t.Errorf("outcome %+v", *o)
				}
				if math.Abs(o.PredictedWait-4.463) > 0.001 || o.Unmet {
					t.Errorf("predicted p95 wait %v unmet %v, want 4.463 s and met", o.PredictedWait, o.Unmet)
				}
				if d.Inputs != "arrivals=2/s expected=2/s backlog=0/s service=10s slots=8 ca2=1 cs2=1 correction=1 startup=2m0s" {
					t.Errorf("inputs %q", d.Inputs)
				}
				if d.Winner != 0 || d.Metrics[1].Desired != 3 {
					t.Errorf("winner %d, metrics %+v", d.Winner, d.Metrics)
				}
			},
		},
		{name: "scales up", in: sloBase(10, 100), want: 13, reason: ReasonSLOScaleUp},
		{name: "holds", in: with(sloBase(5, 50), func(in *Inputs) { in.Current = 7 }), want: 7, reason: ReasonWithinSLO},
		{
			name: "arrivals from completions and the pool's growth",
			in: with(sloBase(0, 20, role(gputaskv1.RoleWaiting, 30)), func(in *Inputs) {
				in.Metrics[0] = role(gputaskv1.RoleCompletions, 2)
				in.Queue = steady(2, 0)
				in.Queue.Rates = in.Queue.Rates[len(in.Queue.Rates)-1:]
			}),
			// 2/s finished and the pool grew from 20 to 50 in the 15 s
			// since the only reading before: 4/s
			// arrive; the service time stays 10 s. The 5 tasks serve just
			// 4/s, so the 30 waiting are cleared within 90 s, three
			// quarters of the start-up: 4.33/s need 6 tasks.
			want: 6, reason: ReasonSLOScaleUp,
			check: func(t *testing.T, d Decision) {
				if d.SLO.Arrivals != 4 || d.SLO.ServiceTime != 10*time.Second || math.Abs(d.SLO.Backlog-1.0/3) > 1e-9 {
					t.Errorf("arrivals %v service %v backlog %v, want 4/s, 10s and 1/3/s", d.SLO.Arrivals, d.SLO.ServiceTime, d.SLO.Backlog)
				}
				if last := d.Queue.Rates[len(d.Queue.Rates)-1]; last.InPool != 50 || !last.Time.Equal(t0) || !d.Queue.LastTime.Equal(t0) {
					t.Errorf("state %+v", d.Queue)
				}
			},
		},
		{
			// 2/s finished over the minute, and the pool, steady at 20,
			// grew to 50 in the last 15 s: 2.5/s over the minute, 4/s
			// over the interval. A step shows in the interval first: the
			// count is sized for 4/s, the history keeps both.
			name: "a step up is sized from the interval's growth",
			in: with(sloBase(0, 20, role(gputaskv1.RoleWaiting, 30)), func(in *Inputs) {
				in.Metrics[0] = role(gputaskv1.RoleCompletions, 2)
				in.Queue = steady(2, 0)
			}),
			want: 7, reason: ReasonSLOScaleUp,
			check: func(t *testing.T, d Decision) {
				last := d.Queue.Rates[len(d.Queue.Rates)-1]
				if d.SLO.Arrivals != 4 || last.Rate != 2.5 || last.Recent != 4 || last.InPool != 50 {
					t.Errorf("arrivals %v, history %+v; want 4/s, and 2.5/s over the minute, 4/s over the interval, 50 in the pool", d.SLO.Arrivals, last)
				}
			},
		},
		{
			// Minute-long requests: 10/s finished, 600 in the pool until
			// 15 s ago and 750 now, 20/s over the interval. A burst of 15 s
			// fills the slots for a quarter of a service time: the count
			// is sized for the mean of the last minute's interval rates,
			// 12.5/s (with the trend through the minute's rates and the
			// backlog of the 150 waiting, 25.5/s expected: 25 tasks), not
			// for the burst's 20/s (43/s expected: 41 tasks).
			name: "a burst shorter than the service time is sized over the service time",
			in: with(sloBase(0, 600, role(gputaskv1.RoleWaiting, 150)), func(in *Inputs) {
				in.Metrics[0] = role(gputaskv1.RoleCompletions, 10)
				in.Policy.SLO.SlotsPerTask = 64
				in.Queue = QueueState{LastTime: t0.Add(-15 * time.Second), Little: queueing.Little{Running: 600, Completions: 10}}
				for ago := 105; ago >= 15; ago -= 15 {
					in.Queue.Rates = append(in.Queue.Rates, RateSample{Time: t0.Add(-time.Duration(ago) * time.Second), Rate: 10, Recent: 10, OverService: 10, InPool: 600})
				}
			}),
			want: 25, reason: ReasonSLOScaleUp,
			check: func(t *testing.T, d Decision) {
				last := d.Queue.Rates[len(d.Queue.Rates)-1]
				if d.SLO.Arrivals != 12.5 || last.Recent != 20 || last.OverService != 12.5 {
					t.Errorf("arrivals %v, history %+v; want 12.5/s, and 20/s over the interval, 12.5/s over the service time", d.SLO.Arrivals, last)
				}
			},
		},
		{
			// Where arrivals are counted and completions are not, the
			// completions are the arrivals less the pool's growth over
			// the same minute: 4/s arrived, the pool grew from 20 a minute
			// ago to 50 (all of it more than 15 s ago), so 3.5/s finished.
			name: "completions from arrivals and the pool's growth over the same window",
			in: with(sloBase(4, 20, role(gputaskv1.RoleWaiting, 30)), func(in *Inputs) {
				in.Queue = steady(4, 0)
				in.Queue.Rates[len(in.Queue.Rates)-1].InPool = 50
			}),
			want: 6, reason: ReasonSLOScaleUp,
			check: func(t *testing.T, d Decision) {
				if d.SLO.completions != 3.5 {
					t.Errorf("completions %v, want 3.5/s", d.SLO.completions)
				}
			},
		},
		{
			// The completions are a rate over the last minute: the pool
			// held 20 until 30 s ago and grew to 50 in the interval
			// since, so over the minute 2/s finished and 0.5/s more
			// came, 2.5/s (the last interval alone would read 2/s as
			// 2 + 0/15 a moment later, and 4/s as 2 + 30/15 now).
			name: "arrivals from completions and the pool's growth over the same window",
			in: with(sloBase(0, 20, role(gputaskv1.RoleWaiting, 30)), func(in *Inputs) {
				in.Metrics[0] = role(gputaskv1.RoleCompletions, 2)
				in.Queue = steady(2, 0)
				in.Queue.Rates[len(in.Queue.Rates)-1].InPool = 50
				in.Queue.Rates = append(in.Queue.Rates, RateSample{Time: t0.Add(-time.Second), Rate: 4, InPool: 50})
				in.Queue.AskedMore = t0.Add(-15 * time.Second) // and so did the reading before
			}),
			want: 6, reason: ReasonSLOScaleUp,
			check: func(t *testing.T, d Decision) {
				if d.SLO.Arrivals != 2.5 {
					t.Errorf("arrivals %v, want 2.5/s", d.SLO.Arrivals)
				}
			},
		},
		{
			// 5 serving tasks (40 slots at 10 s: 4/s) have 2/s to spare,
			// 240 requests in the 2-minute start; 360 of the 600 waiting
			// are left, cleared within 90 s, three quarters of the
			// start-up, once the new tasks are Ready: 4/s more, 6/s need
			// 8 tasks.
			name: "backlog cleared within three quarters of a start-up", in: sloBase(2, 20, role(gputaskv1.RoleWaiting, 600)), want: 8, reason: ReasonSLOScaleUp,
			check: func(t *testing.T, d Decision) {
				if d.SLO.Backlog != 4 || d.SLO.Expected != 6 {
					t.Errorf("backlog %v expected %v, want 4 and 6", d.SLO.Backlog, d.SLO.Expected)
				}
			},
		},
		{
			// The same 2/s of 100 output tokens each, read at 10 s now
			// (0.1 s a token), by a pool whose last ten start-ups each
			// read 20 s at their longest, 0.2 s a token: a burst's longer
			// steps. Capacity is read at the 90th percentile of those,
			// 20 s, 40 busy slots: 6 tasks, not the 3 of 10 s.
			name: "capacity read at the service time of the busy start-ups", in: busyHistory(20, 0.2),
			want: 6, reason: ReasonSLOScaleUp,
			msg: "2/s expected (2/s now) at 20s per request need 6 tasks of 8 slots for a p95 wait within 10s; 20s per request is the p90 of the last start-ups' longest, where 10s is read now",
		},
		{
			// As above, but the start-ups' 20 s were 0.1 s a token, as
			// now: longer requests then, not longer steps. Requests of
			// today's length take 10 s: 3 tasks.
			name: "longer requests of the last hours are not a busy service", in: busyHistory(20, 0.1),
			want: 3, reason: ReasonSLOScaleDown,
		},
		{
			name: "a backlog the serving tasks clear in time adds nothing", in: sloBase(2, 20, role(gputaskv1.RoleWaiting, 200)), want: 3, reason: ReasonSLOScaleDown,
			check: func(t *testing.T, d Decision) {
				if d.SLO.Backlog != 0 {
					t.Errorf("backlog %v, want 0", d.SLO.Backlog)
				}
			},
		},
		{
			// Rising by 0.01/s: 2 + 0.01 × (120 + 7.5) = 3.275/s once a
			// new task is Ready, which needs 5 tasks, not the 3 of now.
			name: "sized for the load one start-up ahead",
			in:   with(sloBase(2, 20), func(in *Inputs) { in.Queue = steady(2, 0.01); in.Current = 3 }),
			want: 5, reason: ReasonSLOScaleUp,
			check: func(t *testing.T, d Decision) {
				if math.Abs(d.SLO.Expected-3.275) > 1e-9 {
					t.Errorf("expected %v, want 3.275", d.SLO.Expected)
				}
				if n := len(d.Queue.Rates); n != 8 || d.Queue.Rates[n-1].Rate != 2 {
					t.Errorf("rates %+v", d.Queue.Rates)
				}
			},
		},
		{
			name: "the trend at most doubles the rate",
			in: with(sloBase(2, 20), func(in *Inputs) {
				in.Queue = steady(2, 0.018)
				in.Queue.AskedMore = t0.Add(-15 * time.Second) // and so did the reading before
			}),
			want: 6, reason: ReasonSLOScaleUp,
			check: func(t *testing.T, d Decision) {
				if d.SLO.Expected != 4 {
					t.Errorf("expected %v, want 4", d.SLO.Expected)
				}
			},
		},
		{
			// The same trend, last asking for more than the pool had a
			// minute and a reading ago: the 2/s of now need 3 tasks, and
			// the sixth task only the look-ahead asks for waits for a
			// reading within the minute to ask for more too.
			name: "one task more only the look-ahead asks for waits for a second reading",
			in:   askedBefore(20),
			want: 5, reason: ReasonWithinSLO, msg: "6 tasks asked for by this reading alone: held at 5 unless another within 1m0s asks for more too",
			check: func(t *testing.T, d Decision) {
				if !d.Queue.AskedMore.Equal(t0) || d.SLO.Tasks != 5 {
					t.Errorf("asked more at %v, tasks %d; want now remembered and 5 kept", d.Queue.AskedMore, d.SLO.Tasks)
				}
				// The 5 kept serve the 2/s of now within the SLO: the
				// prediction is of that rate, not of the 4/s the sixth
				// task was held against, which fills their 40 slots.
				if w := d.SLO.PredictedWait; !(w <= 10) || d.SLO.Unmet {
					t.Errorf("predicted wait %v (unmet %v); want within the 10 s SLO at the rate of now", w, d.SLO.Unmet)
				}
			},
		},
		{
			// The same, with 41 requests running in the 40 slots of 5
			// tasks (a task's engine admits more than its slots say):
			// they occupy the sixth, which waits for a second reading
			// too, and a reading within the minute that asks for it
			// adds it.
			name: "one task more the running requests occupy waits for a second reading",
			in:   askedBefore(41),
			want: 5, reason: ReasonWithinSLO, msg: "6 tasks asked for by this reading alone: held at 5 unless another within 1m0s asks for more too",
			check: func(t *testing.T, d Decision) {
				next := with(sloBase(2, 41), func(in *Inputs) {
					in.Now = t0.Add(15 * time.Second)
					in.Queue = d.Queue
				})
				if e := Decide(next); e.Desired != 6 {
					t.Errorf("the next reading: %d tasks (%s), want 6", e.Desired, e.Message)
				}
			},
		},
		{
			// A pool of one task whose tasks take the 5-minute scale-down
			// window to start: 0.4/s now need one task, the 0.8/s expected
			// a start-up on two, and the second is added at once.
			name: "a pool of one whose tasks start slowly adds its second at once",
			in:   slowStart(0.4, 1, 5*time.Minute), want: 2, reason: ReasonSLOScaleUp,
		},
		{
			// The same behind a 10-minute window: the task would be kept
			// longer than a start-up, and waits for a second reading.
			name: "a pool of one whose tasks start within the scale-down window holds its second",
			in:   slowStart(0.4, 1, 10*time.Minute), want: 1, reason: ReasonWithinSLO,
			msg: "2 tasks asked for by this reading alone: held at 1 unless another within 1m0s asks for more too",
		},
		{
			name: "a pool of one without a scale-down window adds its second at once",
			in:   slowStart(0.4, 1, 0), want: 2, reason: ReasonSLOScaleUp,
		},
		{
			// Two tasks that start slowly: the third waits, as ever.
			name: "a pool of two whose tasks start slowly holds its third",
			in:   slowStart(0.8, 2, 5*time.Minute), want: 2, reason: ReasonWithinSLO,
			msg: "3 tasks asked for by this reading alone: held at 2 unless another within 1m0s asks for more too",
		},
		{
			// 4/s × 10 s fill the 40 slots of 5 tasks: the arrivals of now
			// need the sixth, read once or not.
			name: "one task more the arrivals of now need is added at once",
			in: with(sloBase(4, 40), func(in *Inputs) {
				in.Queue = steady(4, 0)
				in.Queue.Little = queueing.Little{Running: 40, Completions: 4}
			}),
			want: 6, reason: ReasonSLOScaleUp,
		},
		{
			// Falling by 0.01/s: 0.725/s would need 2 tasks, but until a
			// task could come back the load may stay at 2/s, which needs 3.
			name: "scale-in keeps the SLO until a new task could start",
			in:   with(sloBase(2, 20), func(in *Inputs) { in.Queue = steady(2, -0.01) }),
			want: 3, reason: ReasonSLOScaleDown, msg: "3 kept for the load until a new task could start",
		},
		{
			// A burst of 80 running requests on a pool that served 1 s
			// requests: the model asks for 1 task, the requests hold 10.
			name: "never below the tasks the running requests occupy",
			in: with(sloBase(0.1, 80), func(in *Inputs) {
				in.Queue = QueueState{LastTime: t0.Add(-15 * time.Second), Little: queueing.Little{Running: 1, Completions: 1},
					Rates: []RateSample{{Time: t0.Add(-15 * time.Second), Rate: 1, InPool: 1}}}
			}),
			want: 10, reason: ReasonSLOScaleUp, msg: "10 tasks for the 80 running requests",
		},
		{
			// 50/s × 10 s = 500 busy slots need 63 tasks; 20 give 160.
			name: "out of reach within maxReplicas", in: with(sloBase(50, 500), func(in *Inputs) { in.Max = 20 }),
			want: 20, reason: ReasonTooManyReplicas,
			msg: "capped at maxReplicas 20",
			check: func(t *testing.T, d Decision) {
				o := d.SLO
				if !o.Unmet || o.Reachable != 20 || !math.IsInf(o.PredictedWait, 1) {
					t.Errorf("outcome %+v", *o)
				}
				if want := "the SLO needs 63 tasks, 43 more than maxReplicas 20; with 20 the p95 wait is unbounded (the slots cannot keep up), above the SLO of 10s"; o.Message != want {
					t.Errorf("message %q\nwant %q", o.Message, want)
				}
			},
		},
		{
			name: "out of reach within the capacity", in: with(sloBase(10, 100), func(in *Inputs) { in.Capacity = ptr.To[int32](12) }),
			want: 12, reason: ReasonCapacityLimited,
			check: func(t *testing.T, d Decision) {
				o := d.SLO
				if !o.Unmet || o.Reachable != 12 || !strings.Contains(o.Message, "the SLO needs 13 tasks, 1 more than the capacity of 12 tasks; with 12 the p95 wait is unbounded") {
					t.Errorf("outcome %+v", *o)
				}
			},
		},
		{
			// 1,000,000/s × 10 s keep 10 million slots busy: more than
			// the 100,000 tasks the API allows.
			name: "out of reach of any count", in: with(sloBase(1e6, 1e7), func(in *Inputs) { in.Max = 100000 }),
			want: 100000, reason: ReasonTooManyReplicas,
			check: func(t *testing.T, d Decision) {
				if o := d.SLO; !o.Unmet || o.Message != "the SLO needs more than 100000 tasks; with 100000 the p95 wait is unbounded (the slots cannot keep up), above the SLO of 10s" {
					t.Errorf("outcome %+v", *o)
				}
			},
		},
		{
			name: "no load scales to the floor", in: with(sloBase(0, 0), func(in *Inputs) { in.Queue = steady(0, 0) }),
			want: 1, reason: ReasonTooFewReplicas,
			check: func(t *testing.T, d Decision) {
				if d.SLO.Unmet || d.SLO.PredictedWait != 0 {
					t.Errorf("outcome %+v", *d.SLO)
				}
			},
		},
		{
			name: "no service time yet: a task for arrivals from zero",
			in:   with(sloBase(3, 0), func(in *Inputs) { in.Current, in.Min = 0, 0 }),
			want: 1, reason: ReasonServiceTimeUnknown, msg: "no request has finished yet",
		},
		{
			name: "no service time yet: tasks for the waiting requests",
			in:   with(sloBase(3, 0, role(gputaskv1.RoleWaiting, 20)), func(in *Inputs) { in.Current, in.Min = 1, 0 }),
			want: 3, reason: ReasonServiceTimeUnknown,
		},
		{
			name: "no request ever: the floor", in: sloBase(0, 0),
			want: 1, reason: ReasonTooFewReplicas, msg: "no requests arrive, run or wait",
		},
		{
			name: "no service time yet holds a larger pool",
			in:   sloBase(3, 0),
			want: 5, reason: ReasonServiceTimeUnknown,
		},
		{
			// Observed 30 s against a predicted 0 (5 tasks at 2/s): the
			// error is clamped at one SLO, and the factor for the next
			// evaluations becomes e^0.1; this one is sized as before.
			name: "the observed wait percentile corrects the model",
			in:   sloBase(2, 20, role(gputaskv1.RoleWaitPercentile, 30)),
			want: 3, reason: ReasonSLOScaleDown,
			check: func(t *testing.T, d Decision) {
				if c := d.Queue.Correction; math.Abs(c-math.Exp(0.1)) > 1e-12 || d.SLO.Correction != 1 || d.SLO.Expected != 2 {
					t.Errorf("correction %v used %v expected %v, want e^0.1, 1 and 2", c, d.SLO.Correction, d.SLO.Expected)
				}
			},
		},
		{
			// The same reading while a task starts: the pool is short by
			// design, and its waits say nothing of the model's error.
			name: "no correction learned while a task starts",
			in: with(sloBase(2, 20, role(gputaskv1.RoleWaitPercentile, 30)), func(in *Inputs) {
				in.Starting = 1
			}),
			want: 3, reason: ReasonSLOScaleDown,
			check: func(t *testing.T, d Decision) {
				if c := d.Queue.Correction; c != 0 {
					t.Errorf("correction %v, want none learned", c)
				}
				if !d.Queue.Started.Equal(t0) {
					t.Errorf("started %v, want the reading's time", d.Queue.Started)
				}
			},
		},
		{
			// Nor while the queue left by the last start-up clears: the
			// new tasks clear it within BacklogClearing of a start-up
			// (90 s), and the percentile's window holds its waits a
			// ServiceTimeWindow more.
			name: "no correction learned while the queue of the last start-up clears",
			in: with(sloBase(2, 20, role(gputaskv1.RoleWaitPercentile, 30)), func(in *Inputs) {
				in.Queue.Started = in.Now.Add(-ServiceTimeWindow - 90*time.Second + time.Second)
			}),
			want: 3, reason: ReasonSLOScaleDown,
			check: func(t *testing.T, d Decision) {
				if c := d.Queue.Correction; c != 0 {
					t.Errorf("correction %v, want none learned", c)
				}
			},
		},
		{
			name: "a correction is learned once the queue of the last start-up cleared",
			in: with(sloBase(2, 20, role(gputaskv1.RoleWaitPercentile, 30)), func(in *Inputs) {
				in.Queue.Started = in.Now.Add(-ServiceTimeWindow - 90*time.Second)
			}),
			want: 3, reason: ReasonSLOScaleDown,
			check: func(t *testing.T, d Decision) {
				if c := d.Queue.Correction; math.Abs(c-math.Exp(0.1)) > 1e-12 {
					t.Errorf("correction %v, want e^0.1", c)
				}
				if !d.Queue.Started.Equal(t0.Add(-ServiceTimeWindow - 90*time.Second)) {
					t.Errorf("started %v, want it kept", d.Queue.Started)
				}
			},
		},
		{
			// Nor within ServiceTimeWindow of the last change of count:
			// the percentile's window still holds the waits of before.
			name: "no correction learned just after a scale",
			in: with(sloBase(2, 20, role(gputaskv1.RoleWaitPercentile, 30)), func(in *Inputs) {
				in.LastScaleTime = in.Now.Add(-ServiceTimeWindow + time.Second)
			}),
			want: 3, reason: ReasonSLOScaleDown,
			check: func(t *testing.T, d Decision) {
				if c := d.Queue.Correction; c != 0 {
					t.Errorf("correction %v, want none learned", c)
				}
			},
		},
		{
			name: "a correction is learned a window after the last scale",
			in: with(sloBase(2, 20, role(gputaskv1.RoleWaitPercentile, 30)), func(in *Inputs) {
				in.LastScaleTime = in.Now.Add(-ServiceTimeWindow)
			}),
			want: 3, reason: ReasonSLOScaleDown,
			check: func(t *testing.T, d Decision) {
				if c := d.Queue.Correction; math.Abs(c-math.Exp(0.1)) > 1e-12 {
					t.Errorf("correction %v, want e^0.1", c)
				}
			},
		},
		{
			// Learned earlier: the pool waits longer than the model says,
			// so 2/s are sized as 3/s.
			name: "a learned correction sizes the pool",
			in: with(sloBase(2, 20), func(in *Inputs) {
				in.Queue = steady(2, 0)
				in.Queue.Correction = 1.5
			}),
			want: 4, reason: ReasonSLOScaleDown,
			check: func(t *testing.T, d Decision) {
				if d.SLO.Correction != 1.5 || d.SLO.Expected != 3 || d.Queue.Correction != 1.5 {
					t.Errorf("correction %v expected %v state %v", d.SLO.Correction, d.SLO.Expected, d.Queue.Correction)
				}
			},
		},
		{
			name: "a missing role holds the count",
			in:   with(sloBase(2, 20), func(in *Inputs) { in.Metrics = in.Metrics[:1] }),
			want: 5, reason: ReasonMissingMetricRole, msg: "the SLO policy needs a metric of role Running; holding at 5",
			check: func(t *testing.T, d Decision) {
				if !d.AllFailed || d.SLO != nil || d.Recommendations != nil {
					t.Errorf("decision %+v", d)
				}
			},
		},
		{
			// histogram_quantile over no observations is NaN: an idle
			// pool's percentile has no value, and that is no failure.
			name: "an idle pool's empty percentile does not hold scale-in",
			in: with(sloBase(0, 0, role(gputaskv1.RoleWaiting, 0), role(gputaskv1.RoleTTFTPercentile, 0)), func(in *Inputs) {
				in.Metrics[3].Err = errors.New("value is NaN")
				in.ConsecutiveFailures = 2
			}),
			want: 1, reason: ReasonTooFewReplicas, msg: "no requests arrive, run or wait",
			check: func(t *testing.T, d Decision) {
				if d.ConsecutiveFailures != 0 {
					t.Errorf("consecutive failures %d, want 0", d.ConsecutiveFailures)
				}
			},
		},
		{
			name: "with requests, a failed percentile holds scale-in",
			in: with(sloBase(2, 20, role(gputaskv1.RoleWaiting, 0), role(gputaskv1.RoleTTFTPercentile, 0)), func(in *Inputs) {
				in.Metrics[3].Err = errors.New("value is NaN")
			}),
			want: 5, reason: ReasonFailedGetLoadIndex, msg: "not scaling down to 3 while",
		},
		{
			name: "an idle pool whose running reading failed holds",
			in: with(sloBase(0, 0, role(gputaskv1.RoleWaiting, 0), role(gputaskv1.RoleTTFTPercentile, 0)), func(in *Inputs) {
				in.Metrics[1].Err = errors.New("timeout")
				in.Metrics[3].Err = errors.New("value is NaN")
			}),
			want: 5, reason: ReasonFailedGetLoadIndex,
		},
		{
			name: "a failed arrivals reading holds",
			in:   with(sloBase(2, 20), func(in *Inputs) { in.Metrics[0].Err = errors.New("timeout") }),
			want: 5, reason: ReasonFailedGetLoadIndex,
			check: func(t *testing.T, d Decision) {
				if !d.AllFailed || d.ConsecutiveFailures != 1 {
					t.Errorf("all failed %v failures %d", d.AllFailed, d.ConsecutiveFailures)
				}
			},
		},
		{
			name: "a failed running reading runs the fallback in time",
			in: with(sloBase(2, 20), func(in *Inputs) {
				in.Metrics[1].Err = errors.New("timeout")
				in.ConsecutiveFailures, in.Fallback = 2, ptr.To[int32](9)
			}),
			want: 9, reason: ReasonFallbackReplicas,
		},
		{
			name: "a failed waiting reading is left out, and no scale-down while it fails",
			in: with(sloBase(2, 20, role(gputaskv1.RoleWaiting, 0)), func(in *Inputs) {
				in.Metrics[2].Err = errors.New("timeout")
			}),
			want: 5, reason: ReasonFailedGetLoadIndex, msg: `not scaling down to 3 while "waiting" failed`,
		},
		{
			name: "a failed waiting reading still scales up",
			in: with(sloBase(10, 100, role(gputaskv1.RoleWaiting, 0)), func(in *Inputs) {
				in.Metrics[2].Err = errors.New("timeout")
			}),
			want: 13, reason: ReasonSLOScaleUp,
		},
		{
			// Starting tasks are capacity on its way: the count is the
			// whole pool one start-up ahead, so nothing waits for them.
			name: "starting tasks do not hold the count",
			in:   with(sloBase(10, 100), func(in *Inputs) { in.Starting = 3 }),
			want: 13, reason: ReasonSLOScaleUp,
		},
		{
			name: "the stabilization window holds a scale-down",
			in: with(sloBase(2, 20), func(in *Inputs) {
				in.StabilizationWindow = 5 * time.Minute
				in.Recommendations = []gputaskv1.Recommendation{rec(time.Minute, 5)}
			}),
			want: 5, reason: ReasonScaleDownStabilized,
		},
		{
			name: "paused reports what it would do",
			in:   with(sloBase(10, 100), func(in *Inputs) { in.Paused = true }),
			want: 5, reason: ReasonPaused, msg: "would scale to 13",
			check: func(t *testing.T, d Decision) {
				// The prediction is for the count that runs: 5 tasks are
				// 40 slots for 100 busy ones.
				if d.SLO.Tasks != 13 || !math.IsInf(d.SLO.PredictedWait, 1) {
					t.Errorf("tasks %d predicted %v", d.SLO.Tasks, d.SLO.PredictedWait)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.in)
			if d.Desired != tc.want || d.Reason != tc.reason {
				t.Fatalf("got %d (%s: %s), want %d (%s)", d.Desired, d.Reason, d.Message, tc.want, tc.reason)
			}
			if !strings.Contains(d.Message, tc.msg) {
				t.Errorf("message %q lacks %q", d.Message, tc.msg)
			}
			if tc.check != nil {
				tc.check(t, d)
			}
		})
	}
}

// TestDecideSLOPredictive: where predictive history knows the load one
// lead time ahead, the SLO policy sizes for it; in Preview it only reports.
func TestDecideSLOPredictive(t *testing.T) {
	lead := 10 * time.Minute
	var h History
	// Yesterday, one lead time later, the pool kept 10 tasks' slots busy:
	// 80 busy slots at 10 s are 8/s.
	h.Learn(t0.Add(lead-24*time.Hour), 10)
	in := with(sloBase(2, 20), func(in *Inputs) {
		in.Predictive, in.History = &Predictive{Lead: lead}, h
	})
	d := Decide(in)
	if d.Desired != 11 || d.SLO.Expected != 8 || d.Forecast == nil || *d.Forecast != 11 {
		t.Fatalf("active: desired %d expected %v forecast %v (%s)", d.Desired, d.SLO.Expected, d.Forecast, d.ForecastMessage)
	}
	if !strings.Contains(d.ForecastMessage, "8/s arrivals forecast for 03:14 UTC") {
		t.Errorf("forecast message %q", d.ForecastMessage)
	}
	// Today's reading was learned: 2/s × 10 s over 8 slots is 2.5 tasks,
	// blended half and half with yesterday's 10 in the same quarter hour.
	if got, ok := d.History.Forecast(t0.Add(7 * 24 * time.Hour)); !ok || got != 6.25 {
		t.Errorf("learned %v %v, want 6.25", got, ok)
	}

	in.Predictive.Preview = true
	d = Decide(in)
	if d.Desired != 3 || d.SLO.Expected != 2 || d.Forecast == nil || *d.Forecast != 11 || !strings.Contains(d.ForecastMessage, "preview") {
		t.Fatalf("preview: desired %d expected %v forecast %v (%s)", d.Desired, d.SLO.Expected, d.Forecast, d.ForecastMessage)
	}

	// A failed read keeps the history as it was.
	in.Metrics[0].Err = errors.New("timeout")
	if d = Decide(in); d.History != h {
		t.Error("a failed read lost the history")
	}
}

func TestCheckRoles(t *testing.T) {
	for _, tc := range []struct {
		name  string
		roles []gputaskv1.MetricRole
		msg   string
	}{
		{"arrivals and running", []gputaskv1.MetricRole{gputaskv1.RoleArrivals, gputaskv1.RoleRunning}, ""},
		{"completions and running", []gputaskv1.MetricRole{gputaskv1.RoleCompletions, gputaskv1.RoleRunning, gputaskv1.RoleWaiting, gputaskv1.RoleWaitPercentile}, ""},
		{"no running", []gputaskv1.MetricRole{gputaskv1.RoleArrivals}, "the SLO policy needs a metric of role Running"},
		{"no arrivals", []gputaskv1.MetricRole{gputaskv1.RoleRunning, gputaskv1.RoleWaiting}, "the SLO policy needs a metric of role Arrivals or Completions"},
		{"no roles", []gputaskv1.MetricRole{""}, "the SLO policy needs a metric of role Running and one of role Arrivals or Completions"},
		{"twice", []gputaskv1.MetricRole{gputaskv1.RoleArrivals, gputaskv1.RoleRunning, gputaskv1.RoleRunning}, "the SLO policy reads one metric of role Running, 2 have it"},
	} {
		var metrics []MetricInput
		for _, r := range tc.roles {
			metrics = append(metrics, MetricInput{Role: r})
		}
		reason, msg := CheckRoles(metrics)
		if msg != tc.msg || (msg == "") != (reason == "") || (reason != "" && reason != ReasonMissingMetricRole) {
			t.Errorf("%s: %q %q, want %q", tc.name, reason, msg, tc.msg)
		}
	}
}

func TestInputsForSLO(t *testing.T) {
	set := &gputaskv1.GPUTaskSet{Spec: gputaskv1.GPUTaskSetSpec{Autoscaling: &gputaskv1.AutoscalingSpec{
		MaxReplicas: 10,
		Policy: gputaskv1.ScalingPolicy{Type: gputaskv1.SLOPolicy, SLO: &gputaskv1.SLOSpec{
			Wait: &gputaskv1.Duration{Duration: 10 * time.Second}, SlotsPerTask: 8,
		}},
		StartupTimeout: &gputaskv1.Duration{Duration: 3 * time.Minute},
		Metrics:        []gputaskv1.MetricSpec{{Name: "in", Role: gputaskv1.RoleArrivals}},
	}}}
	in := InputsFor(set, t0, []MetricInput{MetricFor(set.Spec.Autoscaling.Metrics[0])}, nil, nil)
	want := SLO{Wait: 10 * time.Second, Percentile: DefaultSLOPercentile, SlotsPerTask: 8, ServiceVariability: DefaultServiceTimeVariability}
	if in.Policy.SLO != want || in.Startup != 3*time.Minute || in.Metrics[0].Role != gputaskv1.RoleArrivals {
		t.Errorf("slo %+v startup %v metric %+v", in.Policy.SLO, in.Startup, in.Metrics[0])
	}
}

// FuzzDecideSLO: the SLO decision never yields NaN, never asks for fewer
// tasks than the running requests occupy (but one fewer, held against a
// single reading's ask for it), and more arrivals or more
// waiting requests at the same service time and arrival variability never
// ask for fewer tasks, but across a step of the arrivals or the share of
// them that finishes where the service time is learned, or in an empty
// pool.
func FuzzDecideSLO(f *testing.F) {
	f.Add(2.0, 2.0, 20.0, 0.0, 3.0, 0.5, int32(5), int32(100), int32(8), int64(10), 0.01, int64(15))
	f.Add(0.0, 0.0, 0.0, 0.0, -1.0, 0.0, int32(0), int32(1), int32(1), int64(1), 0.0, int64(0))
	f.Add(1e9, 1e-9, 1e12, 1e12, 1e300, 1e9, int32(100000), int32(100000), int32(100000), int64(3600), -5.0, int64(600))
	f.Fuzz(func(t *testing.T, arrivals, completions, running, waiting, observed, more float64,
		current, maxR, slots int32, waitSeconds int64, slope float64, lastAgo int64) {
		in := sloBase(arrivals, running, role(gputaskv1.RoleCompletions, completions), role(gputaskv1.RoleWaiting, waiting))
		if observed >= 0 {
			in.Metrics = append(in.Metrics, role(gputaskv1.RoleWaitPercentile, observed))
		}
		in.Current, in.Min, in.Max = current, 0, maxR
		in.Policy.SLO.SlotsPerTask = slots
		in.Policy.SLO.Wait = time.Duration(waitSeconds) * time.Second
		// Three earlier rates: a trend, but too few counts for Ca², which
		// stays 1, so the load alone changes between the two decisions.
		in.Queue = steady(arrivals, slope)
		in.Queue.Rates = in.Queue.Rates[len(in.Queue.Rates)-3:]
		in.Queue.LastTime = t0.Add(-time.Duration(lastAgo) * time.Second)
		d := Decide(in)
		for _, m := range d.Metrics {
			if m.Err != nil {
				return // a reading the API would not give
			}
		}
		o := d.SLO
		for _, v := range []float64{o.Arrivals, o.Expected, o.Backlog, o.Ca2, o.Cs2, o.Correction, o.PredictedWait} {
			if math.IsNaN(v) || v < 0 {
				t.Fatalf("outcome %+v", *o)
			}
		}
		norm := normalize(in)
		// A count at or above the model's meets the SLO by the model's own
		// prediction.
		if wait := norm.Policy.SLO.Wait.Seconds(); o.service > 0 && !o.Unmet && d.Desired >= o.Tasks && o.PredictedWait > wait*(1+1e-9) {
			t.Fatalf("%d tasks for %v/s predict a wait of %v, over the SLO of %v", d.Desired, o.Expected, o.PredictedWait, wait)
		}
		// A count held at the pool's against one reading's ask for one
		// task more may be one short of the tasks the running requests
		// occupy; the next reading that still finds them adds it.
		occupied := ceilSat(running / float64(norm.Policy.SLO.SlotsPerTask))
		if o.held {
			occupied = min(occupied, o.Tasks)
		}
		if o.Tasks < occupied || d.Desired < min(occupied, norm.Max) {
			t.Fatalf("%d tasks (desired %d) for %v running requests in %d slots a task", o.Tasks, d.Desired, running, norm.Policy.SLO.SlotsPerTask)
		}
		more = math.Abs(more)
		if math.IsNaN(more) || math.IsInf(more, 0) {
			return
		}
		for _, i := range []int{0, 3} {
			up := in
			up.Metrics = append([]MetricInput(nil), in.Metrics...)
			up.Metrics[i].Value += more
			// Arrivals that more than double the window's rates, or fall
			// below half the last, are a step (isJump), from which the
			// trend restarts: sized for the rate they read, they may
			// expect less than arrivals on the other side of the step,
			// read on the trend, or more.
			// Nor is the service time learned from a reading where fewer
			// than half the arrivals finish (littleRate): more arrivals
			// may keep the shorter one learned before. And a pool that
			// holds no request (under one) at the lowest reading of the
			// start-up is
			// traffic starting, sized for the rate it reads without the
			// trend (riseWithin): more arrivals into an empty pool may
			// no longer be the lowest reading, and requests waiting in
			// it make it no longer empty; either reads the trend.
			jump := func(in Inputs) bool { return isJump(in.Queue.Rates, in.Now, trendWindow(in), in.Metrics[0].Value) }
			learns := func(in Inputs) bool { _, ok := littleRate(completions, in.Metrics[0].Value); return ok }
			if running+waiting < 1 || i == 0 && (jump(up) != jump(in) || learns(up) != learns(in)) {
				continue
			}
			if e := Decide(up); e.Desired < d.Desired {
				t.Fatalf("%s %v → %v: %d tasks, %d before", up.Metrics[i].Name, in.Metrics[i].Value, up.Metrics[i].Value, e.Desired, d.Desired)
			}
		}
	})
}

// Evaluations a few milliseconds off whole intervals, as a cluster makes
// them, keep the readings of exact ones: the oldest rate of the trend's
// and of the dispersion's window is not lost to a late evaluation, so
// the expected rate and Ca² are those of the exact run to within the
// milliseconds.
func TestDecideSLOEvaluationJitter(t *testing.T) {
	rates := []float64{1, 1, 2, 4, 3, 1, 6, 2, 2, 5, 1, 3, 4, 8, 2, 1, 1, 3, 2, 6, 7, 9, 12, 15}
	run := func(late func(k int) time.Duration) (expected, ca2 float64, kept int) {
		var q QueueState
		for k, r := range rates {
			in := sloBase(r, 20)
			in.Now = t0.Add(time.Duration(k)*in.Interval + late(k))
			in.Queue = q
			d := Decide(in)
			q = d.Queue
			expected, ca2, kept = d.SLO.Expected, d.SLO.Ca2, len(q.Rates)
		}
		return expected, ca2, kept
	}
	exact, exactCa2, exactKept := run(func(int) time.Duration { return 0 })
	// Every evaluation on time but the last, which comes 3 ms late.
	late, lateCa2, lateKept := run(func(k int) time.Duration {
		if k == len(rates)-1 {
			return 3 * time.Millisecond
		}
		return 0
	})
	if lateKept != exactKept || math.Abs(late-exact) > 1e-3*exact || math.Abs(lateCa2-exactCa2) > 1e-3*exactCa2 {
		t.Errorf("3 ms late: %d rates kept, expected %v/s, Ca² %v; on time: %d, %v/s, %v", lateKept, late, lateCa2, exactKept, exact, exactCa2)
	}
}

func TestCountedSince(t *testing.T) {
	at := func(ago, inPool float64) RateSample {
		return RateSample{Time: t0.Add(-time.Duration(ago * float64(time.Second))), InPool: inPool}
	}
	jitter := 15 * time.Second / 4
	tests := []struct {
		name         string
		window       int
		rates        []RateSample
		inPool, span float64
	}{
		{name: "no reading before", rates: nil},
		{name: "only now", rates: []RateSample{at(0, 7)}},
		{name: "the reading one window ago", rates: []RateSample{at(90, 1), at(75, 2), at(60, 3), at(45, 4), at(30, 5), at(15, 6)}, inPool: 3, span: 60},
		{name: "a late evaluation widens the window by the jitter", rates: []RateSample{at(75, 2), at(63, 3), at(48, 4)}, inPool: 3, span: 63},
		{name: "beyond the jitter is outside", rates: []RateSample{at(64, 3), at(49, 4)}, inPool: 4, span: 49},
		{name: "fewer readings than the window: the last", rates: []RateSample{at(30, 5), at(15, 6)}, inPool: 6, span: 15},
		{name: "none a window ago: the last", rates: []RateSample{at(80, 1), at(50, 5), at(20, 6)}, inPool: 6, span: 20},
		{name: "readings further apart than the window", rates: []RateSample{at(300, 1), at(150, 2)}, inPool: 2, span: 150},
		{name: "a reading at now is not before it", rates: []RateSample{at(120, 1), at(0, 9)}, inPool: 1, span: 120},
		{name: "a window of 0 is the last reading", window: -1, rates: []RateSample{at(75, 2), at(60, 3), at(45, 4), at(30, 5), at(15, 6)}, inPool: 6, span: 15},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			window := CountWindow
			if tc.window < 0 {
				window = 0
			}
			inPool, span := countedSince(tc.rates, t0, window, jitter)
			if inPool != tc.inPool || span != tc.span {
				t.Errorf("countedSince = %v over %v s, want %v over %v s", inPool, span, tc.inPool, tc.span)
			}
		})
	}
}

func TestArrivalsFromCompletions(t *testing.T) {
	// Readings every 15 s, the pool's requests at each, oldest first.
	readings := func(inPool ...float64) []RateSample {
		var rates []RateSample
		for i, n := range inPool {
			rates = append(rates, RateSample{Time: t0.Add(-time.Duration(15*(len(inPool)-i)) * time.Second), InPool: n})
		}
		return rates
	}
	tests := []struct {
		name                 string
		rates                []RateSample
		completions, inPool  float64
		wantWindow, wantLast float64
	}{
		// 10/s finished over the minute and the pool held 100.
		{name: "steady", rates: readings(100, 100, 100, 100, 100), completions: 10, inPool: 100, wantWindow: 10, wantLast: 10},
		// 10/s arrive throughout. The completions fall from 10/s to 4/s
		// for the last 30 s (a client of long prompts fills the KV
		// caches): 7/s over the minute, and the pool grows by 6/s from
		// 100 to 280. The minute reads 7 + 180/60 = 10, exactly; the
		// interval 7 + 90/15 = 13.
		{name: "completions falling", rates: readings(100, 100, 100, 100, 190), completions: 7, inPool: 280, wantWindow: 10, wantLast: 13},
		// 10/s arrive throughout. New tasks drain a queue: 16/s finish
		// for the last 30 s, 13/s over the minute, and the pool falls
		// from 280 to 100. The minute reads 13 - 180/60 = 10; the
		// interval 13 - 90/15 = 7.
		{name: "a queue drained", rates: readings(280, 280, 280, 280, 190), completions: 13, inPool: 100, wantWindow: 10, wantLast: 7},
		// A step from 10/s to 40/s 15 s ago, none of it finished yet:
		// the pool grew by 450. The minute's mean is 10 + 450/60 = 17.5,
		// the interval's 10 + 450/15 = 40.
		{name: "a step up", rates: readings(100, 100, 100, 100, 100), completions: 10, inPool: 550, wantWindow: 17.5, wantLast: 40},
		{name: "no reading before", completions: 10, inPool: 550, wantWindow: 10, wantLast: 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			window, last := arrivalsFromCompletions(tc.rates, t0, 15*time.Second/4, tc.completions, tc.inPool)
			if math.Abs(window-tc.wantWindow) > 1e-9 || math.Abs(last-tc.wantLast) > 1e-9 {
				t.Errorf("arrivals %v over the window and %v over the interval, want %v and %v", window, last, tc.wantWindow, tc.wantLast)
			}
		})
	}
}

func TestRiseWithinReadsTheRatesThatFillTheSlots(t *testing.T) {
	// The minute's rate is flat at 10/s while the rate over the service
	// time rose from 10 to 30 within the start-up (a burst the minute's
	// mean smooths away), and the last interval's to 50.
	var rates []RateSample
	for ago := 120; ago >= 0; ago -= 15 {
		over, recent := 10.0, 10.0
		if ago <= 30 {
			over, recent = 30, 50
		}
		rates = append(rates, RateSample{Time: t0.Add(-time.Duration(ago) * time.Second), Rate: 10, Recent: recent, OverService: over})
	}
	if got, _, began, from, _ := riseWithin(rates, t0, 2*time.Minute); got != 20 || !began.Equal(t0.Add(-30*time.Second)) || !from.Equal(t0.Add(-120*time.Second)) {
		t.Errorf("rise %v that began at %v from a reading at %v, want 20 that began 30 s ago from one 120 s ago", got, began.Sub(t0), from.Sub(t0))
	}
}

func TestRiseWithinBegan(t *testing.T) {
	ramp := func(f func(ago int) float64) []RateSample {
		var rates []RateSample
		for ago := 120; ago >= 0; ago -= 15 {
			rates = append(rates, RateSample{Time: t0.Add(-time.Duration(ago) * time.Second), Rate: f(ago), OverService: f(ago), InPool: 10 * f(ago)})
		}
		return rates
	}
	tests := []struct {
		name      string
		rates     []RateSample
		wantRise  float64
		wantBegan time.Duration
		wantIdle  bool
	}{
		{"a step 75 s ago: its readings all say when it came", ramp(func(ago int) float64 {
			if ago <= 75 {
				return 30
			}
			return 10
		}), 20, -75 * time.Second, false},
		{"a step from idle: the pool empty before it", ramp(func(ago int) float64 {
			if ago <= 75 {
				return 30
			}
			return 0.05
		}), 29.95, -75 * time.Second, true},
		{"a step from idle a start-up ago: the lowest rate counted over a minute of idle", func() []RateSample {
			// Idle until 120 s ago; the minute's rate climbs for a
			// minute after it, and the window's lowest, 10/s 120 s ago,
			// is the first of the climb.
			var rates []RateSample
			for ago := 180; ago >= 0; ago -= 15 {
				r := min(40, 10*float64(max(0, 135-ago))/15)
				rates = append(rates, RateSample{Time: t0.Add(-time.Duration(ago) * time.Second), Rate: r, OverService: r, InPool: 10 * r})
			}
			return rates
		}(), 30, -90 * time.Second, true},
		{"a steady climb: halfway up the window", ramp(func(ago int) float64 { return 10 + float64(120-ago)/15 }), 8, -60 * time.Second, false},
		{"a fall: no rise, now", ramp(func(ago int) float64 { return float64(ago) }), 0, 0, true},
		{"the lowest after a higher one: from the lowest", ramp(func(ago int) float64 {
			switch {
			case ago > 90:
				return 5
			case ago > 45:
				return 2
			}
			return 12
		}), 10, -45 * time.Second, false},
		{"none", nil, 0, 0, false},
		{"a queue draining: the interval read below the minute is no low", func() []RateSample {
			// Arrivals held at 30/s. 60 s ago the new tasks cleared a
			// backlog faster than the minute's completions showed, so
			// the rate derived for that interval read 8/s; the minute's
			// never left 30.
			rates := ramp(func(int) float64 { return 30 })
			rates[4].OverService = 8
			rates[len(rates)-1].OverService = 34
			return rates
		}(), 4, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rise, _, began, _, idle := riseWithin(tc.rates, t0, 2*time.Minute)
			if math.Abs(rise-tc.wantRise) > 1e-9 || !began.Equal(t0.Add(tc.wantBegan)) || idle != tc.wantIdle {
				t.Errorf("rise %v that began at %v from idle %v, want %v at %v from idle %v", rise, began.Sub(t0), idle, tc.wantRise, tc.wantBegan, tc.wantIdle)
			}
		})
	}
}

func TestServiceIntervals(t *testing.T) {
	tests := []struct {
		name     string
		little   queueing.Little
		interval time.Duration
		want     float64
	}{
		{"unknown service time: one interval", queueing.Little{}, 15 * time.Second, 1},
		{"shorter than an interval: one", queueing.Little{Running: 20, Completions: 2}, 15 * time.Second, 1},
		{"22.5 s at 15 s intervals: one and a half", queueing.Little{Running: 45, Completions: 2}, 15 * time.Second, 1.5},
		{"a minute: four", queueing.Little{Running: 120, Completions: 2}, 15 * time.Second, 4},
		{"longer than CountWindow: CountWindow's", queueing.Little{Running: 600, Completions: 2}, 15 * time.Second, 4},
		{"no interval: one", queueing.Little{Running: 120, Completions: 2}, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := serviceIntervals(tt.little, tt.interval); got != tt.want {
				t.Errorf("serviceIntervals = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMeanOfLast(t *testing.T) {
	rates := []RateSample{{Recent: 100}, {Recent: 2}, {Recent: 4}}
	for _, tt := range []struct {
		n    float64
		want float64
	}{
		{1, 6}, {2, 5}, {3, 4}, {4, 28}, {9, 28},
		// The oldest of the readings weighs a part: (6 + 4/2) / 1.5.
		{1.5, 16.0 / 3},
		// A service time a little longer weighs a little more of the
		// past: the mean moves by a little, not to the next whole count.
		{2.01, (6 + 4 + 0.01*2) / 2.01},
	} {
		if got := meanOfLast(rates, 6, tt.n); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("meanOfLast(n=%v) = %v, want %v", tt.n, got, tt.want)
		}
	}
	if got := meanOfLast(nil, 6, 4); got != 6 {
		t.Errorf("meanOfLast with no reading before = %v, want 6", got)
	}
}

// TestSLOReadingAtTheLastInstant: a reading at the instant of the last
// one, or before it, teaches no service time; the first reading of a
// state learns it whole.
func TestSLOReadingAtTheLastInstant(t *testing.T) {
	for _, tc := range []struct {
		name string
		ago  time.Duration
		want time.Duration
	}{
		{"at the last instant", 0, 10 * time.Second},
		{"before it", -time.Minute, 10 * time.Second},
		{"15 s after it", 15 * time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := sloBase(2, 80, role(gputaskv1.RoleCompletions, 1))
			in.Queue = steady(2, 0)
			in.Queue.LastTime = t0.Add(-tc.ago)
			d := Decide(in)
			got := d.SLO.ServiceTime
			if tc.want == 0 {
				// 80 running over 1 finished a second, a quarter of a
				// minute's weight: the service time moves off 10 s.
				if got <= 10*time.Second {
					t.Errorf("service time %v, want it to have learned from the reading", got)
				}
				return
			}
			if got != tc.want {
				t.Errorf("service time %v, want %v: the reading taught it", got, tc.want)
			}
		})
	}
	in := sloBase(2, 80, role(gputaskv1.RoleCompletions, 1))
	if d := Decide(in); d.SLO.ServiceTime != 80*time.Second {
		t.Errorf("first reading: service time %v, want 80s", d.SLO.ServiceTime)
	}
}
