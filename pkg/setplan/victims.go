package setplan

import (
	"sort"
	"strconv"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// This file holds the scale-in order: which tasks go first when a set
// shrinks, and which tasks minTaskAge protects.

// ScaleIn is the outcome of choosing victims for one scale-in.
type ScaleIn struct {
	// Victims are the tasks to delete, best victim first.
	Victims []*gputaskv1.GPUTask
	// HeldBack is how many of the wanted removals did not happen because every
	// remaining task is a Running task younger than minTaskAge.
	HeldBack int32
	// RetryAfter is when the earliest protected task comes of age, so the set
	// can be synced again then; zero when nothing is held back.
	RetryAfter time.Duration
}

// BusyFunc reports whether a task's worker is busy. Nil is
// gputaskv1.WorkerBusy: the task's own mark, or its pod's as the GPUTask
// controller mirrors it on the task.
type BusyFunc func(*gputaskv1.GPUTask) bool

// ChooseVictims picks up to count tasks to delete from tasks, following
// RankForScaleIn. A Running task younger than minAge is never picked: it is
// skipped, and the next task in rank order is taken instead. Tasks that are
// not Running yet are never protected, because removing them interrupts no
// work. minAge <= 0 protects nothing. The input slice is not modified.
func ChooseVictims(tasks []*gputaskv1.GPUTask, count int, minAge time.Duration, now time.Time, busy BusyFunc) ScaleIn {
	return chooseVictims(tasks, count, minAge, now, busy, GPUsInUse(tasks))
}

// chooseVictims is ChooseVictims with the nodes' GPUs in use counted over
// more tasks than the candidates: draining tasks hold their GPUs too.
func chooseVictims(tasks []*gputaskv1.GPUTask, count int, minAge time.Duration, now time.Time, busy BusyFunc, use NodeGPUs) ScaleIn {
	var out ScaleIn
	if count <= 0 {
		return out
	}
	var earliestOfAge time.Time
	for _, t := range rankForScaleIn(tasks, busy, use) {
		if len(out.Victims) == count {
			break
		}
		if comesOfAge, protected := protectedUntil(t, minAge, now); protected {
			if earliestOfAge.IsZero() || comesOfAge.Before(earliestOfAge) {
				earliestOfAge = comesOfAge
			}
			continue
		}
		out.Victims = append(out.Victims, t)
	}
	if short := count - len(out.Victims); short > 0 && !earliestOfAge.IsZero() {
		// Only protected tasks are left, so the first of them to come of age
		// is the next moment scale-in can make progress.
		out.HeldBack = int32(min(short, len(tasks)-len(out.Victims)))
		out.RetryAfter = earliestOfAge.Sub(now)
	}
	return out
}

// protectedUntil reports whether minAge protects t from scale-in at now, and
// if so when that protection ends.
func protectedUntil(t *gputaskv1.GPUTask, minAge time.Duration, now time.Time) (time.Time, bool) {
	if minAge <= 0 || t.Status.Phase != gputaskv1.GPUTaskRunning {
		return time.Time{}, false
	}
	comesOfAge := t.CreationTimestamp.Add(minAge)
	return comesOfAge, now.Before(comesOfAge)
}

// RankForScaleIn returns the tasks ordered from the best scale-in victim to the
// worst. The order is chosen so that a scale-in interrupts as little work as it
// can, and then frees whole nodes:
//  1. a task without a pod, or whose pod has no node yet, before one on a node:
//     removing it stops nothing that runs;
//  2. an earlier phase before a later one (Failed and Succeeded tasks do no
//     work, then Pending, Scheduled, and Running last): the later the phase,
//     the more start-up (image pull, model load) a removal throws away;
//  3. an idle task before a busy one (gputask.io/busy: "true" on the task or
//     its pod, as busy reports): the worker's own word beats every static hint;
//  4. a lower gputask.io/deletion-cost before a higher one (missing or invalid
//     counts as 0): the user's static hint, as pod-deletion-cost is for a
//     ReplicaSet;
//  5. a task on the node with the fewest of the set's GPUs in use before one
//     on a busier node, ties broken by the node's youngest task, then by node
//     name (nodes.go): scale-in empties one node at a time, so the node
//     autoscaler can remove it;
//  6. a younger task before an older one, so long-running work survives;
//  7. name, only so that the order is stable.
//
// Rules 1, 2, 4 and 6 follow the ReplicaSet controller's order. The rest
// departs from it for GPU workers: the busy mark ranks above the deletion
// cost, readiness and restart counts are not ranked, and rule 5 empties the
// emptiest node first where the ReplicaSet controller takes pods from the
// nodes that hold the most of its pods, which keeps every node partly full.
//
// busy nil looks at the task's annotation only. The GPUs in use are counted
// over tasks.
func RankForScaleIn(tasks []*gputaskv1.GPUTask, busy BusyFunc) []*gputaskv1.GPUTask {
	return rankForScaleIn(tasks, busy, GPUsInUse(tasks))
}

func rankForScaleIn(tasks []*gputaskv1.GPUTask, busy BusyFunc, use NodeGPUs) []*gputaskv1.GPUTask {
	if busy == nil {
		busy = gputaskv1.WorkerBusy
	}
	ranked := make([]*gputaskv1.GPUTask, len(tasks))
	copy(ranked, tasks)
	isBusy := make(map[*gputaskv1.GPUTask]bool, len(ranked))
	for _, t := range ranked {
		isBusy[t] = busy(t)
	}
	nodes := newNodeOrder(ranked, use)
	sort.SliceStable(ranked, func(i, j int) bool { return victimBefore(ranked[i], ranked[j], isBusy, nodes) })
	return ranked
}

// victimBefore reports whether a is a better scale-in victim than b.
func victimBefore(a, b *gputaskv1.GPUTask, busy map[*gputaskv1.GPUTask]bool, nodes nodeOrder) bool {
	if pa, pb := isPlaced(a), isPlaced(b); pa != pb {
		return !pa
	}
	if ra, rb := phaseRank(a.Status.Phase), phaseRank(b.Status.Phase); ra != rb {
		return ra < rb
	}
	if ba, bb := busy[a], busy[b]; ba != bb {
		return !ba
	}
	if ca, cb := DeletionCost(a), DeletionCost(b); ca != cb {
		return ca < cb
	}
	if isPlaced(a) {
		// Both are placed: rule 1 has told any other pair apart.
		if d := nodes.emptierNode(a, b); d != 0 {
			return d < 0
		}
	}
	if ta, tb := a.CreationTimestamp, b.CreationTimestamp; !ta.Equal(&tb) {
		return tb.Before(&ta)
	}
	return a.Name < b.Name
}

// isPlaced reports whether the task has a pod that is bound to a node.
func isPlaced(t *gputaskv1.GPUTask) bool {
	return t.Status.PodName != "" && t.Status.NodeName != ""
}

// phaseRank orders phases by how little work a task in them is doing.
func phaseRank(p gputaskv1.GPUTaskPhase) int {
	switch p {
	case gputaskv1.GPUTaskFailed:
		return 0
	case gputaskv1.GPUTaskSucceeded:
		return 1
	case gputaskv1.GPUTaskPending, "":
		return 2
	case gputaskv1.GPUTaskScheduled:
		return 3
	case gputaskv1.GPUTaskRunning:
		return 5
	default:
		// A phase this version does not know: rank it as still starting, so
		// a Running task is never preferred over it.
		return 4
	}
}

// DeletionCost reads the task's gputask.io/deletion-cost annotation. Like
// controller.kubernetes.io/pod-deletion-cost it is a 32-bit integer; a
// missing or invalid value counts as 0 rather than failing the scale-in.
func DeletionCost(t *gputaskv1.GPUTask) int32 {
	v, ok := t.Annotations[gputaskv1.AnnotationDeletionCost]
	if !ok {
		return 0
	}
	cost, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0
	}
	return int32(cost)
}
