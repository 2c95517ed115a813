package reschedule

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

func TestFailureDelay(t *testing.T) {
	want := []time.Duration{0, 0, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second,
		5 * time.Minute, 5 * time.Minute}
	for n, w := range want {
		if got := FailureDelay(int32(n)); got != w {
			t.Errorf("FailureDelay(%d) = %s, want %s", n, got, w)
		}
	}
	if got := FailureDelay(1 << 30); got != FailureBackOffMax {
		t.Errorf("FailureDelay(2^30) = %s, want the cap %s", got, FailureBackOffMax)
	}
}

// failed is a pod that was made at created, started by the kubelet at
// started and whose container finished at finished (a zero time leaves
// the field out), carrying the failure count before.
func failed(before string, created, started, finished time.Time) *corev1.Pod {
	p := pod(phase(corev1.PodFailed))
	p.CreationTimestamp = metav1.NewTime(created)
	if before != "" {
		p.Annotations = map[string]string{gputaskv1.AnnotationFailureCount: before}
	}
	if !started.IsZero() {
		p.Status.StartTime = &metav1.Time{Time: started}
	}
	if !finished.IsZero() {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "task", State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, StartedAt: metav1.NewTime(started), FinishedAt: metav1.NewTime(finished)},
		}}}
	}
	return p
}

func TestBackOff(t *testing.T) {
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	readyFalseAt := func(at time.Time) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(at)}}
		}
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want FailureBackOff
	}{
		{"first failure: at once", failed("", ago(time.Minute), ago(50*time.Second), ago(time.Second)),
			FailureBackOff{Failures: 1}},
		{"second in a row: 10 s from its end", failed("1", ago(time.Minute), ago(50*time.Second), ago(4*time.Second)),
			FailureBackOff{Failures: 2, Delay: 10 * time.Second, Wait: 6 * time.Second}},
		{"second in a row, its delay over", failed("1", ago(time.Minute), ago(50*time.Second), ago(10*time.Second)),
			FailureBackOff{Failures: 2, Delay: 10 * time.Second}},
		{"third in a row: 20 s", failed("2", ago(time.Minute), ago(50*time.Second), ago(5*time.Second)),
			FailureBackOff{Failures: 3, Delay: 20 * time.Second, Wait: 15 * time.Second}},
		{"tenth in a row: capped at 5 min", failed("9", ago(time.Minute), ago(50*time.Second), now),
			FailureBackOff{Failures: 10, Delay: 5 * time.Minute, Wait: 5 * time.Minute}},
		{"ran just under 10 min: counted", failed("3", ago(11*time.Minute), ago(10*time.Minute-time.Second), now),
			FailureBackOff{Failures: 4, Delay: 40 * time.Second, Wait: 40 * time.Second}},
		{"ran 10 min: the count starts again", failed("3", ago(11*time.Minute), ago(10*time.Minute), now),
			FailureBackOff{Failures: 1}},
		{"run counted from the kubelet's start, not the pod's creation", failed("1", ago(time.Hour), ago(time.Minute), now),
			FailureBackOff{Failures: 2, Delay: 10 * time.Second, Wait: 10 * time.Second}},
		{"a count that cannot be read counts 0", failed("many", ago(time.Minute), ago(50*time.Second), now),
			FailureBackOff{Failures: 1}},
		{"a negative count counts 0", failed("-4", ago(time.Minute), ago(50*time.Second), now),
			FailureBackOff{Failures: 1}},
		{"no container finished: ended when Ready turned False",
			with(failed("1", ago(time.Minute), ago(50*time.Second), time.Time{}), readyFalseAt(ago(3*time.Second))),
			FailureBackOff{Failures: 2, Delay: 10 * time.Second, Wait: 7 * time.Second}},
		{"never started: ended when it was made, long ago", failed("1", ago(time.Hour), time.Time{}, time.Time{}),
			FailureBackOff{Failures: 2, Delay: 10 * time.Second}},
		{"one container still running: Ready's transition", with(failed("2", ago(time.Minute), ago(50*time.Second), ago(time.Second)), func(p *corev1.Pod) {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: "sidecar"})
			readyFalseAt(ago(2 * time.Second))(p)
		}), FailureBackOff{Failures: 3, Delay: 20 * time.Second, Wait: 18 * time.Second}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := BackOff(tc.pod, now); got != tc.want {
				t.Errorf("BackOff = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func with(p *corev1.Pod, opts ...podOpt) *corev1.Pod {
	for _, o := range opts {
		o(p)
	}
	return p
}
