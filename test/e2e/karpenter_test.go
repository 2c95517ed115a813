package e2e

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

// The Karpenter test loads the NodePool and the node class of
// artifacts/examples/karpenter, the ones docs/cost.md shows, and changes
// only what karpenterPoolOverrides says. Each subtest runs a NodePool of its
// own; the pool's nodes are 8-GPU nodes labelled with the workload they were
// launched for, and tainted so that only the test's pods land on them.
const (
	karpenterExamples = "../../artifacts/examples/karpenter"
	karpenterWorkload = "gputask.io/workload"
	// Each pod asks for a quarter of a node's CPU (64 cores less what
	// Karpenter reserves), so that four share a node whatever the
	// scheduler's scoring, and the 16 pods of a workload fill four nodes.
	karpenterPodCPU = "15"
	karpenterPodMem = "64Gi"
	// The consolidateAfter of the test's NodePools, for the example's
	// minutes.
	karpenterConsolidateAfter = "5s"
)

var (
	nodePoolGVR  = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodepools"}
	nodeClassGVR = schema.GroupVersionResource{Group: "karpenter.kwok.sh", Version: "v1alpha1", Resource: "kwoknodeclasses"}
)

// karpenterPool is what a subtest knows of its NodePool: its name, and the
// GPU model and taint that its nodes carry, as the example sets them.
type karpenterPool struct {
	name  string
	model string
	taint corev1.Taint
}

