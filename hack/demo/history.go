package main

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

const (
	// sampleEvery matches the demo set's autoscaling interval, so each
	// sample can show a new decision.
	sampleEvery = 5 * time.Second
	// tableSamples rows fit a terminal next to the other sections;
	// sparkSamples cover a whole round of the load curve.
	tableSamples = 15
	sparkSamples = 48
	maxHistory   = sparkSamples
)

// sample is the autoscaled set at one moment.
type sample struct {
	at       time.Duration // since the demo started
	served   float64       // load index the server answered then
	segment  string        // part of the load curve
	read     string        // status.loadIndex: what the autoscaler last read
	desired  int32         // spec.replicas
	tasks    int32         // status.replicas
	workers  workerCounts  // starting, ready, busy and draining tasks
	capacity string        // status.capacityReplicas, "-" if unknown
	decision string        // status.lastDecision, short
}

// newSample reads a sample off the set and the workers of its tasks.
func newSample(at time.Duration, served float64, segment string, set *gputaskv1.GPUTaskSet, workers workerCounts) sample {
	s := sample{
		at: at, served: served, segment: segment,
		read:     orDash(set.Status.LoadIndex),
		desired:  1,
		tasks:    set.Status.Replicas,
		workers:  workers,
		capacity: "-",
		decision: "-",
	}
	if set.Spec.Replicas != nil {
		s.desired = *set.Spec.Replicas
	}
	if c := set.Status.CapacityReplicas; c != nil {
		s.capacity = fmt.Sprint(*c)
	}
	if d := set.Status.LastDecision; d != nil {
		s.decision = fmt.Sprintf("%d->%d %s", d.From, d.To, d.Reason)
	}
	return s
}

// historyHeader and historyRow make the table of the Autoscaling section,
// one row per sample, tab-separated for a tabwriter.
const historyHeader = "T\tSERVED\tREAD\tDESIRED\tTASKS\tSTARTING\tREADY\tBUSY\tDRAINING\tCAP\tDECISION"

func historyRow(s sample) string {
	return fmt.Sprintf("%s\t%.2f %s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s", s.at.Round(time.Second), s.served, s.segment,
		s.read, s.desired, s.tasks, s.workers.starting, s.workers.ready, s.workers.busy, s.workers.draining, s.capacity, s.decision)
}

// statusCounts is what the set's own status counts, next to what the
// workers show: the autoscaler's starting tasks and the set controller's
// draining ones.
func statusCounts(set *gputaskv1.GPUTaskSet) string {
	return fmt.Sprintf("set status: ready %d, starting %d, draining %d, running %d, pending %d",
		set.Status.ReadyReplicas, set.Status.StartingReplicas, set.Status.DrainingReplicas,
		set.Status.RunningReplicas, set.Status.PendingReplicas)
}

// appendSample keeps the last maxHistory samples.
func appendSample(history []sample, s sample) []sample {
	history = append(history, s)
	if len(history) > maxHistory {
		history = history[len(history)-maxHistory:]
	}
	return history
}

// last returns the last n samples (all of them if there are fewer).
func last(history []sample, n int) []sample {
	return history[max(len(history)-n, 0):]
}

// sparkLevels draw a value from 0 (lowest) to 1 (highest).
var sparkLevels = []rune("▁▂▃▄▅▆▇█")

// sparkline draws values in [0, top] as one character each; values outside
// are clamped, and a top of 0 or less draws the lowest level.
func sparkline(values []float64, top float64) string {
	var b strings.Builder
	for _, v := range values {
		level := 0
		if top > 0 {
			frac := min(max(v/top, 0), 1)
			level = int(frac*float64(len(sparkLevels)-1) + 0.5)
		}
		b.WriteRune(sparkLevels[level])
	}
	return b.String()
}

// conditionSummary renders the autoscaler's conditions on one line, such as
// "AbleToScale=True ScalingActive=True ScalingLimited=True(CapacityLimited)".
func conditionSummary(conditions []metav1.Condition) string {
	var parts []string
	for _, t := range []string{gputaskv1.ConditionAbleToScale, gputaskv1.ConditionScalingActive, gputaskv1.ConditionScalingLimited} {
		c := meta.FindStatusCondition(conditions, t)
		if c == nil {
			continue
		}
		part := t + "=" + string(c.Status)
		if c.Status != metav1.ConditionTrue || t == gputaskv1.ConditionScalingLimited {
			part += "(" + c.Reason + ")"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, " ")
}
