package scaling

import (
	"strings"
	"testing"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"k8s.io/utils/ptr"
)

func schedule(name, start, tz string, d time.Duration, minR int32, maxR *int32) gputaskv1.ScheduleSpec {
	return gputaskv1.ScheduleSpec{Name: name, Start: start, TimeZone: tz, Duration: gputaskv1.Duration{Duration: d}, MinReplicas: minR, MaxReplicas: maxR}
}

func TestScheduleAt(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	// Monday 2026-11-23.
	at := func(h, m int) time.Time { return time.Date(2026, 11, 23, h, m, 0, 0, berlin) }
	weekdays := schedule("morning", "0 9 * * 1-5", "Europe/Berlin", 3*time.Hour, 8, nil)
	night := schedule("night", "0 22 * * *", "Europe/Berlin", 8*time.Hour, 0, ptr.To[int32](2))
	evening := schedule("evening", "0 18 * * *", "", 4*time.Hour, 4, nil)
	for _, tc := range []struct {
		name      string
		schedules []gputaskv1.ScheduleSpec
		now       time.Time
		want      string
	}{
		{"before the window", []gputaskv1.ScheduleSpec{weekdays}, at(8, 59), ""},
		{"as it opens", []gputaskv1.ScheduleSpec{weekdays}, at(9, 0), "morning"},
		{"inside", []gputaskv1.ScheduleSpec{weekdays}, at(11, 59), "morning"},
		{"as it closes", []gputaskv1.ScheduleSpec{weekdays}, at(12, 0), ""},
		{"not on a Saturday", []gputaskv1.ScheduleSpec{weekdays}, time.Date(2026, 11, 28, 10, 0, 0, 0, berlin), ""},
		{"across midnight", []gputaskv1.ScheduleSpec{night}, time.Date(2026, 11, 24, 3, 0, 0, 0, berlin), "night"},
		{"in UTC without a time zone: 18:00 UTC is 19:00 in Berlin", []gputaskv1.ScheduleSpec{evening}, at(18, 30), ""},
		{"in UTC, open", []gputaskv1.ScheduleSpec{evening}, at(19, 30), "evening"},
		{"the highest floor wins", []gputaskv1.ScheduleSpec{night, evening}, at(22, 30), "evening"},
		{"a schedule that does not parse is skipped", []gputaskv1.ScheduleSpec{schedule("bad", "61 9 * * *", "", time.Hour, 3, nil), weekdays}, at(10, 0), "morning"},
		{"an unknown time zone is skipped", []gputaskv1.ScheduleSpec{schedule("bad", "0 9 * * *", "Mars/Olympus", time.Hour, 3, nil)}, at(9, 30), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ScheduleAt(tc.schedules, tc.now)
			if name := func() string {
				if got == nil {
					return ""
				}
				return got.Name
			}(); name != tc.want {
				t.Errorf("ScheduleAt(%v) = %q, want %q", tc.now, name, tc.want)
			}
		})
	}
}

func TestDecideWithSchedule(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     Inputs
		want   int32
		reason string
		msg    string
	}{
		{name: "the floor raises a low count", in: with(base(load(0.2)), func(in *Inputs) { in.Schedule = &Window{Name: "morning", Min: 8} }),
			want: 8, reason: ReasonTooFewReplicas, msg: "raised to minReplicas 8 of schedule morning"},
		{name: "above the floor it scales as usual", in: with(base(load(0.9)), func(in *Inputs) { in.Current = 9; in.Schedule = &Window{Name: "morning", Min: 8} }),
			want: 12, reason: ReasonScaleUpAboveThreshold},
		{name: "the ceiling caps", in: with(base(load(0.9)), func(in *Inputs) { in.Schedule = &Window{Name: "night", Max: ptr.To[int32](6)} }),
			want: 6, reason: ReasonTooManyReplicas, msg: "capped at maxReplicas 6 of schedule night"},
		{name: "a floor above maxReplicas stops at maxReplicas", in: with(base(load(0.6)), func(in *Inputs) { in.Schedule = &Window{Name: "peak", Min: 50} }),
			want: 20, reason: ReasonTooFewReplicas, msg: "of schedule peak"},
		{name: "a ceiling never lifts maxReplicas", in: with(base(load(0.9)), func(in *Inputs) { in.Max = 6; in.Schedule = &Window{Name: "x", Max: ptr.To[int32](30)} }),
			want: 6, reason: ReasonTooManyReplicas},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.in)
			if d.Desired != tc.want || d.Reason != tc.reason || !strings.Contains(d.Message, tc.msg) {
				t.Errorf("Decide() = %d %s %q, want %d %s containing %q", d.Desired, d.Reason, d.Message, tc.want, tc.reason, tc.msg)
			}
			if tc.in.Schedule != nil && !strings.Contains(d.Inputs, "schedule "+tc.in.Schedule.Name) {
				t.Errorf("inputs %q do not name the schedule", d.Inputs)
			}
		})
	}
}