// TestKarpenter runs Karpenter, a node autoscaler, on the local control
// plane under both consolidation policies, one NodePool each, one after the
// other: WhenEmpty under a GPUTaskSet and a Deployment scaled in side by
// side, and WhenEmptyOrUnderutilized, Karpenter's default, under a set whose
// busy workers must stay where they are while its idle ones are packed.
func TestKarpenter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A plane of its own: it runs the Deployment and ReplicaSet controllers,
	// and Karpenter watches every pending pod of the cluster.
	c := framework.StartT(t, framework.Options{
		Scheduler: true, ControllerManager: true, Kwok: true,
		Controllers: append(slices.Clone(framework.DefaultControllers), "deployment-controller", "replicaset-controller"),
	})
	if _, err := c.StartKarpenter(ctx, []framework.KarpenterInstanceType{{Name: "gpu-8x", GPUs: 8, Price: 10}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartController(ctx, "--workers=4"); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	createKarpenterNodeClass(t, dyn)
	t.Run("WhenEmpty", func(t *testing.T) {
		testKarpenterWhenEmpty(t, c, createKarpenterPool(t, dyn, "gpu-when-empty", "WhenEmpty"))
	})
	t.Run("WhenEmptyOrUnderutilized", func(t *testing.T) {
		testKarpenterUnderutilized(t, c, createKarpenterPool(t, dyn, "gpu", ""))
	})
}

// testKarpenterWhenEmpty runs two workloads of 16 one-GPU pods on a
// WhenEmpty NodePool: a GPUTaskSet and a Deployment. Karpenter launches
// nodes for each (four: a node takes four of the pods); both are scaled in
// to 4; Karpenter removes the nodes left empty. The set's scale-in, which
// empties whole nodes, leaves one node up and disrupts none of the 4 tasks
// it keeps; the ReplicaSet's, which takes pods from the most crowded nodes
// first and, between nodes as crowded, in UID order, leaves more.
func testKarpenterWhenEmpty(t *testing.T, c *framework.ControlPlane, pool karpenterPool) {
	ctx := context.Background()
	ns := c.NamespaceT(t)
	dumpOnFailure(t, c, ns, pool)

	set := karpenterSet(pool, "taskset", 16)
	if _, err := c.GPUTask.GputaskV1().GPUTaskSets(ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	taskPod := waitFirstPod(t, c, ns, gputaskv1.LabelTask)
	deploy := karpenterDeployment(taskPod, pool)
	if _, err := c.Kube.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	setPods := waitWorkloadRunning(t, c, ns, gputaskv1.LabelTask, 16)
	deployPods := waitWorkloadRunning(t, c, ns, "app", 16)
	setNodes, deployNodes := workloadNodes(t, c, pool, "taskset"), workloadNodes(t, c, pool, "deployment")
	t.Logf("16 tasks on %d nodes %v; 16 Deployment pods on %d nodes %v", len(setNodes), podsPerNode(setPods), len(deployNodes), podsPerNode(deployPods))
	if len(setNodes) < 2 || len(deployNodes) < 2 {
		t.Fatalf("Karpenter launched %d nodes for the set and %d for the Deployment, want at least 2 each", len(setNodes), len(deployNodes))
	}
	before := map[string]types.UID{}
	for _, pod := range setPods {
		before[pod.Name] = pod.UID
	}

	// The ReplicaSet orders pods of equal rank by the log2 of their ready
	// (then creation) age, then by UID. Scaling in when every pod's age is in
	// one such bucket keeps the order of the nodes' start-up out of it; the
	// margin leaves the controller manager half a minute to act in, and the
	// Deployment, whose order depends on when it acts, goes first.
	from, until := oneAgeBucket(deployPods, 30*time.Second)
	t.Logf("scaling in at %s, %s from now; every age in one bucket until %s", from.Format(time.RFC3339), time.Until(from).Round(time.Second), until.Format(time.RFC3339))
	time.Sleep(time.Until(from))
	patch := []byte(`{"spec":{"replicas":4}}`)
	if _, err := c.Kube.AppsV1().Deployments(ns).Patch(ctx, deploy.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GPUTask.GputaskV1().GPUTaskSets(ns).Patch(ctx, set.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	checkScaledInBefore(t, c, ns, "app", 4, until)

	setPods = waitWorkloadRunning(t, c, ns, gputaskv1.LabelTask, 4)
	deployPods = waitWorkloadRunning(t, c, ns, "app", 4)
	wantSet, wantDeploy := podsPerNode(setPods), podsPerNode(deployPods)
	t.Logf("4 tasks left on %v; 4 Deployment pods left on %v", wantSet, wantDeploy)
	// Karpenter removes every node the scale-in emptied and no other.
	waitWorkloadNodes(t, c, pool, "taskset", slices.Sorted(maps.Keys(wantSet)))
	waitWorkloadNodes(t, c, pool, "deployment", slices.Sorted(maps.Keys(wantDeploy)))

	// The 4 tasks kept are the very pods that ran before: no task other
	// than the 12 removed lost its pod, to the scale-in or to Karpenter.
	setPods = waitWorkloadRunning(t, c, ns, gputaskv1.LabelTask, 4)
	for _, pod := range setPods {
		if uid, ok := before[pod.Name]; !ok || uid != pod.UID {
			t.Errorf("pod %s (UID %s) of a kept task is not the one that ran before the scale-in (UID %q)", pod.Name, pod.UID, uid)
		}
	}
	setNodes, deployNodes = workloadNodes(t, c, pool, "taskset"), workloadNodes(t, c, pool, "deployment")
	t.Logf("nodes left: %d for the set, %d for the Deployment", len(setNodes), len(deployNodes))
	if len(setNodes) != 1 {
		t.Errorf("the set's 4 tasks keep %d nodes up (%v), want 1", len(setNodes), setNodes)
	}
	if len(deployNodes) < 2 {
		t.Errorf("the Deployment's 4 pods keep %d nodes up (%v), want at least 2", len(deployNodes), deployNodes)
	}
}

// karpenterPlacement is the pod placement of a workload on the pool: the
// pool's taint tolerated, its nodes and the workload's selected.
func karpenterPlacement(pool karpenterPool, workload string) ([]corev1.Toleration, map[string]string) {
	return []corev1.Toleration{{Key: pool.taint.Key, Operator: corev1.TolerationOpEqual, Value: pool.taint.Value, Effect: pool.taint.Effect}},
		map[string]string{karpenterWorkload: workload, framework.KarpenterNodePoolLabel: pool.name}
}

// karpenterSet returns a GPUTaskSet of n one-GPU tasks of the pool's model
// on the pool's nodes for workload.
func karpenterSet(pool karpenterPool, workload string, n int32) *gputaskv1.GPUTaskSet {
	one, cpu, mem := intstr.FromInt32(1), intstr.FromString(karpenterPodCPU), intstr.FromString(karpenterPodMem)
	tolerations, selector := karpenterPlacement(pool, workload)
	return &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: poolName},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To(n),
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{
				GPU: pool.model, GPUAmount: &one, CPU: &cpu, Memory: &mem,
				Template: &gputaskv1.PodTemplate{Spec: corev1.PodSpec{NodeSelector: selector, Tolerations: tolerations}},
			}},
		},
	}
}

