package reschedule

import (
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// The back-off of a task whose pods keep failing, with the kubelet's
// numbers for a container in CrashLoopBackOff: the first failure is
// replaced at once, each further one in a row waits twice as long as the
// one before, from FailureBackOffBase up to FailureBackOffMax, and a pod
// that ran FailureBackOffReset or longer before it failed starts the count
// again. Without it a task whose container exits at start would be
// replaced as fast as the scheduler and the kubelet go, for ever.
const (
	FailureBackOffBase  = 10 * time.Second
	FailureBackOffMax   = 5 * time.Minute
	FailureBackOffReset = 10 * time.Minute
)

// FailureBackOff is when the replacement of a Failed pod may be made.
type FailureBackOff struct {
	// Failures counts the task's pods that failed in a row, this one
	// included, each within FailureBackOffReset of its start. The
	// replacement carries it in gputaskv1.AnnotationFailureCount, so that
	// the count outlives the pod and a restart of the controller.
	Failures int32
	// Delay is how long after the pod ended its replacement waits.
	Delay time.Duration
	// Wait is how much of Delay is left at the time asked; 0 when the
	// replacement may be made now.
	Wait time.Duration
}

// BackOff returns the back-off of pod, a Failed pod, at now.
func BackOff(pod *corev1.Pod, now time.Time) FailureBackOff {
	started, ended := podRun(pod)
	n := int32(1)
	if ended.Sub(started) < FailureBackOffReset {
		n += FailuresBefore(pod)
	}
	delay := FailureDelay(n)
	return FailureBackOff{Failures: n, Delay: delay, Wait: max(ended.Add(delay).Sub(now), 0)}
}

// FailureDelay is how long the replacement of the n-th failure in a row
// waits after the failed pod ended: none for the first, then 10 s, 20 s,
// 40 s, 80 s, 160 s, and 5 min from the seventh on.
func FailureDelay(n int32) time.Duration {
	if n <= 1 {
		return 0
	}
	d := FailureBackOffBase
	for i := int32(2); i < n && d < FailureBackOffMax; i++ {
		d *= 2
	}
	return min(d, FailureBackOffMax)
}

// FailuresBefore is the count pod carries: how many of the task's pods
// failed in a row before it was made. A pod without one, or with one this
// version cannot read, counts 0.
func FailuresBefore(pod *corev1.Pod) int32 {
	n, err := strconv.ParseInt(pod.Annotations[gputaskv1.AnnotationFailureCount], 10, 32)
	if err != nil || n < 0 {
		return 0
	}
	return int32(n)
}

// podRun returns when pod started and when it ended, as the Job controller
// reads a finished pod: it ended when its last container finished, or else
// when its Ready condition turned False; it started when the kubelet took
// it (status.startTime). A time that is missing falls back to the one
// before it, down to the pod's creation.
func podRun(pod *corev1.Pod) (started, ended time.Time) {
	started = pod.CreationTimestamp.Time
	if pod.Status.StartTime != nil && pod.Status.StartTime.After(started) {
		started = pod.Status.StartTime.Time
	}
	ended = started
	if t, ok := containersFinished(pod); ok {
		return started, later(ended, t)
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionFalse {
			ended = later(ended, c.LastTransitionTime.Time)
		}
	}
	return started, ended
}

// containersFinished is when the last of pod's containers finished; ok is
// false unless every one has.
func containersFinished(pod *corev1.Pod) (time.Time, bool) {
	var last time.Time
	for _, s := range pod.Status.ContainerStatuses {
		t := s.State.Terminated
		if t == nil || t.FinishedAt.IsZero() {
			return time.Time{}, false
		}
		last = later(last, t.FinishedAt.Time)
	}
	return last, !last.IsZero()
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
