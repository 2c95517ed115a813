package scaling

import (
	"fmt"
	"math"
	"time"
)

// Burst is the fast path for bursts (autoscaling.burst).
type Burst struct {
	// Factor times a metric's UpThreshold (Step) or Target (Proportional)
	// is a burst reading.
	Factor float64
	// Window is how long a burst lasts after its last burst reading.
	Window time.Duration
}

// bursting wraps a policy with the fast path for bursts (rule 14): a
// reading at Factor times its metric's level asks at once for what the
// load needs, and no scale-down happens until the burst has passed.
type bursting struct {
	inner  rule
	levels levels
}

func (b bursting) ask(in *Inputs, d *Decision) step { return b.inner.ask(in, d) }

func (b bursting) settle(in Inputs, d *Decision, s step) step {
	return burst(in, d, b.inner.settle(in, d, s), b.levels)
}

// burst is rule 14: the fast path for bursts, and the scale-down it holds.
func burst(in Inputs, d *Decision, s step, l levels) step {
	if in.Now.Before(in.BurstUntil) {
		d.BurstUntil = in.BurstUntil
	}
	serving := max(in.Current-in.Starting, 1)
	var want int32
	var why string
	for i, m := range d.Metrics {
		level, name := l.burstLevel(in.Metrics[i])
		if m.Err != nil || !(level > 0) || math.IsInf(level, 0) || m.Value < in.Burst.Factor*level {
			continue
		}
		if n := ceilSat(float64(serving) * m.Value / level); n > want || why == "" {
			want = max(want, n)
			why = fmt.Sprintf("%s %s is at least %s× its %s %s: a burst", m.Name, FormatValue(m.Value), FormatValue(in.Burst.Factor), name, FormatValue(level))
		}
	}
	if why != "" {
		d.BurstUntil = in.Now.Add(in.Burst.Window)
		if want >= s.desired && want > in.Current {
			return step{desired: want, reason: ReasonBurst,
				message: fmt.Sprintf("%s; %d tasks from the %d serving", why, want, serving)}
		}
	}
	if s.desired < in.Current && in.Now.Before(d.BurstUntil) {
		return s.limited(in.Current, ReasonHeldDuringBurst,
			fmt.Sprintf("scale-down to %d waits for the burst to pass at %s", s.desired, d.BurstUntil.UTC().Format(time.RFC3339)))
	}
	return s
}