// readKarpenterExample returns the one object of a YAML file of
// artifacts/examples/karpenter.
func readKarpenterExample(t *testing.T, file string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(karpenterExamples, file))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &u.Object); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return u
}

// createKarpenterNodeClass creates the example's KWOKNodeClass and marks it
// Ready as its provider's controller would: the kwok provider has none, and
// Karpenter launches nothing for a NodePool whose class is not.
func createKarpenterNodeClass(t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	ctx := context.Background()
	u := readKarpenterExample(t, "nodeclass.yaml")
	created, err := dyn.Resource(nodeClassGVR).Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating KWOKNodeClass %s: %v", u.GetName(), err)
	}
	conditions := []any{map[string]any{
		"type": "Ready", "status": "True", "reason": "Ready", "message": "",
		"observedGeneration": created.GetGeneration(),
		"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
	}}
	if err := unstructured.SetNestedSlice(created.Object, conditions, "status", "conditions"); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(nodeClassGVR).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("marking KWOKNodeClass %s Ready: %v", u.GetName(), err)
	}
}

// karpenterPoolOverrides changes the example NodePool as the test needs it,
// and nothing else: its name; the label that has the control plane's kwok
// make its nodes Ready; a requirement on the workload label, which keeps a
// subtest's workloads on nodes of their own; consolidateAfter in seconds
// rather than minutes; and, when policy is not empty, the
// consolidationPolicy.
func karpenterPoolOverrides(t *testing.T, u *unstructured.Unstructured, name, policy string) {
	t.Helper()
	u.SetName(name)
	kwokKey, kwokValue, _ := strings.Cut(framework.KwokNodeLabel, "=")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("NodePool example: %v", err)
		}
	}
	must(unstructured.SetNestedField(u.Object, kwokValue, "spec", "template", "metadata", "labels", kwokKey))
	requirements, _, err := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "requirements")
	must(err)
	requirements = append(requirements, map[string]any{
		"key": karpenterWorkload, "operator": "In", "values": []any{"taskset", "deployment"},
	})
	must(unstructured.SetNestedSlice(u.Object, requirements, "spec", "template", "spec", "requirements"))
	must(unstructured.SetNestedField(u.Object, karpenterConsolidateAfter, "spec", "disruption", "consolidateAfter"))
	if policy != "" {
		must(unstructured.SetNestedField(u.Object, policy, "spec", "disruption", "consolidationPolicy"))
	}
}

