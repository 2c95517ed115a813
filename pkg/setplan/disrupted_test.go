package setplan

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

func TestNodeDisrupted(t *testing.T) {
	node := func(taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.NodeSpec{Taints: taints}}
	}
	deleted := node()
	deleted.DeletionTimestamp = &metav1.Time{Time: testNow}
	tests := []struct {
		name string
		node *corev1.Node
		want bool
	}{
		{"no node", nil, false},
		{"no taint", node(), false},
		{"Karpenter's taint", node(corev1.Taint{Key: TaintDisrupted, Effect: corev1.TaintEffectNoSchedule}), true},
		{"among others", node(corev1.Taint{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule},
			corev1.Taint{Key: TaintDisrupted, Effect: corev1.TaintEffectNoSchedule}), true},
		{"the key with another effect is not Karpenter's", node(corev1.Taint{Key: TaintDisrupted, Effect: corev1.TaintEffectPreferNoSchedule}), false},
		{"the cluster autoscaler's taint", node(corev1.Taint{Key: "ToBeDeletedByClusterAutoscaler", Effect: corev1.TaintEffectNoSchedule}), false},
		{"a cordon alone", func() *corev1.Node { n := node(); n.Spec.Unschedulable = true; return n }(), false},
		{"being deleted", deleted, true},
	}
	for _, tc := range tests {
		if got := NodeDisrupted(tc.node); got != tc.want {
			t.Errorf("%s: NodeDisrupted() = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMakeDisrupted(t *testing.T) {
	const timeout = 10 * time.Minute
	// on moves a task to node; busyTask puts every task on node-1.
	on := func(node string, t *gputaskv1.GPUTask) *gputaskv1.GPUTask {
		t.Status.NodeName = node
		return t
	}
	pending := rankTask{name: "pending", age: time.Minute, phase: gputaskv1.GPUTaskPending, pod: true, node: true}.build()
	unplaced := rankTask{name: "unplaced", age: time.Minute, phase: gputaskv1.GPUTaskPending}.build()
	// podless still names the node of a pod that is gone: nothing of it
	// runs there any more.
	podless := rankTask{name: "podless", age: time.Hour, phase: gputaskv1.GPUTaskPending, node: true}.build()
	gone := DisruptedNodes{"node-1": true}
	tests := []struct {
		name         string
		active       []*gputaskv1.GPUTask
		desired      int
		disrupted    DisruptedNodes
		drainTimeout time.Duration
		burst        int

		create                            int
		undrain, drain, delete            []string
		disruptionDrain, disruptionDelete []string
		nodes                             []string
		draining                          int32
		retryAfter                        time.Duration
	}{{
		name:    "no disrupted node: the plan of Make",
		active:  []*gputaskv1.GPUTask{busyTask("a", time.Hour, true, 0), busyTask("b", time.Hour, false, 0)},
		desired: 2, drainTimeout: timeout,
	}, {
		name:    "a disrupted node other than the tasks' changes nothing",
		active:  []*gputaskv1.GPUTask{busyTask("a", time.Hour, true, 0), busyTask("b", time.Hour, false, 0)},
		desired: 2, disrupted: DisruptedNodes{"node-9": true}, drainTimeout: timeout,
	}, {
		name:    "busy tasks drain, idle ones go, and every one is replaced above the count",
		active:  []*gputaskv1.GPUTask{busyTask("busy", time.Hour, true, 0), busyTask("idle", time.Hour, false, 0), on("node-2", busyTask("healthy", time.Hour, false, 0))},
		desired: 3, disrupted: gone, drainTimeout: timeout,
		create: 2, disruptionDrain: []string{"busy"}, disruptionDelete: []string{"idle"}, nodes: []string{"node-1"},
		draining: 1, retryAfter: timeout,
	}, {
		name:    "a task not running yet goes at once",
		active:  []*gputaskv1.GPUTask{pending, unplaced},
		desired: 2, disrupted: gone, drainTimeout: timeout,
		create: 1, disruptionDelete: []string{"pending"}, nodes: []string{"node-1"},
	}, {
		name:    "a task without a pod is not on the node",
		active:  []*gputaskv1.GPUTask{podless},
		desired: 1, disrupted: gone, drainTimeout: timeout,
	}, {
		name:    "drainTimeout 0 deletes busy ones at once",
		active:  []*gputaskv1.GPUTask{busyTask("busy", time.Hour, true, 0)},
		desired: 1, disrupted: gone, drainTimeout: 0,
		create: 1, disruptionDelete: []string{"busy"}, nodes: []string{"node-1"},
	}, {
		name:    "in step: drained and replaced, nothing more to do",
		active:  []*gputaskv1.GPUTask{busyTask("busy", time.Hour, true, time.Minute), on("node-2", busyTask("new", time.Minute, false, 0))},
		desired: 1, disrupted: gone, drainTimeout: timeout,
		draining: 1, retryAfter: 9 * time.Minute,
	}, {
		name:    "a drain there ends when the worker turns idle",
		active:  []*gputaskv1.GPUTask{busyTask("done", time.Hour, false, time.Minute), on("node-2", busyTask("new", time.Minute, false, 0))},
		desired: 1, disrupted: gone, drainTimeout: timeout,
		delete: []string{"done"},
	}, {
		name:    "a drain there ends at the timeout",
		active:  []*gputaskv1.GPUTask{busyTask("late", time.Hour, true, timeout), on("node-2", busyTask("new", time.Minute, false, 0))},
		desired: 1, disrupted: gone, drainTimeout: timeout,
		delete: []string{"late"},
	}, {
		name: "a scale-up never takes back a drain on a disrupted node",
		active: []*gputaskv1.GPUTask{
			busyTask("leaving", time.Hour, true, time.Minute), on("node-2", busyTask("staying", time.Hour, true, 2*time.Minute)),
		},
		desired: 2, disrupted: gone, drainTimeout: timeout,
		undrain: []string{"staying"}, create: 1, draining: 1, retryAfter: 9 * time.Minute,
	}, {
		name: "scale-in keeps the healthy task: the disrupted one leaves, none is created",
		active: []*gputaskv1.GPUTask{
			busyTask("old-disrupted", 3*time.Hour, false, 0), on("node-2", busyTask("young-healthy", time.Minute, false, 0)),
		},
		desired: 1, disrupted: gone, drainTimeout: timeout,
		disruptionDelete: []string{"old-disrupted"}, nodes: []string{"node-1"},
	}, {
		name: "scale-in chooses its victims among the healthy tasks only",
		active: []*gputaskv1.GPUTask{
			busyTask("disrupted", time.Hour, true, 0),
			on("node-2", busyTask("h1", time.Hour, false, 0)), on("node-2", busyTask("h2", 2*time.Hour, false, 0)),
		},
		desired: 1, disrupted: gone, drainTimeout: timeout,
		delete: []string{"h1"}, disruptionDrain: []string{"disrupted"}, nodes: []string{"node-1"},
		draining: 1, retryAfter: timeout,
	}, {
		name: "several nodes, named once each in order",
		active: []*gputaskv1.GPUTask{
			on("node-b", busyTask("b1", time.Hour, true, 0)), on("node-a", busyTask("a1", time.Hour, false, 0)),
			on("node-b", busyTask("b2", time.Hour, false, 0)),
		},
		desired: 3, disrupted: DisruptedNodes{"node-a": true, "node-b": true}, drainTimeout: timeout,
		create: 3, disruptionDrain: []string{"b1"}, disruptionDelete: []string{"a1", "b2"}, nodes: []string{"node-a", "node-b"},
		draining: 1, retryAfter: timeout,
	}, {
		name:    "at most burst leave per plan, and as many are created",
		active:  []*gputaskv1.GPUTask{busyTask("a", time.Hour, false, 0), busyTask("b", time.Hour, false, 0), busyTask("c", time.Hour, false, 0)},
		desired: 3, disrupted: gone, drainTimeout: timeout, burst: 2,
		create: 2, disruptionDelete: []string{"a", "b"}, nodes: []string{"node-1"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			burst := tc.burst
			if burst == 0 {
				burst = DefaultBurstReplicas
			}
			p := MakeDisrupted(tc.active, tc.desired, nil, tc.disrupted, tc.drainTimeout, 0, testNow, burst)
			if p.Create != tc.create || p.Draining != tc.draining || p.RetryAfter != tc.retryAfter {
				t.Errorf("create %d draining %d retryAfter %v, want %d %d %v", p.Create, p.Draining, p.RetryAfter, tc.create, tc.draining, tc.retryAfter)
			}
			for _, c := range []struct {
				what      string
				got, want []string
			}{
				{"undrain", names(p.Undrain), tc.undrain}, {"drain", names(p.Drain), tc.drain}, {"delete", names(p.Delete), tc.delete},
				{"disruption drain", names(p.Disruption.Drain), tc.disruptionDrain},
				{"disruption delete", names(p.Disruption.Delete), tc.disruptionDelete},
				{"disruption nodes", p.Disruption.Nodes(), tc.nodes},
			} {
				if !slices.Equal(c.got, c.want) && (len(c.got) > 0 || len(c.want) > 0) {
					t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
				}
			}
		})
	}
}

func TestServingAfterLeavesDisruptedTasksOut(t *testing.T) {
	active := []*gputaskv1.GPUTask{busyTask("kept", time.Hour, false, 0), busyTask("marked", time.Hour, true, 0), busyTask("deleted", time.Hour, false, 0)}
	p := Plan{Disruption: Disruption{Drain: active[1:2], Delete: active[2:3]}}
	if got, want := names(p.ServingAfter(active)), []string{"kept"}; !slices.Equal(got, want) {
		t.Errorf("ServingAfter() = %v, want %v", got, want)
	}
}

// FuzzMakeDisrupted: for Running tasks on up to four nodes, some of them
// disrupted, some busy, some draining already, and any desired count, the
// plan (with no minimum age and no cap) leaves exactly desired tasks
// serving, none of them on a disrupted node; it takes every serving task on
// a disrupted node out of service, never takes back a drain there, never
// chooses a scale-in victim there, and names no task twice.
func FuzzMakeDisrupted(f *testing.F) {
	f.Add(uint8(12), uint8(5), uint64(0x9e3779b97f4a7c15))
	f.Add(uint8(3), uint8(9), uint64(42))
	f.Add(uint8(20), uint8(0), uint64(7))
	f.Add(uint8(25), uint8(30), uint64(0xf000000000000123))
	f.Fuzz(func(t *testing.T, n, desired uint8, seed uint64) {
		disrupted := DisruptedNodes{}
		for node := range 4 {
			if seed>>(60+node)&1 == 1 {
				disrupted[fmt.Sprintf("node-%d", node)] = true
			}
		}
		var active []*gputaskv1.GPUTask
		for i := range int(n % 30) {
			bits := seed>>(i%50) ^ uint64(i)*0x2545f4914f6cdd1d
			var drainAgo time.Duration
			if bits>>3&3 == 0 {
				drainAgo = time.Duration(1+bits%20) * time.Minute
			}
			task := busyTask(fmt.Sprintf("t-%02d", i), time.Duration(1+bits%7200)*time.Second, bits>>5&1 == 1, drainAgo)
			task.Status.NodeName = fmt.Sprintf("node-%d", bits>>7%4)
			active = append(active, task)
		}
		p := MakeDisrupted(active, int(desired%40), nil, disrupted, 10*time.Minute, 0, testNow, 1000)

		seen := map[string]string{}
		for what, tasks := range map[string][]*gputaskv1.GPUTask{
			"undrain": p.Undrain, "drain": p.Drain, "delete": p.Delete,
			"disruption drain": p.Disruption.Drain, "disruption delete": p.Disruption.Delete,
		} {
			for _, task := range tasks {
				if other, ok := seen[task.Name]; ok {
					t.Fatalf("%s is in both %s and %s", task.Name, other, what)
				}
				seen[task.Name] = what
				leaving := disrupted[task.Status.NodeName]
				switch {
				case (what == "undrain" || what == "drain") && leaving:
					t.Fatalf("%s on disrupted %s is in %s", task.Name, task.Status.NodeName, what)
				case what == "delete" && leaving && !gputaskv1.IsDraining(task):
					t.Fatalf("%s on disrupted %s chosen as a scale-in victim", task.Name, task.Status.NodeName)
				}
			}
		}
		serving := p.Create
		for _, task := range p.ServingAfter(active) {
			if disrupted[task.Status.NodeName] {
				t.Fatalf("%s on disrupted %s still serving", task.Name, task.Status.NodeName)
			}
			serving++
		}
		if serving != int(desired%40) {
			t.Fatalf("%d tasks serving after the plan (%d created), want %d", serving, p.Create, desired%40)
		}
	})
}
