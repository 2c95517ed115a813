package scaling

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// Predictive is predictive pre-warming (autoscaling.predictive).
type Predictive struct {
	// Lead is how far ahead the forecast looks.
	Lead time.Duration
	// Preview computes and reports the forecast without acting on it.
	Preview bool
}

// History is the demand a set served, in tasks, learned by quarter hour of
// the day (UTC), apart for weekdays and weekends: 192 slots. Each slot
// keeps the highest demand of the day it was last seen on, and what it
// learned from the days before, blended half and half each day, so that a
// change of pattern shows within a few days. It encodes in 1,344 bytes
// (1,792 characters of base64).
type History struct {
	slots [historySlots]historySlot
}

const historySlots = 192

type historySlot struct {
	// learned and today are demands in hundredths of a task.
	learned, today uint16
	// day is the day of the last reading (days since 1970, modulo 2^16);
	// days counts the days it was seen on, up to 255.
	day  uint16
	days uint8
}

const slotBytes = 7

// slotOf is the slot of t: the quarter hour of the day, plus 96 on
// Saturday and Sunday.
func slotOf(t time.Time) int {
	t = t.UTC()
	i := t.Hour()*4 + t.Minute()/15
	if wd := t.Weekday(); wd == time.Saturday || wd == time.Sunday {
		i += 96
	}
	return i
}

func dayOf(t time.Time) uint16 { return uint16(t.UTC().Unix() / 86400) }

func centi(tasks float64) uint16 {
	return uint16(min(max(math.Round(tasks*100), 0), math.MaxUint16))
}

// Learn records that the set needed tasks at now.
func (h *History) Learn(now time.Time, tasks float64) {
	if !(tasks >= 0) || math.IsInf(tasks, 0) {
		return
	}
	s := &h.slots[slotOf(now)]
	day := dayOf(now)
	switch {
	case s.days == 0:
		s.today, s.day, s.days = centi(tasks), day, 1
	case s.day != day:
		s.learned = s.folded()
		s.today, s.day = centi(tasks), day
		s.days = min(s.days, 254) + 1
	default:
		s.today = max(s.today, centi(tasks))
	}
}

// folded is what the slot knows of the days before its last one, with that
// day's peak blended in.
func (s *historySlot) folded() uint16 {
	if s.days <= 1 {
		return s.today
	}
	return uint16((uint32(s.learned) + uint32(s.today) + 1) / 2)
}

// Forecast returns the tasks the set will need at t, and whether the slot
// of t has been seen on a day before t's day: until then there is not
// enough history, and nothing is forecast.
func (h *History) Forecast(t time.Time) (float64, bool) {
	s := h.slots[slotOf(t)]
	switch {
	case s.days == 0:
		return 0, false
	case s.day != dayOf(t):
		return float64(s.folded()) / 100, true
	case s.days >= 2:
		// Seen today already: what the days before taught, or more.
		return float64(max(s.learned, s.today)) / 100, true
	default:
		return 0, false
	}
}

// Encode is the history as status.predictive.history keeps it.
func (h *History) Encode() string {
	buf := make([]byte, 0, historySlots*slotBytes)
	for _, s := range h.slots {
		buf = binary.BigEndian.AppendUint16(buf, s.learned)
		buf = binary.BigEndian.AppendUint16(buf, s.today)
		buf = binary.BigEndian.AppendUint16(buf, s.day)
		buf = append(buf, s.days)
	}
	return base64.RawStdEncoding.EncodeToString(buf)
}

// DecodeHistory reads status.predictive.history. An empty, foreign or
// damaged value is an empty history: learning starts again.
func DecodeHistory(v string) History {
	var h History
	buf, err := base64.RawStdEncoding.DecodeString(v)
	if err != nil || len(buf) != historySlots*slotBytes {
		return h
	}
	for i := range h.slots {
		b := buf[i*slotBytes:]
		h.slots[i] = historySlot{
			learned: binary.BigEndian.Uint16(b), today: binary.BigEndian.Uint16(b[2:]),
			day: binary.BigEndian.Uint16(b[4:]), days: b[6],
		}
	}
	return h
}

// forecasting wraps a policy with predictive pre-warming (rule 16): it
// learns the demand the policy's levels read and raises Min to the
// forecast one lead time ahead, so it only ever raises the count.
type forecasting struct {
	inner  rule
	levels levels
}

func (f forecasting) ask(in *Inputs, d *Decision) step {
	*in = predict(*in, d, f.levels)
	return f.inner.ask(in, d)
}

func (f forecasting) settle(in Inputs, d *Decision, s step) step { return f.inner.settle(in, d, s) }

// neededTasks is the demand this evaluation saw, in tasks: the most any
// metric that was read asks for from the tasks that serve, at its level
// (target, or the middle of the thresholds for Step). ok is false when no
// metric was read.
func neededTasks(in Inputs, l levels) (float64, bool) {
	serving := float64(max(in.Current-in.Starting, 0))
	var need float64
	ok := false
	for _, m := range in.Metrics {
		level := l.demandLevel(m)
		if m.Err != nil || checkValue(m.Value) != nil || !(level > 0) || math.IsInf(level, 0) {
			continue
		}
		need, ok = max(need, serving*m.Value/level), true
	}
	return need, ok
}

// predict learns from this evaluation and forecasts one lead time ahead;
// in Active mode a forecast raises Min, as a schedule's floor does (rule
// 16). It fills the decision's History, Forecast and ForecastMessage.
func predict(in Inputs, d *Decision, l levels) Inputs {
	h := in.History
	if need, ok := neededTasks(in, l); ok && !in.Paused && !in.Stopped {
		h.Learn(in.Now, need)
	}
	d.History = h
	at := in.Now.Add(in.Predictive.Lead)
	tasks, ok := h.Forecast(at)
	if !ok {
		d.ForecastMessage = fmt.Sprintf("not enough history yet: no demand learned for %s on a day before", slotName(at))
		return in
	}
	forecast := ceilSat(tasks - 1e-9)
	d.Forecast = &forecast
	mode := "acting on it"
	if in.Predictive.Preview {
		mode = "preview: not acting on it"
	}
	d.ForecastMessage = fmt.Sprintf("%d tasks forecast for %s (%s), %s", forecast, at.UTC().Format("15:04 MST"), slotName(at), mode)
	if !in.Predictive.Preview {
		if floor := min(forecast, in.Max); floor > in.Min {
			in.Min, in.floorFrom = floor, "the predictive forecast"
		}
	}
	return in
}

func slotName(t time.Time) string {
	kind := "weekdays"
	if slotOf(t) >= historySlots/2 {
		kind = "weekends"
	}
	t = t.UTC().Truncate(15 * time.Minute)
	return fmt.Sprintf("%s–%s UTC on %s", t.Format("15:04"), t.Add(15*time.Minute).Format("15:04"), kind)
}