// createKarpenterPool creates the example NodePool under name, with
// karpenterPoolOverrides, deleted when the test ends, and returns what the
// test needs of it.
func createKarpenterPool(t *testing.T, dyn dynamic.Interface, name, policy string) karpenterPool {
	t.Helper()
	u := readKarpenterExample(t, "nodepool.yaml")
	pool := karpenterPool{name: name}
	pool.model, _, _ = unstructured.NestedString(u.Object, "spec", "template", "metadata", "labels", framework.GPUProductLabel)
	taints, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "taints")
	if pool.model == "" || len(taints) != 1 {
		t.Fatalf("the example NodePool has GPU model %q and %d taints, want a model and one taint", pool.model, len(taints))
	}
	taint, _ := taints[0].(map[string]any)
	pool.taint = corev1.Taint{Key: fmt.Sprint(taint["key"]), Value: fmt.Sprint(taint["value"]), Effect: corev1.TaintEffect(fmt.Sprint(taint["effect"]))}
	karpenterPoolOverrides(t, u, name, policy)
	if _, err := dyn.Resource(nodePoolGVR).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating NodePool %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = dyn.Resource(nodePoolGVR).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return pool
}

// karpenterDeployment returns a Deployment of 16 pods that ask for what
// taskPod asks for, on the same NodePool, apart from the set's nodes.
func karpenterDeployment(taskPod *corev1.Pod, pool karpenterPool) *appsv1.Deployment {
	tolerations, selector := karpenterPlacement(pool, "deployment")
	selector[framework.GPUProductLabel] = pool.model
	main := taskPod.Spec.Containers[0]
	labels := map[string]string{"app": "workers"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "workers"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](16),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: selector,
					Tolerations:  tolerations,
					Containers:   []corev1.Container{{Name: "worker", Image: main.Image, Resources: main.Resources}},
				},
			},
		},
	}
}

// waitFirstPod waits for a pod in ns that has the label key and returns it.
func waitFirstPod(t *testing.T, c *framework.ControlPlane, ns, key string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	framework.Poll(t, waitTimeout, "a pod with label "+key, func(ctx context.Context) (bool, string) {
		list, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: key})
		if err != nil || len(list.Items) == 0 {
			return false, fmt.Sprint(err)
		}
		pod = &list.Items[0]
		return true, ""
	})
	return pod
}

// waitWorkloadRunning waits until ns holds exactly n pods with the label key,
// none being deleted, each Ready on a node, and returns them.
func waitWorkloadRunning(t *testing.T, c *framework.ControlPlane, ns, key string, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	framework.Poll(t, 3*time.Minute, fmt.Sprintf("%d Ready pods with label %s", n, key), func(ctx context.Context) (bool, string) {
		list, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: key})
		if err != nil {
			return false, err.Error()
		}
		pods = list.Items
		ready := 0
		for _, pod := range pods {
			if pod.DeletionTimestamp == nil && pod.Spec.NodeName != "" && podReady(&pod) {
				ready++
			}
		}
		return ready == n && len(pods) == n, fmt.Sprintf("%d pods, %d Ready on a node", len(pods), ready)
	})
	return pods
}

