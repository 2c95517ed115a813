// Package taskplan decides, without side effects, what one sync of a GPUTask
// does. The plan says the pod to create or delete and why, the marks to
// carry between the task and its pod, what to remember of the task, and
// when to look again. The controller reads the caches, asks Make, carries
// the plan out, writes the status from the outcomes, and requeues once, so
// that one table test covers every decision. It imports no package that
// holds a client (imports_test.go checks).
package taskplan

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/expectations"
	"github.com/gputask/gputask-controller/pkg/podspec"
	"github.com/gputask/gputask-controller/pkg/reschedule"
	"github.com/gputask/gputask-controller/pkg/taskstatus"
)

// ReplacementPoll is how soon a task whose pod is being deleted is looked
// at again; the pod's delete event usually comes first.
const ReplacementPoll = 2 * time.Second

// Input is what the controller read for one sync.
type Input struct {
	// Task is nil when the task is gone.
	Task *gputaskv1.GPUTask
	// Pod is the pod of the task's name in the cache, nil when there is none.
	Pod *corev1.Pod
	// Node is the node the pod is bound to, nil when it is unbound or the
	// node is not in the cache.
	Node         *corev1.Node
	PodOptions   podspec.Options
	Rescheduling reschedule.Options
	// ExpectationsMet is false while a pod this controller created is not in
	// the cache yet.
	ExpectationsMet bool
	// DeletedUID, for a task that is gone, is its UID as the informer last
	// knew it, so that only the pod this very task controlled is deleted.
	DeletedUID types.UID
	Memory     Memory
	Now        time.Time
}

// Memory is what the controller remembers of a task between syncs, in
// memory only: after a restart it starts empty, and the plan falls back to
// what the caches show.
type Memory struct {
	// Replacement is the pod being replaced, if any.
	Replacement *Replacement
	// WarnedRestartedAt is the bad restartedAt value already reported, so a
	// bad annotation costs one event, not one per sync.
	WarnedRestartedAt string
	// Drift is the last drift found by reading a pod whose hash differs
	// from the spec's.
	Drift *Drift
	// GatedPod is the UID of the task's pod when it was seen held by a
	// scheduling gate and is not placed yet; UnschedulableSince is when it
	// was first seen unschedulable after the gate was lifted.
	GatedPod           types.UID
	UnschedulableSince time.Time
	// BackedOff is the UID of the failed pod whose replacement waits
	// (reschedule.BackOff) and for which the BackOff Warning was recorded.
	BackedOff types.UID
}

// Replacement is a pod being replaced: deleted, waited for until it is
// gone, then created again.
type Replacement struct {
	OldPodUID types.UID
	// Reason is a reschedule reason, or reschedule.ReasonRestart.
	Reason string
	// Created is set once the new pod exists and only the status write that
	// counts the replacement is left.
	Created bool
	// Counted is status.reschedules before this replacement, and the time
	// the new pod was created.
	Counted taskstatus.Replacement
	// Failures, for a pod that failed, is the count of failures in a row
	// (reschedule.FailureBackOff) that the new pod carries.
	Failures int32
}

// Drift is what a read of the task's pod found: the first field where the
// pod (by UID and generation) differs from the pod that the spec, by its
// hash, asks for.
type Drift struct {
	PodUID        types.UID
	PodGeneration int64
	Want          string
	Field         string
}

// StatusWrite is how the sync writes the task's status.
type StatusWrite int

const (
	// NoStatus writes nothing: a later event brings the write.
	NoStatus StatusWrite = iota
	// WriteStatus writes the status if it differs.
	WriteStatus
	// WriteCounted writes the status that counts Memory.Replacement, on the
	// condition that the task is still at the version the count was made
	// from; once written, the replacement is forgotten.
	WriteCounted
	// WriteUnlessSettling writes the status unless it only mirrors a pod on
	// its way to Running (taskstatus.SettleTime).
	WriteUnlessSettling
)

// Event is an event to record on the task.
type Event struct {
	Type, Reason, Message string
}

