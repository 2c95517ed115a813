package scaling

import (
	"fmt"
	"math"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// MetricStatuses is status.metrics after decision d, read at ts: each
// metric's value and the count it asked for, or why it could not be read.
func MetricStatuses(d Decision, ts metav1.Time) []gputaskv1.MetricStatus {
	out := make([]gputaskv1.MetricStatus, len(d.Metrics))
	for i, m := range d.Metrics {
		out[i] = gputaskv1.MetricStatus{Name: m.Name, LastReadTime: &ts}
		if m.Err != nil {
			out[i].Error = m.Err.Error()
			continue
		}
		out[i].Value = FormatValue(m.Value)
		if m.Reason != "" {
			// A reading that asked for nothing, as those of an SLO set
			// that lacks a role, shows no count.
			desired := m.Desired
			out[i].DesiredReplicas = &desired
		}
	}
	return out
}

// LastDecision is status.lastDecision after decision d, taken at ts on
// inputs in: the counts, the reason and message, what the decision saw and,
// for the SLO policy, what it sized the pool by and predicts. The
// autoscaler writes it, and the replay records it for every evaluation.
func LastDecision(in Inputs, d Decision, ts metav1.Time) *gputaskv1.ScalingDecision {
	ld := &gputaskv1.ScalingDecision{
		Time: ts, Inputs: decisionInputs(in, d), From: in.Current, To: d.Desired, Reason: d.Reason, Message: d.Message,
		PredictedWait: predictedWait(d),
	}
	explainSLO(ld, in, d)
	return ld
}

// decisionInputs is what lastDecision.inputs shows: what the decision saw
// and, for the SLO policy, the wait it predicts at the count it chose.
func decisionInputs(in Inputs, d Decision) string {
	wait := predictedWait(d)
	if wait == "" {
		return d.Inputs
	}
	return fmt.Sprintf("%s predicted-p%s-wait=%s", d.Inputs, FormatValue(in.Policy.SLO.Percentile), wait)
}

// predictedWait is lastDecision.predictedWait, a scalar that kubectl's
// PREDICTED-WAIT column can show: the SLO policy's predicted wait at its
// percentile, "" without one.
func predictedWait(d Decision) string {
	o := d.SLO
	if o == nil || o.ServiceTime <= 0 {
		return ""
	}
	if math.IsInf(o.PredictedWait, 1) {
		return "unbounded"
	}
	return time.Duration(o.PredictedWait * float64(time.Second)).Round(time.Millisecond).String()
}

// capacitySources maps the SLO policy's capacity source to the API's.
var capacitySources = map[string]gputaskv1.CapacitySource{
	SlotsFromOverride: gputaskv1.CapacityOverride,
	SlotsFromProfile:  gputaskv1.CapacityProfile,
	SlotsFromFit:      gputaskv1.CapacityFit,
	SlotsFromDefault:  gputaskv1.CapacityDefault,
}

// explainSLO adds to lastDecision what the SLO policy sized the pool by:
// the capacity per task and where it came from, the online ITL fit, the
// predicted TTFT and ITL at the count chosen, and the burst headroom.
func explainSLO(ld *gputaskv1.ScalingDecision, in Inputs, d Decision) {
	o := d.SLO
	if o == nil {
		return
	}
	ld.Capacity = &gputaskv1.TaskCapacity{SlotsPerTask: o.Slots, Source: capacitySources[o.SlotsFrom]}
	if o.Context > 0 {
		ld.Capacity.Context = FormatValue(math.Round(o.Context))
	}
	if f := d.Queue.ITL; !f.Last.IsZero() {
		fit := &gputaskv1.ITLFitStatus{Readings: FormatValue(math.Round(f.N*10) / 10), LastReadingTime: metav1.NewTime(f.Last)}
		if l, ok := f.Line(); ok {
			fit.Alpha, fit.Beta = formatSeconds(l.Alpha), formatSeconds(l.Beta)
		}
		ld.Capacity.Fit = fit
	}
	if o.Headroom > 0 {
		ld.BurstHeadroom = FormatValue(o.Headroom)
	}
	if o.ServiceTime <= 0 {
		return
	}
	// A TTFT is the wait plus the prefill: without a TTFT objective and
	// the prompts' prefill it would only repeat the predicted wait.
	if in.Policy.SLO.TTFT > 0 || o.Prefill > 0 {
		ld.PredictedTTFT = "unbounded"
		if !math.IsInf(o.PredictedTTFT, 1) {
			ld.PredictedTTFT = formatSeconds(o.PredictedTTFT)
		}
	}
	if o.PredictedITL > 0 {
		ld.PredictedITL = "unbounded"
		if o.PredictedITL < time.Hour {
			ld.PredictedITL = formatSeconds(o.PredictedITL.Seconds())
		}
	}
}

// formatSeconds shows seconds as a duration of three significant digits
// at most, such as "1.97s", "27.6ms" or "51.2µs": a fit's β is tens of
// microseconds, which the millisecond rounding of messages would lose.
func formatSeconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	for _, unit := range []time.Duration{time.Second, time.Millisecond, time.Microsecond} {
		if d >= unit {
			return d.Round(unit / 100).String()
		}
	}
	return d.String()
}