func podReady(pod *corev1.Pod) bool {
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// workloadNodes returns the names of the pool's nodes launched for
// workload, those being removed included.
func workloadNodes(t *testing.T, c *framework.ControlPlane, pool karpenterPool, workload string) []string {
	t.Helper()
	list, err := c.Kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{
		LabelSelector: framework.KarpenterNodePoolLabel + "=" + pool.name + "," + karpenterWorkload + "=" + workload,
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, node := range list.Items {
		names = append(names, node.Name)
	}
	sort.Strings(names)
	return names
}

// waitWorkloadNodes waits until the pool's nodes launched for workload are
// exactly want (sorted).
func waitWorkloadNodes(t *testing.T, c *framework.ControlPlane, pool karpenterPool, workload string, want []string) {
	t.Helper()
	framework.Poll(t, 4*time.Minute, fmt.Sprintf("the %s nodes to be %v", workload, want), func(context.Context) (bool, string) {
		got := workloadNodes(t, c, pool, workload)
		return slices.Equal(got, want), fmt.Sprintf("nodes %v", got)
	})
}

func podsPerNode(pods []corev1.Pod) map[string]int {
	per := map[string]int{}
	for _, pod := range pods {
		per[pod.Spec.NodeName]++
	}
	return per
}

// oneAgeBucket returns the times between which the ready and creation ages
// of all pods have the same floor(log2(nanoseconds)), as the ReplicaSet
// controller compares them: ages in [k, 2k) for the smallest power of two k
// larger than the spread of the times plus margin. They are at least
// nine tenths of margin apart.
func oneAgeBucket(pods []corev1.Pod, margin time.Duration) (from, until time.Time) {
	var oldest, newest time.Time
	for _, pod := range pods {
		times := []time.Time{pod.CreationTimestamp.Time}
		for _, cond := range pod.Status.Conditions {
			if cond.Type == corev1.PodReady {
				times = append(times, cond.LastTransitionTime.Time)
			}
		}
		for _, at := range times {
			if oldest.IsZero() || at.Before(oldest) {
				oldest = at
			}
			if at.After(newest) {
				newest = at
			}
		}
	}
	k := time.Duration(1)
	for k <= newest.Sub(oldest)+margin {
		k *= 2
	}
	return newest.Add(k + margin/10), oldest.Add(2 * k)
}

// checkScaledInBefore fails the test unless, by until, no more than n pods
// with the label key are left in ns that are not being deleted: otherwise
// the ages, not the ranking under test, may have chosen the victims.
func checkScaledInBefore(t *testing.T, c *framework.ControlPlane, ns, key string, n int, until time.Time) {
	t.Helper()
	framework.Poll(t, time.Minute, fmt.Sprintf("%d pods with label %s not being deleted", n, key), func(ctx context.Context) (bool, string) {
		list, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: key})
		if err != nil {
			return false, err.Error()
		}
		kept := 0
		for _, pod := range list.Items {
			if pod.DeletionTimestamp == nil {
				kept++
			}
		}
		return kept <= n, fmt.Sprintf("%d", kept)
	})
	if now := time.Now(); !now.Before(until) {
		t.Fatalf("the pods with label %s were down to %d only at %s, past %s, when their ages left one bucket", key, n, now.Format(time.RFC3339), until.Format(time.RFC3339))
	}
}

// TestOneAgeBucket checks that between the times oneAgeBucket returns,
// at least nine tenths of its margin apart, every ready and creation age of
// the pods has one floor(log2(nanoseconds)), for spreads on either side of
// a power of two.
func TestOneAgeBucket(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	margin := 30 * time.Second
	for _, spread := range []time.Duration{0, time.Second, 12 * time.Second, 13 * time.Second, 40 * time.Second, 98 * time.Second} {
		created := metav1.NewTime(base)
		ready := metav1.NewTime(base.Add(spread))
		pods := []corev1.Pod{
			{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: created}},
			{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: created}, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: ready},
			}}},
		}
		from, until := oneAgeBucket(pods, margin)
		if until.Sub(from) < margin*9/10 {
			t.Errorf("spread %s: one bucket for %s, want at least %s", spread, until.Sub(from), margin*9/10)
		}
		for _, now := range []time.Time{from, from.Add(until.Sub(from) / 2), until.Add(-time.Nanosecond)} {
			oldest, newest := math.Log2(float64(now.Sub(base))), math.Log2(float64(now.Sub(base.Add(spread))))
			if int(oldest) != int(newest) {
				t.Errorf("spread %s: at %s the ages %s and %s are in buckets %d and %d",
					spread, now.Sub(from), now.Sub(base), now.Sub(base.Add(spread)), int(oldest), int(newest))
			}
		}
		if oldest := math.Log2(float64(until.Sub(base))); int(oldest) == int(math.Log2(float64(until.Sub(base.Add(spread))))) && spread > 0 {
			t.Errorf("spread %s: at %s the ages are still in one bucket, want the oldest past it", spread, until)
		}
		if wait := from.Sub(base.Add(spread)); wait > 2*(spread+margin)+margin {
			t.Errorf("spread %s: waits %s after the last ready pod, want at most %s", spread, wait, 2*(spread+margin)+margin)
		}
	}
}
