package e2e

// Karpenter's default consolidation (WhenEmptyOrUnderutilized) under a
// GPUTaskSet whose busy workers are protected and whose idle ones are not.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

// The layout of the WhenEmptyOrUnderutilized subtest: the busy workers the
// set keeps on each of its four nodes (in name order) when it is scaled in
// from 16 to 6, and the nodes whose workers then go idle.
var (
	underutilizedBusy     = []int{1, 1, 2, 2}
	underutilizedGoIdle   = []bool{false, false, true, true}
	underutilizedReplicas = int32(6)
)

// testKarpenterUnderutilized runs a GPUTaskSet on a NodePool under
// Karpenter's default consolidation, WhenEmptyOrUnderutilized:
//
//  1. 16 tasks fill four nodes, four tasks each.
//  2. The workers of 6 tasks mark their pods busy: 1, 1, 2 and 2 on the four
//     nodes. The GPUTask controller puts karpenter.sh/do-not-disrupt on
//     those pods, and no other.
//  3. The set is scaled in to 6: it removes the 10 idle tasks and keeps the
//     6 busy ones, one or two on each node. Every node holds a protected
//     pod, so Karpenter disrupts none although the 6 would fit on two.
//  4. The workers on the last two nodes go idle (4 tasks). Their pods lose
//     the mark; their nodes' pods fit on the first two nodes' 6 free
//     slots, so Karpenter consolidates those two nodes, and the set
//     replaces their 4 tasks on the first two nodes.
//
// It asserts that exactly the two nodes of idle workers go and the two
// with busy workers stay, that the busy workers keep their very pods (never
// deleted: no request lost), that exactly the 4 idle pods are deleted and 4
// new ones started, and that no node is launched for them.
func testKarpenterUnderutilized(t *testing.T, c *framework.ControlPlane, pool karpenterPool) {
	ctx := context.Background()
	ns := c.NamespaceT(t)
	dumpOnFailure(t, c, ns, pool)
	nodesSeen := startNodeRecorder(t, c, pool)

	// 1. 16 tasks on four nodes.
	set := karpenterSet(pool, "taskset", 16)
	if _, err := c.GPUTask.GputaskV1().GPUTaskSets(ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := waitWorkloadRunning(t, c, ns, gputaskv1.LabelTask, 16)
	perNode := podsPerNode(pods)
	nodes := slices.Sorted(maps.Keys(perNode))
	t.Logf("16 tasks on %d nodes: %v", len(nodes), perNode)
	if len(nodes) != 4 {
		t.Fatalf("16 tasks on %d nodes (%v), want 4 nodes of 4", len(nodes), perNode)
	}
	for _, node := range nodes {
		if perNode[node] != 4 {
			t.Fatalf("16 tasks on %v, want 4 nodes of 4", perNode)
		}
	}
	// Karpenter removes any node it launched that no task took.
	waitWorkloadNodes(t, c, pool, "taskset", nodes)

	// 2. The workers of 1, 1, 2 and 2 tasks go busy, as a worker marks its
	// own pod.
	byNode := map[string][]corev1.Pod{}
	for _, pod := range pods {
		byNode[pod.Spec.NodeName] = append(byNode[pod.Spec.NodeName], pod)
	}
	busy := map[types.UID]corev1.Pod{}   // the busy pods
	goIdle := map[types.UID]corev1.Pod{} // those of them that go idle in step 4
	for i, node := range nodes {
		on := byNode[node]
		sort.Slice(on, func(a, b int) bool { return on[a].Name < on[b].Name })
		for _, pod := range on[:underutilizedBusy[i]] {
			busy[pod.UID] = pod
			if underutilizedGoIdle[i] {
				goIdle[pod.UID] = pod
			}
			markBusy(t, c, ns, pod.Name, true)
		}
	}
	// The GPUTask controller marks the busy pods, and only them, and tells
	// the set (the task's gputask.io/pod-busy) before the scale-in reads it.
	waitProtection(t, c, ns, busy)

	// 3. Scaled in to 6: the 10 idle tasks go, the 6 busy ones stay.
	patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, underutilizedReplicas))
	if _, err := c.GPUTask.GputaskV1().GPUTaskSets(ns).Patch(ctx, set.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	pods = waitWorkloadRunning(t, c, ns, gputaskv1.LabelTask, int(underutilizedReplicas))
	for _, pod := range pods {
		if _, ok := busy[pod.UID]; !ok {
			t.Fatalf("after the scale-in pod %s (UID %s) on %s runs; want only the busy pods %v", pod.Name, pod.UID, pod.Spec.NodeName, podNames(busy))
		}
	}
	t.Logf("scaled in to %d busy tasks on %v", len(pods), podsPerNode(pods))
	// Every node holds a protected pod: Karpenter has taken none.
	if got := workloadNodes(t, c, pool, "taskset"); !slices.Equal(got, nodes) {
		t.Fatalf("nodes %v after the scale-in, want %v: a node holding a busy worker went", got, nodes)
	}

	// 4. The workers of the last two nodes go idle.
	recorder := startPodRecorder(t, c, ns, nil)
	for _, pod := range goIdle {
		markBusy(t, c, ns, pod.Name, false)
	}
	var keep []string
	for i, node := range nodes {
		if !underutilizedGoIdle[i] {
			keep = append(keep, node)
		}
	}
	t.Logf("%d workers on %v go idle; Karpenter should consolidate those nodes onto %v", len(goIdle), nodes[len(keep):], keep)
	// Until those nodes are gone, a busy pod deleted fails the test at once.
	// Karpenter evaluates consolidation again when a node changes or a pod
	// is bound or goes, and otherwise every 5 minutes: a pod losing
	// karpenter.sh/do-not-disrupt is no such change, so when Karpenter found
	// nothing to do after the scale-in, the two nodes go only at the next of
	// those rounds.
	framework.Poll(t, 7*time.Minute, fmt.Sprintf("the taskset nodes to be %v", keep), func(context.Context) (bool, string) {
		events, _ := recorder.Events()
		for _, e := range events {
			_, wasBusy := busy[types.UID(e.uid)]
			_, idle := goIdle[types.UID(e.uid)]
			if wasBusy && !idle && (e.typ == watch.Deleted || e.deleting) {
				t.Fatalf("busy pod %s (UID %s) is being deleted", e.name, e.uid)
			}
		}
		got := workloadNodes(t, c, pool, "taskset")
		return slices.Equal(got, keep), fmt.Sprintf("nodes %v", got)
	})
	pods = waitWorkloadRunning(t, c, ns, gputaskv1.LabelTask, int(underutilizedReplicas))
	t.Logf("after consolidation: %d tasks on %v", len(pods), podsPerNode(pods))

	// The busy workers kept their pods; the idle ones were replaced on the
	// nodes left, one new pod for each pod deleted.
	final := map[types.UID]corev1.Pod{}
	for _, pod := range pods {
		final[pod.UID] = pod
		if !slices.Contains(keep, pod.Spec.NodeName) {
			t.Errorf("pod %s runs on %s, not on the nodes left %v", pod.Name, pod.Spec.NodeName, keep)
		}
	}
	for uid, pod := range busy {
		if _, idle := goIdle[uid]; idle {
			continue
		}
		got, ok := final[uid]
		if !ok {
			t.Errorf("busy pod %s (UID %s) on %s was disrupted", pod.Name, uid, pod.Spec.NodeName)
			continue
		}
		if got.Spec.NodeName != pod.Spec.NodeName || !gputaskv1.DisruptionProtected(&got) {
			t.Errorf("busy pod %s is on %s (was %s), protected %v", got.Name, got.Spec.NodeName, pod.Spec.NodeName, gputaskv1.DisruptionProtected(&got))
		}
	}
	events, err := recorder.Events()
	if err != nil {
		t.Error(err)
	}
	deleted, added := map[types.UID]string{}, map[types.UID]string{}
	for _, e := range events {
		uid := types.UID(e.uid)
		if e.typ == watch.Deleted || e.deleting {
			deleted[uid] = e.name
		}
		if _, before := busy[uid]; e.typ == watch.Added && !before {
			added[uid] = e.name
		}
	}
	if !slices.Equal(slices.Sorted(maps.Keys(deleted)), slices.Sorted(maps.Keys(goIdle))) {
		t.Errorf("pods deleted by the consolidation: %v; want exactly the %d that went idle: %v", deleted, len(goIdle), podNames(goIdle))
	}
	var replacements []string
	for uid, name := range added {
		if _, ok := final[uid]; !ok {
			t.Errorf("pod %s (UID %s) was created and is gone: one replacement per pod deleted, no more", name, uid)
		}
		replacements = append(replacements, name)
	}
	if len(added) != len(goIdle) {
		t.Errorf("%d pods created (%v) for the %d deleted, want as many", len(added), replacements, len(goIdle))
	}
	if extra := nodesSeen.since(nodes); len(extra) > 0 {
		t.Errorf("Karpenter launched nodes %v besides %v", extra, nodes)
	}
	t.Logf("nodes %v consolidated: %d pods deleted, %d created (%v), busy pods kept on %v", nodes[len(keep):], len(deleted), len(added), replacements, keep)
}

