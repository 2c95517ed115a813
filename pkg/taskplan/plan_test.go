package taskplan

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
	"github.com/gputask/gputask-controller/pkg/expectations"
	"github.com/gputask/gputask-controller/pkg/podspec"
	"github.com/gputask/gputask-controller/pkg/reschedule"
	"github.com/gputask/gputask-controller/pkg/taskstatus"
)

var (
	now  = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	opts = podspec.Options{
		GPUResourceName: podspec.DefaultGPUResourceName, GPULabelKey: podspec.DefaultGPULabelKey, DefaultImage: podspec.DefaultImage,
	}
	rescheduling = reschedule.Options{Interval: 10 * time.Minute, PendingTimeout: 5 * time.Minute}
)

// task is a task named render, changed by opts.
func task(opts ...controllertest.TaskOption) *gputaskv1.GPUTask {
	return controllertest.Task("render", append([]controllertest.TaskOption{controllertest.TaskSpec(gputaskv1.GPUTaskSpec{GPU: "A100"})}, opts...)...)
}

// podOf is the pod the controller made for t an hour ago, stamped with the
// spec's hash, in phase on node.
func podOf(t *gputaskv1.GPUTask, phase corev1.PodPhase, node string) *corev1.Pod {
	p, err := podspec.Build(t, opts)
	if err != nil {
		panic(err)
	}
	podspec.Stamp(p)
	p.UID, p.Generation = types.UID("pod-uid"), 1
	p.CreationTimestamp = metav1.NewTime(now.Add(-time.Hour))
	p.Spec.NodeName = node
	p.Status.Phase = phase
	return p
}

// with returns a copy of pod changed by fn.
func with(pod *corev1.Pod, fn func(*corev1.Pod)) *corev1.Pod {
	p := pod.DeepCopy()
	fn(p)
	return p
}

func unschedulableSince(since time.Time) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, LastTransitionTime: metav1.NewTime(since)}}
	}
}