// Plan is what one sync does, in the order the controller carries it out.
type Plan struct {
	// Events are recorded first.
	Events []Event
	// DeletePodOf, for a task that is gone, is the UID of the task whose
	// pod to delete; DeleteOrphan deletes the pod of the task's name when
	// the task that controls it is gone (pkg/orphans). Both end the sync.
	DeletePodOf  types.UID
	DeleteOrphan bool
	// Desired is the pod the spec asks for, nil when SpecErr says why not.
	Desired *corev1.Pod
	SpecErr error
	// Create makes Desired, after its GPU claim template when EnsureClaims.
	Create       bool
	EnsureClaims bool
	// Conflict, when set, is why the pod of the task's name is not the
	// task's.
	Conflict string
	// ReadDrift, when set, is the drift check to make by reading the pod:
	// its hash differs from the spec's and no earlier read named the field.
	// Stale is a drift known without a read.
	ReadDrift *Drift
	Stale     string
	// ForceDelete removes the pod, deleted earlier for Memory.Replacement,
	// whose node is unreachable. CompleteDelete finishes a deletion
	// someone else started and interrupted (reschedule.DeleteInterrupted).
	ForceDelete    bool
	CompleteDelete bool
	// PodDraining and TaskPodBusy, when set, are the marks to carry: the
	// task's draining mark to its pod, the pod's busy mark to the task.
	// PodProtected, when set, puts the node autoscalers' do-not-evict marks
	// on the pod (a busy worker) or takes them off (an idle one).
	PodDraining, TaskPodBusy, PodProtected *bool
	// Replace, when set, is why the pod is deleted, to be created again by
	// a later sync once it is gone. Failures, for a pod that failed, is the
	// count of failures in a row its replacement carries.
	Replace  string
	Failures int32
	Status   StatusWrite
	// After, when > 0, is when to look at the task again.
	After time.Duration
	// Memory is what to remember of the task after the sync.
	Memory Memory
}

// lookAgainIn keeps the earliest of the times to look again: the queue
// keeps the earliest too.
func (p *Plan) lookAgainIn(d time.Duration) {
	if d > 0 && (p.After == 0 || d < p.After) {
		p.After = d
	}
}

// Make plans one sync of in.Task.
func Make(in Input) Plan {
	p := Plan{Memory: in.Memory}
	switch {
	case in.Task == nil:
		// Gone: nothing is left to remember. Deleting the pod here frees
		// the GPUs without waiting for garbage collection; a delete this
		// controller did not see may have left a pod of a task deleted
		// while it was down.
		p.Memory = Memory{}
		if uid := in.DeletedUID; uid != "" {
			p.DeletePodOf = uid
		} else {
			p.DeleteOrphan = true
		}
		return p
	case in.Task.DeletionTimestamp != nil:
		// The task is going away; its pod goes with it through garbage
		// collection.
		return p
	}
	p.Desired, p.SpecErr = podspec.Build(in.Task, in.PodOptions)
	switch {
	case in.Pod == nil:
		planMissingPod(&p, in)
	case !ControlledBy(in.Pod, in.Task):
		// The pod of an earlier task of this name is an orphan: once it is
		// deleted, its delete event brings the task back. A pod that is not
		// an orphan is never adopted, changed or deleted: it may be someone
		// else's work.
		p.DeleteOrphan = true
		p.Conflict = ConflictMessage(in.Pod)
		p.Status = WriteStatus
	default:
		planOwnedPod(&p, in)
	}
	return p
}

// ConflictMessage says why the task cannot have pod.
func ConflictMessage(pod *corev1.Pod) string {
	return fmt.Sprintf("pod %s exists and is not controlled by this GPUTask", klog.KObj(pod))
}