// markBusy sets or clears gputask.io/busy on a pod, as its worker does.
func markBusy(t *testing.T, c *framework.ControlPlane, ns, name string, busy bool) {
	t.Helper()
	value := `null`
	if busy {
		value = `"true"`
	}
	patch := []byte(`{"metadata":{"annotations":{"` + gputaskv1.AnnotationBusy + `":` + value + `}}}`)
	if _, err := c.Kube.CoreV1().Pods(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("marking pod %s busy=%v: %v", name, busy, err)
	}
}

// waitProtection waits until exactly the busy pods carry the marks that
// keep node autoscalers away, and their tasks carry gputask.io/pod-busy.
func waitProtection(t *testing.T, c *framework.ControlPlane, ns string, busy map[types.UID]corev1.Pod) {
	t.Helper()
	framework.Poll(t, waitTimeout, fmt.Sprintf("the %d busy pods, and only them, protected", len(busy)), func(ctx context.Context) (bool, string) {
		pods, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: gputaskv1.LabelTask})
		if err != nil {
			return false, err.Error()
		}
		tasks, err := c.GPUTask.GputaskV1().GPUTasks(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		podBusy := map[string]bool{}
		for _, task := range tasks.Items {
			podBusy[task.Name] = task.Annotations[gputaskv1.AnnotationPodBusy] == "true"
		}
		var wrong []string
		for _, pod := range pods.Items {
			_, want := busy[pod.UID]
			protected := pod.Annotations[gputaskv1.AnnotationDoNotDisrupt] == "true" && pod.Annotations[gputaskv1.AnnotationSafeToEvict] == "false"
			marked := pod.Annotations[gputaskv1.AnnotationDoNotDisrupt] != "" || pod.Annotations[gputaskv1.AnnotationSafeToEvict] != ""
			task := pod.Labels[gputaskv1.LabelTask]
			if want && (!protected || !podBusy[task]) || !want && (marked || podBusy[task]) {
				wrong = append(wrong, fmt.Sprintf("%s (busy %v, protected %v, task pod-busy %v)", pod.Name, want, protected, podBusy[task]))
			}
		}
		return len(wrong) == 0, strings.Join(wrong, "; ")
	})
}

