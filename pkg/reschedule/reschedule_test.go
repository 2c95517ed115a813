package reschedule

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

var defaultOpts = Options{Interval: 10 * time.Minute, PendingTimeout: 5 * time.Minute, NodeNotReadyTimeout: time.Minute}

func task(policy gputaskv1.ReschedulePolicy) *gputaskv1.GPUTask {
	return &gputaskv1.GPUTask{
		ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "ns"},
		Spec:       gputaskv1.GPUTaskSpec{ReschedulePolicy: policy},
	}
}

type podOpt func(*corev1.Pod)

func pod(opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "ns", CreationTimestamp: metav1.NewTime(now.Add(-time.Minute))},
		Spec:       corev1.PodSpec{NodeName: "gpu-1"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }
func evicted(p *corev1.Pod)           { p.Status.Phase = corev1.PodFailed; p.Status.Reason = "Evicted" }
func age(d time.Duration) podOpt {
	return func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(now.Add(-d)) }
}
func deleting(p *corev1.Pod) { ts := metav1.NewTime(now); p.DeletionTimestamp = &ts }
func unschedulableSince(d time.Duration) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.NodeName = ""
		p.Status.Phase = corev1.PodPending
		p.Status.Conditions = []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message:            "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
			LastTransitionTime: metav1.NewTime(now.Add(-d)),
		}}
	}
}

// gated is a pod a scheduling gate holds: the scheduler reports it
// SchedulingGated, False since the pod was made.
func gated(p *corev1.Pod) {
	p.Spec.NodeName = ""
	p.Status.Phase = corev1.PodPending
	p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/admission"}}
	p.Status.Conditions = []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonSchedulingGated,
		LastTransitionTime: p.CreationTimestamp,
	}}
}

func labelled(k, v string) podOpt {
	return func(p *corev1.Pod) { p.Labels = map[string]string{k: v} }
}

func annotated(k, v string) podOpt {
	return func(p *corev1.Pod) { p.Annotations = map[string]string{k: v} }
}

func node(ready corev1.ConditionStatus) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}}
	if ready != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
	}
	return n
}

// notReadySince is a node whose Ready condition turned False d ago.
func notReadySince(d time.Duration) *corev1.Node {
	n := node(corev1.ConditionFalse)
	n.Status.Conditions[0].LastTransitionTime = metav1.NewTime(now.Add(-d))
	return n
}