func planMissingPod(p *Plan, in Input) {
	if p.SpecErr != nil {
		// An invalid spec does not heal by retrying; the update that fixes
		// it enqueues the task again.
		p.Memory.Replacement = nil
		p.warnOnTransition(in.Task, gputaskv1.ConditionSpecValid, gputaskv1.ReasonInvalidSpec, p.SpecErr.Error())
		p.Status = WriteStatus
		return
	}
	if !in.ExpectationsMet {
		// The pod was created and the informer has not delivered it yet; a
		// create now would fail or, worse, race. Look again when it expires.
		p.lookAgainIn(expectations.DefaultTTL)
		return
	}
	if gputaskv1.IsDraining(in.Task) {
		// Scale-in (or a node being disrupted) chose this task, and its
		// pod is gone, evicted or lost: a new one would only go with the
		// task. Without a pod nothing is busy, so the set controller
		// deletes the task at its next sync.
		if in.Task.Annotations[gputaskv1.AnnotationPodBusy] == "true" {
			busy := false
			p.TaskPodBusy = &busy
		}
		p.Status = WriteStatus
		return
	}
	p.Create = true
	p.EnsureClaims = podspec.UsesDRA(&in.Task.Spec, in.PodOptions)
	if r := in.Memory.Replacement; r != nil && r.Failures > 0 {
		// The count outlives the failed pod, and this controller's memory,
		// on the pod made in its place; the spec's hash leaves it out.
		if p.Desired.Annotations == nil {
			p.Desired.Annotations = map[string]string{}
		}
		p.Desired.Annotations[gputaskv1.AnnotationFailureCount] = strconv.Itoa(int(r.Failures))
	}
}

// planOwnedPod mirrors the pod and replaces it when it must be placed again.
func planOwnedPod(p *Plan, in Input) {
	task, pod := in.Task, in.Pod
	if p.SpecErr != nil {
		p.warnOnTransition(task, gputaskv1.ConditionSpecValid, gputaskv1.ReasonInvalidSpec, p.SpecErr.Error())
	} else {
		// A spec change is shown, never applied to the running pod: the pod
		// is replaced only when gputask.io/restartedAt asks for it.
		p.planDrift(pod)
	}

	if r := p.Memory.Replacement; r != nil {
		if !r.Created && pod.UID == r.OldPodUID {
			// Our delete is under way: the pod terminates or the cache has
			// not caught up yet. Never create in the same sync.
			p.lookAgainIn(ReplacementPoll)
			p.ForceDelete = reschedule.ForceDelete(pod, in.Node, r.Reason, in.Now)
			p.Status = WriteStatus
			return
		}
		// The replacement exists; what is left is to count it.
		p.Memory.Replacement = Created(r, task, in.Now)
		p.Status = WriteCounted
		return
	}

	if pod.DeletionTimestamp != nil {
		// Someone else deletes the pod; it is created again once it is gone.
		p.lookAgainIn(ReplacementPoll)
		if d, ok := reschedule.Disrupted(pod); ok {
			p.noteDisruption(pod, d)
		}
		p.CompleteDelete = reschedule.DeleteInterrupted(pod)
		p.Status = WriteStatus
		return
	}

	if draining := gputaskv1.IsDraining(task); draining != gputaskv1.IsDraining(pod) {
		p.PodDraining = &draining
	}
	if busy := gputaskv1.IsBusy(pod); busy != (task.Annotations[gputaskv1.AnnotationPodBusy] == "true") {
		p.TaskPodBusy = &busy
	}
	if protect, change := protection(task, pod); change {
		p.PodProtected = &protect
	}
	// A pod whose replacement cannot be built is kept, whatever its state.
	if p.SpecErr == nil {
		p.Replace = p.replacementReason(in)
	}
	if p.Replace != "" {
		p.lookAgainIn(ReplacementPoll)
		p.Status = WriteStatus
		return
	}
	p.Status = WriteUnlessSettling
}

