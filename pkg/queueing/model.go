package queueing

import "math"

// Model is what the law needs to know of a pool besides its load. Times
// are in seconds and rates in requests per second.
type Model struct {
	// ServiceTime is the mean time a request holds a slot.
	ServiceTime float64
	// Slots is how many requests one task serves at once.
	Slots int32
	// Ca2 and Cs2 are the squared coefficients of variation of the times
	// between arrivals and of the service times: 1 for Poisson arrivals and
	// exponential service (M/M/c), 0 for clockwork.
	Ca2, Cs2 float64
}

// SLO is a wait objective: at most Wait seconds at the Percentile of
// requests, such as 10 s at the 95th.
type SLO struct {
	Wait       float64
	Percentile float64
}

// Bounds that keep the law total for any input.
const (
	// MaxSlots bounds a task's slots, so that c = tasks × slots stays
	// within an int64 for any task count.
	MaxSlots = 1 << 20
	// MinPercentile and MaxPercentile bound the percentile: the tail
	// allowed to wait longer is never 0 (no pool would do) or above a half.
	MinPercentile = 50
	MaxPercentile = 99.999
)

// excess is the share of requests allowed to wait longer than the SLO.
func (s SLO) excess() float64 {
	p := s.Percentile
	if !(p >= MinPercentile) {
		p = MinPercentile
	}
	return 1 - min(p, MaxPercentile)/100
}

func (s SLO) wait() float64 {
	if !(s.Wait > 0) {
		return 0
	}
	return s.Wait
}

// stretch is the Allen–Cunneen factor (Ca² + Cs²)/2 by which a G/G/c
// queue's waits exceed the M/M/c queue's.
func (m Model) stretch() float64 {
	v := (clean(m.Ca2) + clean(m.Cs2)) / 2
	return v
}

func (m Model) slots() int64 { return int64(min(max(m.Slots, 1), MaxSlots)) }

func (m Model) serviceTime() float64 {
	if !(m.ServiceTime > 0) || math.IsInf(m.ServiceTime, 1) {
		return 0
	}
	return m.ServiceTime
}

// load is the offered load in erlangs: the slots the arrivals keep busy.
func (m Model) load(rate float64) float64 {
	a := clean(rate) * m.serviceTime()
	if math.IsNaN(a) {
		return 0
	}
	return a
}

// clean maps what is not a number ≥ 0 to 0, keeping +Inf.
func clean(v float64) float64 {
	if !(v > 0) {
		return 0
	}
	return v
}

// Tail is the share of requests that wait longer than t seconds with tasks
// tasks at the given arrival rate, by the Allen–Cunneen approximation of
// the G/G/c tail:
//
//	P(wait > t) ≈ C(c, a) · exp(−(c − a) · t / (S · (Ca² + Cs²)/2))
//
// with c = tasks × slots, a = rate × S and C Erlang C. It is 1 when the
// slots cannot keep up (a ≥ c) and 0 without load.
func (m Model) Tail(tasks int32, rate, t float64) float64 {
	a := m.load(rate)
	if a == 0 {
		return 0
	}
	c := int64(max(tasks, 0)) * m.slots()
	if a >= float64(c) {
		return 1
	}
	return m.tailFrom(ErlangB(int(c), a), c, a, max(t, 0))
}

// tailFrom is Tail given B = ErlangB(c, a) for a < c.
func (m Model) tailFrom(b float64, c int64, a, t float64) float64 {
	fc := float64(c)
	erlangC := fc * b / (fc - a*(1-b))
	v := m.stretch()
	if v == 0 {
		// Without variability nobody waits while the slots keep up.
		if t > 0 {
			return 0
		}
		return erlangC
	}
	return erlangC * math.Exp(-(fc-a)*t/(m.serviceTime()*v))
}

// WaitPercentile is the wait that the SLO's percentile of requests stays
// within, with tasks tasks at the given arrival rate: 0 when fewer than the
// excess share wait at all, +Inf when the slots cannot keep up.
func (m Model) WaitPercentile(tasks int32, rate float64, slo SLO) float64 {
	a := m.load(rate)
	if a == 0 {
		return 0
	}
	c := int64(max(tasks, 0)) * m.slots()
	if a >= float64(c) {
		return math.Inf(1)
	}
	fc := float64(c)
	b := ErlangB(int(c), a)
	erlangC := fc * b / (fc - a*(1-b))
	eps := slo.excess()
	if erlangC <= eps || m.stretch() == 0 {
		return 0
	}
	return m.serviceTime() * m.stretch() * math.Log(erlangC/eps) / (fc - a)
}

// Tasks is the smallest task count, at most limit, whose slots keep the
// SLO at the given arrival rate: P(wait > slo.Wait) ≤ 1 − percentile. met
// is false when even limit tasks do not; then tasks is limit. No load
// needs no task.
//
// The Erlang-B recursion runs once up the server counts, checking each
// whole task on the way, so the search costs what one ErlangB at the
// answer does.
func (m Model) Tasks(rate float64, slo SLO, limit int32) (tasks int32, met bool) {
	limit = max(limit, 0)
	a := m.load(rate)
	if a == 0 {
		return 0, true
	}
	slots := m.slots()
	if a >= float64(int64(limit)*slots) {
		return limit, false
	}
	eps, wait := slo.excess(), slo.wait()
	// The first count whose slots exceed the load: fewer never keep up.
	n := int64(a/float64(slots)) + 1
	k, b := warmStart(int(n*slots), a)
	for ; n <= int64(limit); n++ {
		c := n * slots
		for int64(k) < c {
			k++
			b = a * b / (float64(k) + a*b)
		}
		if m.tailFrom(b, c, a, wait) <= eps {
			return int32(n), true
		}
	}
	return limit, false
}
