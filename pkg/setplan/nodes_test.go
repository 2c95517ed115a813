package setplan

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// onNode is a Running task of gpus GPUs on node, age before testNow.
func onNode(name, node string, age time.Duration, gpus int) *gputaskv1.GPUTask {
	t := running(name, age).build()
	t.Status.NodeName = node
	if gpus != 1 {
		t.Spec.GPUAmount = ptrIntOrString(intstr.FromInt32(int32(gpus)))
	}
	return t
}

func ptrIntOrString(v intstr.IntOrString) *intstr.IntOrString { return &v }

func TestGPUsInUse(t *testing.T) {
	failed := onNode("failed", "n1", time.Hour, 1)
	failed.Status.Phase = gputaskv1.GPUTaskFailed
	succeeded := onNode("done", "n1", time.Hour, 1)
	succeeded.Status.Phase = gputaskv1.GPUTaskSucceeded
	unplaced := onNode("unplaced", "", time.Hour, 1)
	invalid := onNode("invalid", "n3", time.Hour, 1)
	invalid.Spec.GPUAmount = ptrIntOrString(intstr.FromString("many"))
	scheduled := onNode("scheduled", "n3", time.Hour, 1)
	scheduled.Status.Phase = gputaskv1.GPUTaskScheduled
	got := GPUsInUse([]*gputaskv1.GPUTask{
		onNode("a", "n1", time.Hour, 1), onNode("b", "n1", time.Hour, 2), onNode("c", "n2", time.Hour, 4),
		failed, succeeded, unplaced, invalid, scheduled,
	})
	want := NodeGPUs{"n1": 3, "n2": 4, "n3": 2}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("GPUsInUse() = %v, want %v", got, want)
	}
}

func TestRankEmptiesTheEmptiestNodeFirst(t *testing.T) {
	busy := func(t *gputaskv1.GPUTask) *gputaskv1.GPUTask {
		t.Annotations = map[string]string{gputaskv1.AnnotationBusy: "true"}
		return t
	}
	cost := func(t *gputaskv1.GPUTask, c string) *gputaskv1.GPUTask {
		t.Annotations = map[string]string{gputaskv1.AnnotationDeletionCost: c}
		return t
	}
	tests := []struct {
		name  string
		tasks []*gputaskv1.GPUTask
		want  []string
	}{{
		name: "fewest GPUs in use first, before age",
		tasks: []*gputaskv1.GPUTask{
			onNode("full-young", "n1", time.Minute, 1), onNode("full-old", "n1", time.Hour, 1), onNode("full-mid", "n1", 30*time.Minute, 1),
			onNode("alone-old", "n2", 2*time.Hour, 1),
		},
		want: []string{"alone-old", "full-young", "full-mid", "full-old"},
	}, {
		name: "GPUs count, not tasks: one 4-GPU task holds more than two 1-GPU ones",
		tasks: []*gputaskv1.GPUTask{
			onNode("big", "n1", time.Minute, 4),
			onNode("small-1", "n2", time.Hour, 1), onNode("small-2", "n2", time.Hour+time.Minute, 1),
		},
		want: []string{"small-1", "small-2", "big"},
	}, {
		name: "a tie goes to the node with the younger youngest task, so one node empties before the next",
		tasks: []*gputaskv1.GPUTask{
			onNode("b-young", "node-b", time.Minute, 1), onNode("a-old", "node-a", time.Hour, 1),
			onNode("b-old", "node-b", 2*time.Hour, 1), onNode("a-young", "node-a", 2*time.Minute, 1),
		},
		want: []string{"b-young", "b-old", "a-young", "a-old"},
	}, {
		name: "then to the node name",
		tasks: []*gputaskv1.GPUTask{
			onNode("b-young", "node-b", time.Minute, 1), onNode("a-old", "node-a", time.Hour, 1),
			onNode("b-old", "node-b", 2*time.Hour, 1), onNode("a-young", "node-a", time.Minute, 1),
		},
		want: []string{"a-young", "a-old", "b-young", "b-old"},
	}, {
		name: "tasks alone on nodes of equal use keep younger first",
		tasks: []*gputaskv1.GPUTask{
			onNode("old", "node-a", time.Hour, 1), onNode("young", "node-c", time.Minute, 1), onNode("mid", "node-b", 30*time.Minute, 1),
		},
		want: []string{"young", "mid", "old"},
	}, {
		name: "idle before busy, whatever the node",
		tasks: []*gputaskv1.GPUTask{
			busy(onNode("alone-busy", "n2", time.Hour, 1)),
			onNode("full-1", "n1", time.Hour, 1), onNode("full-2", "n1", 2*time.Hour, 1),
		},
		want: []string{"full-1", "full-2", "alone-busy"},
	}, {
		name: "deletion cost before the node",
		tasks: []*gputaskv1.GPUTask{
			cost(onNode("alone-dear", "n2", time.Hour, 1), "10"),
			onNode("full-1", "n1", time.Hour, 1), onNode("full-2", "n1", 2*time.Hour, 1),
		},
		want: []string{"full-1", "full-2", "alone-dear"},
	}, {
		name: "an unplaced task still goes first",
		tasks: []*gputaskv1.GPUTask{
			onNode("alone", "n2", time.Minute, 1),
			func() *gputaskv1.GPUTask {
				t := rankTask{name: "no-node", age: 3 * time.Hour, phase: gputaskv1.GPUTaskPending, pod: true}.build()
				return t
			}(),
		},
		want: []string{"no-node", "alone"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := names(RankForScaleIn(tc.tasks, nil)); !slices.Equal(got, tc.want) {
				t.Errorf("RankForScaleIn() = %v, want %v", got, tc.want)
			}
		})
	}
}