// planDrift finds the first field where the running pod differs from
// Desired. The hash the pod carries answers almost every sync from the
// cache, which keeps no pod spec (podspec.Trim). When the hashes differ,
// one read of the pod names the field, and is remembered for that pod and
// spec. A pod made before pods carried a hash is compared from the cache,
// which keeps its spec.
func (p *Plan) planDrift(pod *corev1.Pod) {
	have := podspec.Stamped(pod)
	if have == "" {
		p.Stale = podspec.FirstDifference(p.Desired, pod)
		return
	}
	want := podspec.Hash(p.Desired)
	if have == want {
		p.Memory.Drift = nil
		return
	}
	check := Drift{PodUID: pod.UID, PodGeneration: pod.Generation, Want: want}
	if known := p.Memory.Drift; known != nil && known.PodUID == check.PodUID &&
		known.PodGeneration == check.PodGeneration && known.Want == check.Want {
		p.Stale = known.Field
		return
	}
	p.ReadDrift = &check
}

// Created returns r flagged as created, counted from task's status at now
// the first time, or nil when no pod was being replaced.
func Created(r *Replacement, task *gputaskv1.GPUTask, now time.Time) *Replacement {
	if r == nil {
		return nil
	}
	out := *r
	if !out.Created {
		out.Created = true
		out.Counted = taskstatus.Replacement{CountedFrom: task.Status.Reschedules, At: metav1.NewTime(now)}
	}
	return &out
}

// noteDisruption records, once per pod, that someone else evicted or
// preempted the task's pod, with an event that names who and why, so that
// the pod made in its place is counted in status.reschedules like one this
// controller replaced.
func (p *Plan) noteDisruption(pod *corev1.Pod, d reschedule.Disruption) {
	if p.Memory.Replacement != nil {
		return
	}
	reason := d.RescheduleReason()
	p.Memory.Replacement = &Replacement{OldPodUID: pod.UID, Reason: reason}
	p.Events = append(p.Events, Event{Type: corev1.EventTypeWarning, Reason: reason, Message: fmt.Sprintf("Pod %s was %s by %s (%s): %s",
		pod.Name, strings.ToLower(reason), d.By, d.Reason, gputaskv1.TruncateMessage(d.Message, 512))})
}

// warnOnTransition records a Warning event when the condition is not
// already False with this reason and message, so that a standing problem
// costs one event rather than one per sync.
func (p *Plan) warnOnTransition(task *gputaskv1.GPUTask, condType, reason, msg string) {
	if Warned(task, condType, reason, msg) {
		return
	}
	p.Events = append(p.Events, Event{Type: corev1.EventTypeWarning, Reason: reason, Message: msg})
}

// Warned reports whether task's condType condition already shows the
// problem: False with this reason and message.
func Warned(task *gputaskv1.GPUTask, condType, reason, msg string) bool {
	cond := meta.FindStatusCondition(task.Status.Conditions, condType)
	return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == reason && cond.Message == msg
}

// ControlledBy checks the controller reference's kind and group as well as
// its UID: metav1.IsControlledBy checks the UID alone.
func ControlledBy(pod *corev1.Pod, task *gputaskv1.GPUTask) bool {
	ref := metav1.GetControllerOf(pod)
	return ref != nil && ref.UID == task.UID && gputaskv1.IsRefTo(ref, podspec.GPUTaskKind.Kind)
}

// protection is whether the pod should carry the marks that keep node
// autoscalers from evicting it (gputaskv1.AnnotationDoNotDisrupt and
// AnnotationSafeToEvict): while its worker is busy, on the pod or the
// task, and not once it is idle. change is false when the pod is as it
// should be, or when the task's template sets either mark itself: the
// user's choice stands.
func protection(task *gputaskv1.GPUTask, pod *corev1.Pod) (protect, change bool) {
	if t := task.Spec.Template; t != nil {
		for _, key := range []string{gputaskv1.AnnotationDoNotDisrupt, gputaskv1.AnnotationSafeToEvict} {
			if _, ok := t.Metadata.Annotations[key]; ok {
				return false, false
			}
		}
	}
	protect = gputaskv1.IsBusy(pod) || gputaskv1.IsBusy(task)
	a := pod.Annotations
	marked := a[gputaskv1.AnnotationDoNotDisrupt] != "" || a[gputaskv1.AnnotationSafeToEvict] != ""
	if protect {
		return true, !gputaskv1.DisruptionProtected(pod)
	}
	return false, marked
}
