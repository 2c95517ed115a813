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
// tasks at the given arrival rate:
//
//	P(wait > t) ≈ C(a + (c − a)/√v, a) · exp(−(c − a) · t / (S · v)),  v = (Ca² + Cs²)/2
//
// with c = tasks × slots, a = rate × S and C Erlang C. The exponent is the
// Allen–Cunneen approximation: the M/M/c wait stretched by v. Bursty
// arrivals also make waiting at all more likely than Erlang C says; in
// the many-server regime a G/G/c queue waits as often as an M/M/c queue
// whose spare slots c − a are divided by √v (Halfin–Whitt), so C is taken
// there, between whole server counts by linear interpolation. At v = 1
// (M/M/c) this is Erlang C's tail exactly. Against a simulated queue of 64
// slots at a = 50 with Ca² = 4, it gives 0.090 where the simulation
// measures 0.092; Erlang C unscaled would give 0.021 (simulate_test.go).
// Tail is 1 when the slots cannot keep up (a ≥ c) and 0 without load.
func (m Model) Tail(tasks int32, rate, t float64) float64 {
	a := m.load(rate)
	if a == 0 {
		return 0
	}
	c := int64(max(tasks, 0)) * m.slots()
	if a >= float64(c) {
		return 1
	}
	var cur erlangCursor
	return m.tailAt(&cur, c, a, max(t, 0))
}

// erlangCursor runs the Erlang-B recursion up the server counts for one
// offered load, so that a search over growing counts costs one recursion.
type erlangCursor struct {
	started bool
	k       int
	b       float64
	// steps counts the recursion's steps, for the tests.
	steps int
}

// moveTo sets the cursor to Erlang B at k servers for offered load a,
// from where it is, or from warmStart when it has not started or is
// above k. Once B is below the smallest normal float64 it is taken as 0,
// which it then stays (subnormal, it would sit at the smallest float64
// until k is twice the load), and the cursor jumps to k.
func (e *erlangCursor) moveTo(k int, a float64) {
	if !e.started || e.k > k {
		e.k, e.b = warmStart(k, a)
		e.started = true
	}
	for e.k < k {
		if e.b < minNormal {
			e.k, e.b = k, 0
			break
		}
		e.k++
		e.steps++
		e.b = a * e.b / (float64(e.k) + a*e.b)
	}
}

// erlangC is Erlang C at a whole count k ≥ 0 for offered load a; the
// cursor only moves up, so k must not fall between calls.
func (e *erlangCursor) erlangC(k int, a float64) float64 {
	if float64(k) <= a {
		return 1
	}
	e.moveTo(k, a)
	fk := float64(k)
	return fk * e.b / (fk - a*(1-e.b))
}

// delayed is the chance of waiting at all: Erlang C at the equivalent
// server count a + (c − a)/√v, 0 without variability.
func (m Model) delayed(cur *erlangCursor, c int64, a float64) float64 {
	v := m.stretch()
	if v == 0 {
		return 0
	}
	eq := a + (float64(c)-a)/math.Sqrt(v)
	if eq >= math.MaxInt32 {
		// Beyond any pool: as good as never waiting.
		eq = math.MaxInt32
	}
	lo := math.Floor(eq)
	f := eq - lo
	cLo := cur.erlangC(int(lo), a)
	if f == 0 {
		return cLo
	}
	return (1-f)*cLo + f*cur.erlangC(int(lo)+1, a)
}

// tailAt is Tail for a < c.
func (m Model) tailAt(cur *erlangCursor, c int64, a, t float64) float64 {
	v := m.stretch()
	if v == 0 {
		// Without variability nobody waits while the slots keep up.
		return 0
	}
	return m.delayed(cur, c, a) * math.Exp(-(float64(c)-a)*t/(m.serviceTime()*v))
}

// WaitPercentile is the wait that the SLO's percentile of requests stays
// within, with tasks tasks at the given arrival rate (where Tail equals the
// excess share): 0 when fewer than the excess share wait at all, +Inf when
// the slots cannot keep up.
func (m Model) WaitPercentile(tasks int32, rate float64, slo SLO) float64 {
	a := m.load(rate)
	if a == 0 {
		return 0
	}
	c := int64(max(tasks, 0)) * m.slots()
	if a >= float64(c) {
		return math.Inf(1)
	}
	var cur erlangCursor
	delayed, eps := m.delayed(&cur, c, a), slo.excess()
	if delayed <= eps {
		return 0
	}
	return m.serviceTime() * m.stretch() * math.Log(delayed/eps) / (float64(c) - a)
}

// Tasks is the smallest task count, at most limit, whose slots keep the
// SLO at the given arrival rate: P(wait > slo.Wait) ≤ 1 − percentile. met
// is false when even limit tasks do not; then tasks is limit. No load
// needs no task.
//
// The Erlang-B recursion runs once up the server counts, checking each
// whole task on the way, so the search costs about what one ErlangB at
// the answer does.
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
	var cur erlangCursor
	// The first count whose slots exceed the load: fewer never keep up.
	for n := int64(a/float64(slots)) + 1; n <= int64(limit); n++ {
		if m.tailAt(&cur, n*slots, a, wait) <= eps {
			return int32(n), true
		}
	}
	return limit, false
}
