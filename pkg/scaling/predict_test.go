package scaling

import (
	"strings"
	"testing"
	"time"
)

// monday is 2026-11-23, a Monday, at midnight UTC.
var monday = time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)

func TestHistory(t *testing.T) {
	at := func(day, hour, minute int) time.Time {
		return monday.Add(time.Duration(day)*24*time.Hour + time.Duration(hour)*time.Hour + time.Duration(minute)*time.Minute)
	}
	var h History
	if _, ok := h.Forecast(at(0, 9, 0)); ok {
		t.Fatal("an empty history forecasts")
	}
	h.Learn(at(0, 9, 1), 4)
	h.Learn(at(0, 9, 7), 10)
	h.Learn(at(0, 9, 12), 6)
	if _, ok := h.Forecast(at(0, 9, 14)); ok {
		t.Error("a slot seen only today forecasts")
	}
	if got, ok := h.Forecast(at(1, 9, 0)); !ok || got != 10 {
		t.Errorf("Tuesday 9:00 = %v, %v; want Monday's peak 10", got, ok)
	}
	if _, ok := h.Forecast(at(1, 10, 0)); ok {
		t.Error("a quarter hour never seen forecasts")
	}
	if _, ok := h.Forecast(at(5, 9, 0)); ok {
		t.Error("Saturday forecasts from weekdays")
	}
	// Tuesday's peak is 20: blended half and half with Monday's.
	h.Learn(at(1, 9, 10), 20)
	if got, ok := h.Forecast(at(1, 9, 14)); !ok || got != 20 {
		t.Errorf("Tuesday 9:14, after 20 today = %v, %v; want the higher 20", got, ok)
	}
	if got, ok := h.Forecast(at(2, 9, 0)); !ok || got != 15 {
		t.Errorf("Wednesday 9:00 = %v, %v; want (10 + 20) / 2", got, ok)
	}
	// Round trip, and a damaged value starts over.
	back := DecodeHistory(h.Encode())
	if back != h {
		t.Errorf("decoded history differs:\n got %+v\nwant %+v", back, h)
	}
	if len(h.Encode()) > 2048 {
		t.Errorf("encoded history of %d bytes, over the CRD's 2048", len(h.Encode()))
	}
	for _, bad := range []string{"", "not base64!", "AAAA"} {
		if DecodeHistory(bad) != (History{}) {
			t.Errorf("DecodeHistory(%q) is not empty", bad)
		}
	}
	// Nonsense is not learned.
	h2 := h
	h2.Learn(at(2, 9, 0), -1)
	h2.Learn(at(2, 9, 0), nan())
	if h2 != h {
		t.Error("a negative or NaN demand was learned")
	}
}

func nan() float64 { var z float64; return z / z }

func TestDecidePredictive(t *testing.T) {
	var learned History
	learned.Learn(monday.Add(9*time.Hour+5*time.Minute), 12)
	tuesday := monday.Add(24*time.Hour + 8*time.Hour + 55*time.Minute)
	on := func(preview bool) *Predictive { return &Predictive{Lead: 10 * time.Minute, Preview: preview} }
	for _, tc := range []struct {
		name     string
		in       Inputs
		want     int32
		reason   string
		forecast int32 // 0: none
		msg      string
	}{
		{name: "no history yet: reactive only", in: with(base(load(0.6)), func(in *Inputs) { in.Now, in.Predictive = tuesday, on(false) }),
			want: 5, reason: ReasonWithinThresholds, msg: "not enough history yet"},
		{name: "the forecast one lead ahead raises the count", in: with(base(load(0.6)), func(in *Inputs) { in.Now, in.Predictive, in.History = tuesday, on(false), learned }),
			want: 12, reason: ReasonTooFewReplicas, forecast: 12, msg: "12 tasks forecast for 09:05 UTC"},
		{name: "preview reports and does not act", in: with(base(load(0.6)), func(in *Inputs) { in.Now, in.Predictive, in.History = tuesday, on(true), learned }),
			want: 5, reason: ReasonWithinThresholds, forecast: 12, msg: "preview: not acting on it"},
		{name: "the forecast never lowers", in: with(base(load(0.9)), func(in *Inputs) {
			in.Now, in.Predictive, in.History, in.Current = tuesday, on(false), learned, 15
		}), want: 18, reason: ReasonScaleUpAboveThreshold, forecast: 12},
		{name: "nor stops a scale-down to it", in: with(base(load(0.1)), func(in *Inputs) {
			in.Now, in.Predictive, in.History, in.Current = tuesday, on(false), learned, 15
		}), want: 14, reason: ReasonScaleDownBelowThreshold, forecast: 12},
		{name: "within maxReplicas", in: with(base(load(0.6)), func(in *Inputs) { in.Now, in.Predictive, in.History, in.Max = tuesday, on(false), learned, 8 }),
			want: 8, reason: ReasonTooFewReplicas, forecast: 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.in)
			if d.Desired != tc.want || d.Reason != tc.reason {
				t.Errorf("Decide() = %d (%s: %s), want %d (%s)", d.Desired, d.Reason, d.Message, tc.want, tc.reason)
			}
			if got := int32(0); d.Forecast != nil {
				got = *d.Forecast
				if got != tc.forecast {
					t.Errorf("Forecast = %d, want %d", got, tc.forecast)
				}
			} else if tc.forecast != 0 {
				t.Errorf("no forecast, want %d", tc.forecast)
			}
			if tc.msg != "" && !strings.Contains(d.ForecastMessage, tc.msg) {
				t.Errorf("forecast message %q lacks %q", d.ForecastMessage, tc.msg)
			}
			if tc.reason == ReasonTooFewReplicas && !strings.Contains(d.Message, "of the predictive forecast") {
				t.Errorf("message %q does not name the forecast", d.Message)
			}
		})
	}
	// The evaluation itself is learned: 5 serving at 0.6 against the
	// middle of the thresholds (0.65) is 4.6 tasks.
	d := Decide(with(base(load(0.6)), func(in *Inputs) { in.Now, in.Predictive = tuesday, on(false) }))
	if got, ok := d.History.Forecast(tuesday.Add(24 * time.Hour)); !ok || got < 4.6 || got > 4.62 {
		t.Errorf("learned %v, %v for Wednesday 8:55, want 4.6", got, ok)
	}
}

// FuzzHistory: any history string decodes without panicking, and learning
// and forecasting never panic or produce a negative forecast.
func FuzzHistory(f *testing.F) {
	var h History
	h.Learn(monday, 3)
	f.Add(h.Encode(), int64(0), 2.5)
	f.Add("", int64(1e12), 1e300)
	f.Add("////", int64(-1e12), -1.0)
	f.Fuzz(func(t *testing.T, encoded string, sec int64, tasks float64) {
		h := DecodeHistory(encoded)
		now := time.Unix(sec%(1<<40), 0)
		h.Learn(now, tasks)
		if v, ok := h.Forecast(now.Add(24 * time.Hour)); ok && v < 0 {
			t.Fatalf("negative forecast %v", v)
		}
		if DecodeHistory(h.Encode()) != h {
			t.Fatal("round trip changed the history")
		}
	})
}