func podNames(pods map[types.UID]corev1.Pod) []string {
	var names []string
	for _, pod := range pods {
		names = append(names, pod.Name)
	}
	sort.Strings(names)
	return names
}

// nodeRecorder records the name of every node of a pool from the moment it
// starts.
type nodeRecorder struct {
	mu    sync.Mutex
	names map[string]bool
}

func startNodeRecorder(t *testing.T, c *framework.ControlPlane, pool karpenterPool) *nodeRecorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.Kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: framework.KarpenterNodePoolLabel + "=" + pool.name})
	if err != nil {
		cancel()
		t.Fatalf("watching nodes: %v", err)
	}
	r := &nodeRecorder{names: map[string]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.Stop()
		for ev := range w.ResultChan() {
			if node, ok := ev.Object.(*corev1.Node); ok {
				r.mu.Lock()
				r.names[node.Name] = true
				r.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return r
}

// since returns the nodes recorded that are not in known.
func (r *nodeRecorder) since(known []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var extra []string
	for name := range r.names {
		if !slices.Contains(known, name) {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	return extra
}

// dumpOnFailure logs the pool's nodes and the pods and tasks of ns when the
// test fails, before the control plane stops.
func dumpOnFailure(t *testing.T, c *framework.ControlPlane, ns string, pool karpenterPool) {
	t.Cleanup(func() {
		if !t.Failed() || c.Stopped() {
			return
		}
		ctx := context.Background()
		nodes, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: framework.KarpenterNodePoolLabel + "=" + pool.name})
		if err != nil {
			t.Logf("listing nodes: %v", err)
		} else {
			for _, node := range nodes.Items {
				var taints []string
				for _, taint := range node.Spec.Taints {
					taints = append(taints, taint.ToString())
				}
				t.Logf("node %s workload=%s deleting=%v taints=%v", node.Name, node.Labels[karpenterWorkload], node.DeletionTimestamp != nil, taints)
			}
		}
		pods, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("listing pods: %v", err)
		} else {
			for _, pod := range pods.Items {
				a := pod.Annotations
				t.Logf("pod %s uid=%s node=%s phase=%s deleting=%v busy=%q do-not-disrupt=%q safe-to-evict=%q draining=%q",
					pod.Name, pod.UID, pod.Spec.NodeName, pod.Status.Phase, pod.DeletionTimestamp != nil,
					a[gputaskv1.AnnotationBusy], a[gputaskv1.AnnotationDoNotDisrupt], a[gputaskv1.AnnotationSafeToEvict], a[gputaskv1.AnnotationDraining])
			}
		}
		tasks, err := c.GPUTask.GputaskV1().GPUTasks(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("listing tasks: %v", err)
		} else {
			for _, task := range tasks.Items {
				t.Logf("task %s node=%s phase=%s deleting=%v annotations=%v", task.Name, task.Status.NodeName, task.Status.Phase, task.DeletionTimestamp != nil, task.Annotations)
			}
		}
	})
}
