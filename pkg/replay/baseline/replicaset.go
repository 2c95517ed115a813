package baseline

import (
	"sort"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/setplan"
)

// replicaSetVictims orders workers as the ReplicaSet controller picks pods
// to delete (pkg/controller/controller_utils.go, ActivePodsWithRanks.Less,
// with the ranks of replica_set.go's getPodsRankedByRelatedPodsOnSameNode),
// for pods with no deletion cost and no restarts:
//  1. a pod not bound to a node (its node still launching) first;
//  2. Pending before Running: the same pods here, as a bound worker runs;
//  3. not Ready before Ready;
//  4. the pod with more active pods of the set on its node first, so that
//     scale-in thins the fullest nodes and keeps every node half full;
//  5. among Ready pods the one Ready more recently first, compared by the
//     log2 of the time since (then by UID);
//  6. the newer pod first, by the same log2 rank (then by UID).
func replicaSetVictims(workers []*sim.Worker, now time.Time) []*sim.Worker {
	onNode := make(map[string]int, len(workers))
	for _, w := range workers {
		onNode[w.NodeName(now)]++
	}
	ranked := append([]*sim.Worker(nil), workers...)
	sort.SliceStable(ranked, func(i, j int) bool {
		a, b := ranked[i], ranked[j]
		return podLess(a, b, onNode[a.NodeName(now)], onNode[b.NodeName(now)], now)
	})
	return ranked
}

// podLess reports whether the ReplicaSet controller deletes a before b,
// where rankA and rankB are the active pods of the set on their nodes.
func podLess(a, b *sim.Worker, rankA, rankB int, now time.Time) bool {
	if ba, bb := a.Bound(now), b.Bound(now); ba != bb {
		return !ba
	}
	ra, rb := a.Ready(now), b.Ready(now)
	if ra != rb {
		return !ra
	}
	if rankA != rankB {
		return rankA > rankB
	}
	if ra && !a.ReadyAt.Equal(b.ReadyAt) {
		if d := logarithmicRankDiff(a.ReadyAt, b.ReadyAt, now); d != 0 {
			return d < 0
		}
		return uid(a) < uid(b)
	}
	if !a.Created.Equal(b.Created) {
		if d := logarithmicRankDiff(a.Created, b.Created, now); d != 0 {
			return d < 0
		}
		return uid(a) < uid(b)
	}
	return false
}

// deploymentVictims ranks the pool's live workers as the Deployment's
// scale-in takes them, in the pool's order (Pool.DeploymentVictims).
func deploymentVictims(p *sim.Pool) []*sim.Worker {
	if p.DeploymentVictims() == sim.DeploymentVictimsNodeAware {
		return nodeAwareVictims(p.Workers(), p.Now())
	}
	return replicaSetVictims(p.Workers(), p.Now())
}

// nodeAwareVictims orders workers as the set controller ranks its tasks,
// with no worker busy: what a Deployment could do with the same order.
func nodeAwareVictims(workers []*sim.Worker, now time.Time) []*sim.Worker {
	tasks := make([]*gputaskv1.GPUTask, len(workers))
	byTask := make(map[*gputaskv1.GPUTask]*sim.Worker, len(workers))
	for i, w := range workers {
		tasks[i] = sim.TaskOf(w, now)
		byTask[tasks[i]] = w
	}
	ranked := setplan.RankForScaleIn(tasks, func(*gputaskv1.GPUTask) bool { return false })
	out := make([]*sim.Worker, len(ranked))
	for i, t := range ranked {
		out[i] = byTask[t]
	}
	return out
}