// Sixteen one-GPU tasks, four on each of four 8-GPU nodes as the default
// scheduler spreads them, scaled in to four: the ranking leaves them on one
// node, where the ReplicaSet controller's (the most pods of the set on a
// node first) would leave one on each.
func TestScaleInSixteenToFourLeavesOneNode(t *testing.T) {
	var tasks []*gputaskv1.GPUTask
	for i := range 16 {
		node := fmt.Sprintf("node-%d", i%4)
		tasks = append(tasks, onNode(fmt.Sprintf("task-%02d", i), node, time.Duration(16-i)*time.Hour, 1))
	}
	plan := Make(tasks, 4, nil, DefaultDrainTimeout, 0, testNow, DefaultBurstReplicas)
	if len(plan.Delete) != 12 {
		t.Fatalf("deletes %d tasks, want 12", len(plan.Delete))
	}
	left := GPUsInUse(withoutTasks(tasks, plan.Delete))
	if len(left) != 1 {
		t.Errorf("tasks left on %d nodes (%v), want 1", len(left), left)
	}
	if got := ExplainNodes(plan.Delete, plan.NodeGPUs); got != "fewest GPUs of the set in use first: node-3 (4), node-2 (4), node-1 (4)" {
		t.Errorf("ExplainNodes() = %q", got)
	}
}

// Draining tasks hold their GPUs: a node whose other tasks drain is not
// the emptiest for the serving tasks left on it.
func TestMakeCountsDrainingGPUs(t *testing.T) {
	draining := onNode("draining", "n1", time.Hour, 1)
	draining.Annotations = map[string]string{gputaskv1.AnnotationDraining: "true", gputaskv1.AnnotationBusy: "true",
		gputaskv1.AnnotationDrainStartedAt: testNow.Format(time.RFC3339)}
	tasks := []*gputaskv1.GPUTask{draining, onNode("on-n1", "n1", time.Minute, 1), onNode("on-n2", "n2", time.Hour, 1)}
	plan := Make(tasks, 1, nil, DefaultDrainTimeout, 0, testNow, DefaultBurstReplicas)
	if got := names(plan.Delete); !slices.Equal(got, []string{"on-n2"}) {
		t.Errorf("deletes %v, want [on-n2]: n1 holds two GPUs with its drain", got)
	}
}

func TestExplainNodes(t *testing.T) {
	use := NodeGPUs{"a": 3, "b": 1}
	victims := []*gputaskv1.GPUTask{onNode("u", "", 0, 1), onNode("y", "b", 0, 1), onNode("x", "a", 0, 1), onNode("z", "a", 0, 1)}
	if got, want := ExplainNodes(victims, use), "fewest GPUs of the set in use first: b (1), a (3)"; got != want {
		t.Errorf("ExplainNodes() = %q, want %q", got, want)
	}
	if got := ExplainNodes([]*gputaskv1.GPUTask{onNode("u", "", 0, 1)}, use); got != "" {
		t.Errorf("ExplainNodes() of unplaced victims = %q, want empty", got)
	}
}

// FuzzScaleInEmptiesNodes: for idle, Running one-GPU tasks of any ages on
// up to six nodes, the ranking takes each node's tasks together, nodes in
// order of their GPUs in use, so removing the first k tasks for any k
// leaves as few nodes occupied as any choice of k tasks could.
func FuzzScaleInEmptiesNodes(f *testing.F) {
	f.Add(uint8(16), uint64(0x9e3779b97f4a7c15))
	f.Add(uint8(7), uint64(42))
	f.Fuzz(func(t *testing.T, n uint8, seed uint64) {
		var tasks []*gputaskv1.GPUTask
		for i := range int(n % 40) {
			bits := seed>>(i%58) ^ uint64(i)*0x2545f4914f6cdd1d
			node := fmt.Sprintf("node-%d", bits%6)
			tasks = append(tasks, onNode(fmt.Sprintf("t-%02d", i), node, time.Duration(bits%7200)*time.Second, 1))
		}
		use := GPUsInUse(tasks)
		ranked := RankForScaleIn(tasks, nil)
		if len(ranked) != len(tasks) {
			t.Fatalf("ranked %d of %d tasks", len(ranked), len(tasks))
		}
		done := map[string]bool{}
		for i, task := range ranked {
			node := task.Status.NodeName
			if i > 0 && ranked[i-1].Status.NodeName != node {
				prev := ranked[i-1].Status.NodeName
				done[prev] = true
				if use[node] < use[prev] {
					t.Fatalf("%s (%d GPUs) after %s (%d GPUs)", node, use[node], prev, use[prev])
				}
			}
			if done[node] {
				t.Fatalf("%s comes back after other nodes: %v", node, names(ranked))
			}
		}
		counts := make([]int, 0, len(use))
		for _, c := range use {
			counts = append(counts, int(c))
		}
		slices.Sort(counts)
		for k := range len(ranked) + 1 {
			left := len(GPUsInUse(ranked[k:]))
			// The most nodes k removals can empty: the smallest ones first.
			emptied, removed := 0, 0
			for _, c := range counts {
				if removed+c > k {
					break
				}
				removed += c
				emptied++
			}
			if want := len(counts) - emptied; left != want {
				t.Fatalf("after %d removals %d nodes occupied, want %d", k, left, want)
			}
		}
	})
}