func TestDecide(t *testing.T) {
	readyNode := node(corev1.ConditionTrue)
	tests := []struct {
		name       string
		task       *gputaskv1.GPUTask
		pod        *corev1.Pod
		node       *corev1.Node
		opts       *Options
		seen       Seen
		wantReason string // "" means no reschedule
	}{
		{name: "gated, however long", task: task(""), pod: pod(age(time.Hour), gated)},
		{name: "let go by its gate long after it was made, unschedulable since", task: task(""), pod: pod(age(time.Hour), unschedulableSince(time.Hour)),
			seen: Seen{UnschedulableSince: now.Add(-time.Minute)}},
		{name: "let go by its gate, unschedulable for the timeout since", task: task(""), pod: pod(age(time.Hour), unschedulableSince(time.Hour)),
			seen: Seen{UnschedulableSince: now.Add(-5 * time.Minute)}, wantReason: ReasonUnschedulable},
		{name: "Kueue's, unschedulable long after admission", task: task(""), pod: pod(unschedulableSince(time.Hour), labelled("kueue.x-k8s.io/managed", "true"))},
		{name: "Kueue's, failed", task: task(""), pod: pod(phase(corev1.PodFailed), labelled("kueue.x-k8s.io/managed", "true")), node: readyNode, wantReason: ReasonPodFailed},
		{name: "Kueue's, evicted", task: task(""), pod: pod(evicted, labelled("kueue.x-k8s.io/managed", "true")), node: readyNode, wantReason: ReasonEvicted},
		{name: "Kueue's, node gone", task: task(""), pod: pod(labelled("kueue.x-k8s.io/managed", "true")), wantReason: ReasonNodeLost},
		{name: "Volcano's, unschedulable", task: task(""), pod: pod(unschedulableSince(time.Hour), annotated("scheduling.k8s.io/group-name", "pg-1"))},
		{name: "KAI's, unschedulable", task: task(""), pod: pod(unschedulableSince(time.Hour), labelled("kai.scheduler/queue", "team-a"))},
		{name: "healthy running pod", task: task(""), pod: pod(), node: readyNode},
		{name: "no pod", task: task(""), pod: nil, node: readyNode},
		{name: "failed pod, default policy", task: task(""), pod: pod(phase(corev1.PodFailed)), node: readyNode, wantReason: ReasonPodFailed},
		{name: "failed pod, OnFailure", task: task(gputaskv1.RescheduleOnFailure), pod: pod(phase(corev1.PodFailed)), node: readyNode, wantReason: ReasonPodFailed},
		{name: "failed pod, Never stays failed", task: task(gputaskv1.RescheduleNever), pod: pod(phase(corev1.PodFailed)), node: readyNode},
		{name: "evicted pod", task: task(""), pod: pod(evicted), node: readyNode, wantReason: ReasonEvicted},
		{name: "succeeded pod is final", task: task(""), pod: pod(phase(corev1.PodSucceeded)), node: nil},
		{name: "succeeded pod is final, Periodic", task: task(gputaskv1.ReschedulePeriodic), pod: pod(phase(corev1.PodSucceeded), age(time.Hour)), node: readyNode},
		{name: "node gone", task: task(""), pod: pod(), node: nil, wantReason: ReasonNodeLost},
		{name: "node gone, Never", task: task(gputaskv1.RescheduleNever), pod: pod(), node: nil},
		{name: "node NotReady", task: task(""), pod: pod(), node: node(corev1.ConditionFalse), wantReason: ReasonNodeNotReady},
		{name: "node Unknown", task: task(""), pod: pod(), node: node(corev1.ConditionUnknown), wantReason: ReasonNodeNotReady},
		{name: "node without Ready condition yet", task: task(""), pod: pod(), node: node("")},
		{name: "node NotReady shorter than its timeout", task: task(""), pod: pod(), node: notReadySince(30 * time.Second),
			opts: &Options{Interval: time.Hour, NodeNotReadyTimeout: time.Minute}},
		{name: "node NotReady for its timeout", task: task(""), pod: pod(), node: notReadySince(time.Minute),
			opts: &Options{Interval: time.Hour, NodeNotReadyTimeout: time.Minute}, wantReason: ReasonNodeNotReady},
		{name: "node NotReady without transition time", task: task(""), pod: pod(), node: node(corev1.ConditionFalse),
			opts: &Options{Interval: time.Hour, NodeNotReadyTimeout: time.Minute}, wantReason: ReasonNodeNotReady},
		{name: "unschedulable shorter than timeout", task: task(""), pod: pod(unschedulableSince(4 * time.Minute)), node: nil},
		{name: "unschedulable exactly timeout", task: task(""), pod: pod(unschedulableSince(5 * time.Minute)), node: nil, wantReason: ReasonUnschedulable},
		{name: "unschedulable longer than timeout", task: task(""), pod: pod(unschedulableSince(time.Hour)), node: nil, wantReason: ReasonUnschedulable},
		{name: "unschedulable, pending timeout off", task: task(""), pod: pod(unschedulableSince(time.Hour)), opts: &Options{Interval: time.Minute}},
		{name: "unschedulable, Never", task: task(gputaskv1.RescheduleNever), pod: pod(unschedulableSince(time.Hour))},
		{name: "pending without condition", task: task(""), pod: pod(phase(corev1.PodPending), func(p *corev1.Pod) { p.Spec.NodeName = "" })},
		{name: "periodic, young pod", task: task(gputaskv1.ReschedulePeriodic), pod: pod(age(9 * time.Minute)), node: readyNode},
		{name: "periodic, old pod", task: task(gputaskv1.ReschedulePeriodic), pod: pod(age(10 * time.Minute)), node: readyNode, wantReason: ReasonPeriodic},
		{name: "OnFailure ignores age", task: task(gputaskv1.RescheduleOnFailure), pod: pod(age(24 * time.Hour)), node: readyNode},
		{name: "interval 0 disables everything", task: task(""), pod: pod(phase(corev1.PodFailed)), node: readyNode, opts: &Options{PendingTimeout: time.Minute}},
		{name: "interval 0 disables node lost", task: task(gputaskv1.ReschedulePeriodic), pod: pod(age(time.Hour)), node: nil, opts: &Options{}},
		{name: "pod already being deleted", task: task(""), pod: pod(phase(corev1.PodFailed), deleting), node: readyNode},
		{name: "unknown policy does nothing", task: task("Sometimes"), pod: pod(phase(corev1.PodFailed)), node: readyNode},
		{name: "failed beats node lost", task: task(""), pod: pod(phase(corev1.PodFailed)), node: nil, wantReason: ReasonPodFailed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := defaultOpts
			if tc.opts != nil {
				opts = *tc.opts
			}
			got, reason := Decide(tc.task, tc.pod, tc.node, now, opts, tc.seen)
			if got != (tc.wantReason != "") || reason != tc.wantReason {
				t.Errorf("Decide() = (%v, %q), want (%v, %q)", got, reason, tc.wantReason != "", tc.wantReason)
			}
		})
	}
}