func TestMake(t *testing.T) {
	tk := task()
	running := podOf(tk, corev1.PodRunning, "gpu-1")
	node := controllertest.Node("gpu-1")
	otherHash := with(running, func(p *corev1.Pod) { p.Annotations[gputaskv1.AnnotationPodSpecHash] = "old" })
	driftCheck := Drift{PodUID: running.UID, PodGeneration: 1, Want: podspec.Stamped(running)}
	deleting := with(running, func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(now.Add(-time.Minute))) })
	underWay := &Replacement{OldPodUID: running.UID, Reason: reschedule.ReasonNodeLost}
	counted := &Replacement{OldPodUID: "old-pod", Reason: reschedule.ReasonPodFailed, Created: true,
		Counted: taskstatus.Replacement{CountedFrom: 0, At: metav1.NewTime(now.Add(-time.Second))}}
	restartAt := controllertest.Annotation(gputaskv1.AnnotationRestartedAt, now.Add(-time.Minute).Format(time.RFC3339))
	gated := with(podOf(tk, corev1.PodPending, ""), func(p *corev1.Pod) {
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/admission"}}
		p.Labels["kueue.x-k8s.io/managed"] = "true"
		unschedulableSince(now.Add(-time.Hour))(p)
	})
	dra := task(controllertest.TaskSpec(gputaskv1.GPUTaskSpec{GPU: "A100", GPUAllocation: gputaskv1.GPUAllocationDRA}))
	bad := task(controllertest.TaskSpec(gputaskv1.GPUTaskSpec{GPU: "A100", GPUAmount: ptr.To(intstr.FromString("-1"))}))
	foreign := with(running, func(p *corev1.Pod) { p.OwnerReferences = nil })

	for _, tc := range []struct {
		name string
		in   Input
		want Plan
	}{{
		name: "in sync: nothing to do but mirror the pod",
		in:   Input{Task: tk, Pod: running, Node: node},
		want: Plan{Status: WriteUnlessSettling},
	}, {
		name: "missing pod: create it",
		in:   Input{Task: tk, ExpectationsMet: true},
		want: Plan{Create: true},
	}, {
		name: "missing pod, a creation not yet seen: wait for it",
		in:   Input{Task: tk},
		want: Plan{After: expectations.DefaultTTL},
	}, {
		name: "missing pod of a draining task: none made, its busy mark cleared",
		in: Input{Task: task(controllertest.Annotation(gputaskv1.AnnotationDraining, "true"),
			controllertest.Annotation(gputaskv1.AnnotationPodBusy, "true")), ExpectationsMet: true},
		want: Plan{Status: WriteStatus, TaskPodBusy: ptr.To(false)},
	}, {
		name: "missing pod of a draining idle task: none made",
		in:   Input{Task: task(controllertest.Annotation(gputaskv1.AnnotationDraining, "true")), ExpectationsMet: true},
		want: Plan{Status: WriteStatus},
	}, {
		name: "DRA claim: made before the pod",
		in:   Input{Task: dra, ExpectationsMet: true},
		want: Plan{Create: true, EnsureClaims: true},
	}, {
		name: "invalid spec: no pod, a warning, the status says why",
		in:   Input{Task: bad, ExpectationsMet: true, Memory: Memory{Replacement: underWay}},
		want: Plan{Status: WriteStatus, Events: []Event{{Type: "Warning", Reason: gputaskv1.ReasonInvalidSpec}}},
	}, {
		name: "pending too long: replace",
		in:   Input{Task: tk, Pod: with(podOf(tk, corev1.PodPending, ""), unschedulableSince(now.Add(-6*time.Minute)))},
		want: Plan{Replace: reschedule.ReasonUnschedulable, Status: WriteStatus, After: ReplacementPoll},
	}, {
		name: "pending, not yet too long: look again at the timeout",
		in:   Input{Task: tk, Pod: with(podOf(tk, corev1.PodPending, ""), unschedulableSince(now.Add(-4*time.Minute)))},
		want: Plan{Status: WriteUnlessSettling, After: time.Minute + time.Second},
	}, {
		name: "node lost: replace",
		in:   Input{Task: tk, Pod: running},
		want: Plan{Replace: reschedule.ReasonNodeLost, Status: WriteStatus, After: ReplacementPoll},
	}, {
		name: "failed, the first in a row: replace at once, the new pod to carry the count",
		in:   Input{Task: tk, Pod: with(running, func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), Node: node},
		want: Plan{Replace: reschedule.ReasonPodFailed, Failures: 1, Status: WriteStatus, After: ReplacementPoll},
	}, {
		name: "evicted by the kubelet: replace",
		in:   Input{Task: tk, Pod: with(running, func(p *corev1.Pod) { p.Status.Phase, p.Status.Reason = corev1.PodFailed, "Evicted" }), Node: node},
		want: Plan{Replace: reschedule.ReasonEvicted, Status: WriteStatus, After: ReplacementPoll},
	}, {
		name: "evicted through the API: wait for the pod to go, count its replacement",
		in: Input{Task: tk, Node: node, Pod: with(deleting, func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI", Message: "drain"}}
		})},
		want: Plan{Status: WriteStatus, After: ReplacementPoll,
			Events: []Event{{Type: "Warning", Reason: reschedule.ReasonEvicted, Message: "Pod render was evicted by the Eviction API (EvictionByEvictionAPI): drain"}},
			Memory: Memory{Replacement: &Replacement{OldPodUID: running.UID, Reason: reschedule.ReasonEvicted}}},
	}, {
		name: "replacement under way on a lost node: force delete past the grace period",
		in: Input{Task: tk, Memory: Memory{Replacement: underWay},
			Pod: with(deleting, func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(now.Add(-time.Hour))) })},
		want: Plan{ForceDelete: true, Status: WriteStatus, After: ReplacementPoll, Memory: Memory{Replacement: underWay}},
	}, {
		name: "replacement made: count it",
		in:   Input{Task: tk, Pod: running, Node: node, Memory: Memory{Replacement: counted}},
		want: Plan{Status: WriteCounted, Memory: Memory{Replacement: counted}},
	}, {
		name: "drift: the hash differs, read the pod to name the field",
		in:   Input{Task: tk, Pod: otherHash, Node: node},
		want: Plan{ReadDrift: &driftCheck, Status: WriteUnlessSettling},
	}, {
		name: "drift already read for this pod and spec: no read",
		in:   Input{Task: tk, Pod: otherHash, Node: node, Memory: Memory{Drift: &Drift{PodUID: driftCheck.PodUID, PodGeneration: 1, Want: driftCheck.Want, Field: "image"}}},
		want: Plan{Stale: "image", Status: WriteUnlessSettling, Memory: Memory{Drift: &Drift{PodUID: driftCheck.PodUID, PodGeneration: 1, Want: driftCheck.Want, Field: "image"}}},
	}, {
		name: "restart asked: replace",
		in:   Input{Task: task(restartAt), Pod: running, Node: node},
		want: Plan{Replace: reschedule.ReasonRestart, Status: WriteStatus, After: ReplacementPoll},
	}, {
		name: "restart asked in the future: look again then",
		in:   Input{Task: task(restartAt), Pod: running, Node: node, Now: now.Add(-2 * time.Minute)},
		want: Plan{Status: WriteUnlessSettling, After: time.Minute + time.Second},
	}, {
		name: "Kueue gate: left to its queue, however long it waits",
		in:   Input{Task: tk, Pod: gated, Now: now.Add(24 * time.Hour)},
		want: Plan{Status: WriteUnlessSettling, Memory: Memory{GatedPod: gated.UID}},
	}, {
		name: "marks: draining to the pod, busy to the task",
		in: Input{Task: task(controllertest.Annotation(gputaskv1.AnnotationDraining, "true")), Node: node,
			Pod: with(running, func(p *corev1.Pod) { p.Annotations[gputaskv1.AnnotationBusy] = "true" })},
		want: Plan{PodDraining: ptr.To(true), TaskPodBusy: ptr.To(true), PodProtected: ptr.To(true), Status: WriteUnlessSettling},
	}, {
		name: "busy task: its pod is kept from node autoscalers",
		in:   Input{Task: task(controllertest.Annotation(gputaskv1.AnnotationBusy, "true")), Node: node, Pod: running},
		want: Plan{PodProtected: ptr.To(true), Status: WriteUnlessSettling},
	}, {
		name: "busy pod already kept: nothing to write",
		in: Input{Task: task(controllertest.Annotation(gputaskv1.AnnotationPodBusy, "true")), Node: node, Pod: with(running, func(p *corev1.Pod) {
			p.Annotations[gputaskv1.AnnotationBusy] = "true"
			p.Annotations[gputaskv1.AnnotationDoNotDisrupt], p.Annotations[gputaskv1.AnnotationSafeToEvict] = "true", "false"
		})},
		want: Plan{Status: WriteUnlessSettling},
	}, {
		name: "busy pod with one mark of two: both",
		in: Input{Task: task(controllertest.Annotation(gputaskv1.AnnotationPodBusy, "true")), Node: node, Pod: with(running, func(p *corev1.Pod) {
			p.Annotations[gputaskv1.AnnotationBusy] = "true"
			p.Annotations[gputaskv1.AnnotationDoNotDisrupt] = "true"
		})},
		want: Plan{PodProtected: ptr.To(true), Status: WriteUnlessSettling},
	}, {
		name: "idle again: the marks go, so consolidation may move it",
		in: Input{Task: tk, Node: node, Pod: with(running, func(p *corev1.Pod) {
			p.Annotations[gputaskv1.AnnotationDoNotDisrupt], p.Annotations[gputaskv1.AnnotationSafeToEvict] = "true", "false"
		})},
		want: Plan{PodProtected: ptr.To(false), Status: WriteUnlessSettling},
	}, {
		name: "foreign pod: delete it if an orphan, else show the conflict",
		in:   Input{Task: tk, Pod: foreign, Node: node},
		want: Plan{DeleteOrphan: true, Conflict: "pod default/render exists and is not controlled by this GPUTask", Status: WriteStatus},
	}, {
		name: "deletion: the task is going, its pod goes with it",
		in:   Input{Task: task(controllertest.Deleting(now, "")), Pod: running, Node: node},
		want: Plan{},
	}, {
		name: "deletion: the task is gone, delete the pod it controlled",
		in:   Input{DeletedUID: tk.UID, Memory: Memory{Replacement: underWay, WarnedRestartedAt: "x"}},
		want: Plan{DeletePodOf: tk.UID},
	}, {
		name: "deletion: the task is gone unseen, delete its pod if an orphan",
		in:   Input{},
		want: Plan{DeleteOrphan: true},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.PodOptions, in.Rescheduling = opts, rescheduling
			if in.Now.IsZero() {
				in.Now = now
			}
			got := Make(in)
			if got.Desired != nil && !got.Create {
				got.Desired = nil
			}
			if tc.want.Create {
				tc.want.Desired, _ = podspec.Build(in.Task, opts)
			}
			if (got.SpecErr != nil) != (in.Task == bad) {
				t.Errorf("SpecErr = %v", got.SpecErr)
			}
			cmpOpts := []cmp.Option{cmpopts.IgnoreFields(Plan{}, "SpecErr"), cmpopts.EquateEmpty()}
			if len(tc.want.Events) > 0 && tc.want.Events[0].Message == "" {
				// The message is the validation's, tested in pkg/podspec.
				cmpOpts = append(cmpOpts, cmpopts.IgnoreFields(Event{}, "Message"))
			}
			if diff := cmp.Diff(tc.want, got, cmpOpts...); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

// A task whose template sets either mark keeps what it sets, busy or idle:
// the user's choice stands.
func TestProtectionLeavesTheTemplatesMarks(t *testing.T) {
	for _, key := range []string{gputaskv1.AnnotationDoNotDisrupt, gputaskv1.AnnotationSafeToEvict} {
		for _, busy := range []bool{false, true} {
			tk := task(controllertest.TaskFunc(func(t *gputaskv1.GPUTask) {
				t.Spec.Template = &gputaskv1.PodTemplate{Metadata: gputaskv1.PodTemplateMeta{Annotations: map[string]string{key: "x"}}}
			}))
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{key: "x"}}}
			if busy {
				pod.Annotations[gputaskv1.AnnotationBusy] = "true"
			}
			if _, change := protection(tk, pod); change {
				t.Errorf("template sets %s, busy %v: the controller changes the pod's marks", key, busy)
			}
		}
	}
	// Without it, the same pods are changed.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{gputaskv1.AnnotationBusy: "true"}}}
	if protect, change := protection(task(), pod); !protect || !change {
		t.Errorf("busy pod, no template mark: protect %v, change %v; want both", protect, change)
	}
}