func TestNextCheck(t *testing.T) {
	tests := []struct {
		name string
		task *gputaskv1.GPUTask
		pod  *corev1.Pod
		node *corev1.Node
		seen Seen
		want time.Duration
	}{
		{name: "gated pod has no timer", task: task(""), pod: pod(gated), want: 0},
		{name: "let go by its gate: the timeout runs from then", task: task(""), pod: pod(age(time.Hour), unschedulableSince(time.Hour)),
			seen: Seen{UnschedulableSince: now.Add(-time.Minute)}, want: 4 * time.Minute},
		{name: "a queue's pod has no pending timer", task: task(""), pod: pod(unschedulableSince(time.Minute), labelled("kueue.x-k8s.io/managed", "true")), want: 0},
		{name: "NotReady node fires at its timeout", task: task(""), pod: pod(), node: notReadySince(20 * time.Second), want: 40 * time.Second},
		{name: "Ready node has no timer", task: task(""), pod: pod(), node: node(corev1.ConditionTrue), want: 0},
		{name: "running OnFailure pod has no timer", task: task(""), pod: pod(), want: 0},
		{name: "unschedulable pod fires at the timeout", task: task(""), pod: pod(unschedulableSince(2 * time.Minute)), want: 3 * time.Minute},
		{name: "periodic pod fires at the interval", task: task(gputaskv1.ReschedulePeriodic), pod: pod(age(4 * time.Minute)), want: 6 * time.Minute},
		{name: "the sooner case wins", task: task(gputaskv1.ReschedulePeriodic), pod: pod(age(9*time.Minute), unschedulableSince(time.Minute)), want: time.Minute},
		{name: "final pod has no timer", task: task(gputaskv1.ReschedulePeriodic), pod: pod(phase(corev1.PodSucceeded)), want: 0},
		{name: "Never has no timer", task: task(gputaskv1.RescheduleNever), pod: pod(unschedulableSince(time.Minute)), want: 0},
		{name: "already due is not ahead", task: task(gputaskv1.ReschedulePeriodic), pod: pod(age(time.Hour)), want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := NextCheck(tc.task, tc.pod, tc.node, now, defaultOpts, tc.seen); got != tc.want {
				t.Errorf("NextCheck() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRestart(t *testing.T) {
	at := now.Add(-time.Minute)
	withRestart := func(value string, last *time.Time) *gputaskv1.GPUTask {
		tk := task("")
		tk.Annotations = map[string]string{gputaskv1.AnnotationRestartedAt: value}
		if last != nil {
			lt := metav1.NewTime(*last)
			tk.Status.LastRescheduleTime = &lt
		}
		return tk
	}
	later := at.Add(time.Second)
	earlier := at.Add(-time.Hour)
	tests := []struct {
		name    string
		task    *gputaskv1.GPUTask
		pod     *corev1.Pod
		now     time.Time
		want    RestartVerdict
		wantErr string
	}{
		{name: "no annotation", task: task(""), pod: pod(age(time.Hour)), now: now},
		{name: "pod older than request", task: withRestart(at.Format(time.RFC3339), nil), pod: pod(age(time.Hour)), now: now, want: RestartVerdict{Replace: true}},
		{name: "pod older, earlier reschedule", task: withRestart(at.Format(time.RFC3339), &earlier), pod: pod(age(time.Hour)), now: now, want: RestartVerdict{Replace: true}},
		{name: "pod created at the request", task: withRestart(at.Format(time.RFC3339), nil), pod: pod(age(time.Minute)), now: now},
		{name: "pod newer than request", task: withRestart(at.Format(time.RFC3339), nil), pod: pod(age(time.Second)), now: now},
		{name: "already restarted", task: withRestart(at.Format(time.RFC3339), &later), pod: pod(age(time.Hour)), now: now},
		{name: "failed pod under Never is still restarted", task: func() *gputaskv1.GPUTask {
			tk := withRestart(at.Format(time.RFC3339), nil)
			tk.Spec.ReschedulePolicy = gputaskv1.RescheduleNever
			return tk
		}(), pod: pod(age(time.Hour), phase(corev1.PodFailed)), now: now, want: RestartVerdict{Replace: true}},
		{name: "request in the future waits", task: withRestart(now.Add(30*time.Second).Format(time.RFC3339), nil), pod: pod(age(time.Hour)), now: now, want: RestartVerdict{Wait: 30 * time.Second}},
		{name: "no pod", task: withRestart(at.Format(time.RFC3339), nil), pod: nil, now: now},
		{name: "pod being deleted", task: withRestart(at.Format(time.RFC3339), nil), pod: pod(age(time.Hour), deleting), now: now},
		{name: "fractional request, pod created in the same second", task: withRestart(at.Add(500*time.Millisecond).Format(time.RFC3339Nano), nil), pod: pod(age(time.Minute)), now: now},
		{name: "fractional request, older pod", task: withRestart(at.Add(500*time.Millisecond).Format(time.RFC3339Nano), nil), pod: pod(age(time.Hour)), now: now, want: RestartVerdict{Replace: true}},
		{name: "unparseable", task: withRestart("yesterday", nil), pod: pod(age(time.Hour)), now: now, wantErr: "not an RFC 3339 time"},
		{name: "empty value is no request", task: withRestart("", nil), pod: pod(age(time.Hour)), now: now},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Restart(tc.task, tc.pod, tc.now)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Restart() error = %v, want one containing %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatalf("Restart() unexpected error: %v", err)
			}
			if got != tc.want {
				t.Errorf("Restart() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestForceDelete(t *testing.T) {
	// deletionTimestamp is when the grace period ends.
	terminating := func(graceEndedAgo time.Duration) *corev1.Pod {
		p := pod()
		ts := metav1.NewTime(now.Add(-graceEndedAgo))
		p.DeletionTimestamp = &ts
		return p
	}
	tests := []struct {
		name   string
		pod    *corev1.Pod
		node   *corev1.Node
		reason string
		want   bool
	}{
		{"node gone, past grace and margin", terminating(ForceDeleteMargin), nil, ReasonNodeLost, true},
		{"node NotReady, past grace and margin", terminating(time.Hour), node(corev1.ConditionUnknown), ReasonNodeNotReady, true},
		{"within the margin", terminating(ForceDeleteMargin - time.Second), nil, ReasonNodeLost, false},
		{"node recovered", terminating(time.Hour), node(corev1.ConditionTrue), ReasonNodeNotReady, false},
		{"failed pod on a healthy node", terminating(time.Hour), node(corev1.ConditionTrue), ReasonPodFailed, false},
		{"failed pod, node gone since", terminating(time.Hour), nil, ReasonPodFailed, false},
		{"restart", terminating(time.Hour), nil, ReasonRestart, false},
		{"not terminating", pod(), nil, ReasonNodeLost, false},
		{"no pod", nil, nil, ReasonNodeLost, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ForceDelete(tc.pod, tc.node, tc.reason, now); got != tc.want {
				t.Errorf("ForceDelete() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestQueueManager(t *testing.T) {
	for _, tc := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{pod(), ""},
		{pod(labelled("kueue.x-k8s.io/managed", "true")), "Kueue"},
		{pod(labelled("kueue.x-k8s.io/queue-name", "team-a")), ""},
		{pod(annotated("scheduling.k8s.io/group-name", "pg-1")), "Volcano"},
		{pod(labelled("kai.scheduler/queue", "team-a")), "KAI"},
	} {
		if got := QueueManager(tc.pod); got != tc.want {
			t.Errorf("QueueManager(labels %v, annotations %v) = %q, want %q", tc.pod.Labels, tc.pod.Annotations, got, tc.want)
		}
	}
}

func TestDisrupted(t *testing.T) {
	condition := func(typ corev1.PodConditionType, status corev1.ConditionStatus, reason string) podOpt {
		return func(p *corev1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: typ, Status: status, Reason: reason, Message: "m"})
		}
	}
	for _, tc := range []struct {
		name       string
		pod        *corev1.Pod
		want       Disruption
		wantReason string
	}{
		{"deleted without a condition", pod(deleting), Disruption{}, ""},
		{"preempted by the scheduler", pod(deleting, condition(corev1.DisruptionTarget, corev1.ConditionTrue, "PreemptionByScheduler")),
			Disruption{By: "the scheduler", Reason: "PreemptionByScheduler", Message: "m"}, ReasonPreempted},
		{"evicted through the API", pod(deleting, condition(corev1.DisruptionTarget, corev1.ConditionTrue, "EvictionByEvictionAPI")),
			Disruption{By: "the Eviction API", Reason: "EvictionByEvictionAPI", Message: "m"}, ReasonEvicted},
		{"stopped by Kueue", pod(deleting, condition(ConditionTerminationTarget, corev1.ConditionTrue, "StoppedByKueue")),
			Disruption{By: "Kueue", Reason: "StoppedByKueue", Message: "m"}, ReasonEvicted},
		{"a queue's, unknown reason", pod(deleting, labelled("kueue.x-k8s.io/managed", "true"), condition(corev1.DisruptionTarget, corev1.ConditionTrue, "Custom")),
			Disruption{By: "Kueue", Reason: "Custom", Message: "m"}, ReasonEvicted},
		{"condition False", pod(deleting, condition(corev1.DisruptionTarget, corev1.ConditionFalse, "PreemptionByScheduler")), Disruption{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Disrupted(tc.pod)
			if got != tc.want || ok != (tc.wantReason != "") {
				t.Errorf("Disrupted() = %+v, %v; want %+v, %v", got, ok, tc.want, tc.wantReason != "")
			}
			if ok && got.RescheduleReason() != tc.wantReason {
				t.Errorf("RescheduleReason() = %q, want %q", got.RescheduleReason(), tc.wantReason)
			}
		})
	}
}

// TestDeleteInterrupted: a pod deleted with a grace period of 0 and still
// stored was cut off between the API server's two steps, unless a
// finalizer holds it.
func TestDeleteInterrupted(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	deleted := func(grace int64, finalizers ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "ns"}}
		p.DeletionTimestamp, p.DeletionGracePeriodSeconds, p.Finalizers = ptr.To(metav1.NewTime(now)), ptr.To(grace), finalizers
		return p
	}
	for _, tc := range []struct {
		name        string
		pod         *corev1.Pod
		interrupted bool
	}{
		{"live", &corev1.Pod{}, false},
		{"grace 0, stored", deleted(0), true},
		{"grace 30", deleted(30), false},
		{"grace 0, held by a finalizer", deleted(0, "kueue.x-k8s.io/managed"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := DeleteInterrupted(tc.pod); got != tc.interrupted {
				t.Errorf("DeleteInterrupted = %v, want %v", got, tc.interrupted)
			}
		})
	}
}