// TestFailedPodBacksOff walks the replacement of a pod that failed second
// in a row: it waits, with one Warning and no write but the status that
// shows the failure; once its delay is over it is replaced, and the new pod
// carries the count, outside the spec's hash.
func TestFailedPodBacksOff(t *testing.T) {
	tk := task()
	node := controllertest.Node("gpu-1")
	failed := with(podOf(tk, corev1.PodFailed, "gpu-1"), func(p *corev1.Pod) {
		p.Annotations[gputaskv1.AnnotationFailureCount] = "1"
		p.Status.StartTime = ptr.To(metav1.NewTime(now.Add(-time.Minute)))
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "task", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 3, StartedAt: metav1.NewTime(now.Add(-time.Minute)), FinishedAt: metav1.NewTime(now.Add(-4 * time.Second)),
		}}}}
	})
	in := Input{Task: tk, Pod: failed, Node: node, PodOptions: opts, Rescheduling: rescheduling, Now: now}
	cmpOpts := []cmp.Option{cmpopts.EquateEmpty()}

	got := Make(in)
	got.Desired = nil
	want := Plan{Status: WriteUnlessSettling, After: 6 * time.Second, Failures: 2, Memory: Memory{BackedOff: failed.UID},
		Events: []Event{{Type: corev1.EventTypeWarning, Reason: gputaskv1.ReasonBackOff,
			Message: "Back-off 10s before replacing failed pod render: 2 of the task's pods failed in a row, each within 10m0s of its start"}}}
	if diff := cmp.Diff(want, got, cmpOpts...); diff != "" {
		t.Errorf("first look (-want +got):\n%s", diff)
	}

	// Looked at again within the delay (another event, a resync): the same
	// wait, no second Warning.
	in.Memory, in.Now = got.Memory, now.Add(5*time.Second)
	got = Make(in)
	got.Desired = nil
	want.Events, want.After = nil, time.Second
	if diff := cmp.Diff(want, got, cmpOpts...); diff != "" {
		t.Errorf("within the delay (-want +got):\n%s", diff)
	}

	// The delay is over: replace.
	in.Memory, in.Now = got.Memory, now.Add(6*time.Second)
	got = Make(in)
	got.Desired = nil
	if diff := cmp.Diff(Plan{Replace: reschedule.ReasonPodFailed, Failures: 2, Status: WriteStatus, After: ReplacementPoll}, got, cmpOpts...); diff != "" {
		t.Errorf("delay over (-want +got):\n%s", diff)
	}

	// The old pod is gone: the new one carries the count, and its hash is
	// the spec's.
	in.Pod, in.Node, in.ExpectationsMet = nil, nil, true
	in.Memory = Memory{Replacement: &Replacement{OldPodUID: failed.UID, Reason: reschedule.ReasonPodFailed, Failures: 2}}
	got = Make(in)
	if !got.Create || got.Desired.Annotations[gputaskv1.AnnotationFailureCount] != "2" {
		t.Fatalf("create %v, pod annotations %v; want a create carrying %s=2", got.Create, got.Desired.Annotations, gputaskv1.AnnotationFailureCount)
	}
	spec, _ := podspec.Build(tk, opts)
	if podspec.Hash(got.Desired) != podspec.Hash(spec) {
		t.Errorf("the failure count changes the pod's hash: the new pod would show drift")
	}
}
