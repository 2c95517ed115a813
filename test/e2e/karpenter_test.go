package e2e

import (
	"context"
	"fmt"
	"math"
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

// The Karpenter test's NodePool: 8-GPU nodes of their own model, labelled
// with the workload they were launched for and tainted so that only that
// test's pods land on them.
const (
	karpenterModel    = "K100"
	karpenterPool     = "gpu"
	karpenterTaint    = "gputask.io/autoscaled"
	karpenterWorkload = "gputask.io/workload"
	// Each pod asks for a quarter of a node's CPU (64 cores less what
	// Karpenter reserves), so that four share a node whatever the
	// scheduler's scoring, and the 16 pods of a workload fill four nodes.
	karpenterPodCPU = "15"
	karpenterPodMem = "64Gi"
)

var (
	nodePoolGVR  = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodepools"}
	nodeClassGVR = schema.GroupVersionResource{Group: "karpenter.kwok.sh", Version: "v1alpha1", Resource: "kwoknodeclasses"}
)

const karpenterObjects = `
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata:
  name: ` + karpenterPool + `
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: ` + karpenterPool + `
spec:
  template:
    metadata:
      labels:
        type: kwok
        nvidia.com/gpu.product: ` + karpenterModel + `
    spec:
      nodeClassRef:
        group: karpenter.kwok.sh
        kind: KWOKNodeClass
        name: ` + karpenterPool + `
      taints:
      - key: ` + karpenterTaint + `
        value: "true"
        effect: NoSchedule
      requirements:
      - key: ` + karpenterWorkload + `
        operator: In
        values: [taskset, deployment]
      expireAfter: Never
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: 5s
    budgets:
    - nodes: "100%"
`

// TestKarpenterScaleIn runs Karpenter, a node autoscaler, under two
// workloads of 16 one-GPU pods on the same NodePool: a GPUTaskSet and a
// Deployment. Karpenter launches nodes for each (four: a node takes four of
// the pods); both are scaled in to 4; Karpenter removes the nodes left
// empty. The set's scale-in, which empties whole nodes, leaves one node up
// and disrupts none of the 4 tasks it keeps; the ReplicaSet's, which takes
// pods from the most crowded nodes first and, between nodes as crowded, in
// UID order, leaves more.
func TestKarpenterScaleIn(t *testing.T) {
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
	createKarpenterPool(t, dyn)
	ns := c.NamespaceT(t)

	// The same pods twice: the set's template and the Deployment's.
	placement := func(workload string) ([]corev1.Toleration, map[string]string) {
		return []corev1.Toleration{{Key: karpenterTaint, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}},
			map[string]string{karpenterWorkload: workload}
	}
	one, cpu, mem := intstr.FromInt32(1), intstr.FromString(karpenterPodCPU), intstr.FromString(karpenterPodMem)
	tolerations, selector := placement("taskset")
	set := &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: poolName},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To[int32](16),
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{
				GPU: karpenterModel, GPUAmount: &one, CPU: &cpu, Memory: &mem,
				Template: &gputaskv1.PodTemplate{Spec: corev1.PodSpec{NodeSelector: selector, Tolerations: tolerations}},
			}},
		},
	}
	if _, err := c.GPUTask.GputaskV1().GPUTaskSets(ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	taskPod := waitFirstPod(t, c, ns, gputaskv1.LabelTask)
	deploy := karpenterDeployment(taskPod, placement)
	if _, err := c.Kube.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	setPods := waitWorkloadRunning(t, c, ns, gputaskv1.LabelTask, 16)
	deployPods := waitWorkloadRunning(t, c, ns, "app", 16)
	setNodes, deployNodes := workloadNodes(t, c, "taskset"), workloadNodes(t, c, "deployment")
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
	// one such bucket keeps the order of the nodes' start-up out of it.
	at := oneAgeBucketAt(deployPods, 5*time.Second)
	t.Logf("scaling in at %s, %s from now", at.Format(time.RFC3339), time.Until(at).Round(time.Second))
	time.Sleep(time.Until(at))
	patch := []byte(`{"spec":{"replicas":4}}`)
	if _, err := c.GPUTask.GputaskV1().GPUTaskSets(ns).Patch(ctx, poolName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kube.AppsV1().Deployments(ns).Patch(ctx, deploy.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	setPods = waitWorkloadRunning(t, c, ns, gputaskv1.LabelTask, 4)
	deployPods = waitWorkloadRunning(t, c, ns, "app", 4)
	wantSet, wantDeploy := podsPerNode(setPods), podsPerNode(deployPods)
	t.Logf("4 tasks left on %v; 4 Deployment pods left on %v", wantSet, wantDeploy)
	// Karpenter removes every node the scale-in emptied and no other.
	waitWorkloadNodes(t, c, "taskset", wantSet)
	waitWorkloadNodes(t, c, "deployment", wantDeploy)

	// The 4 tasks kept are the very pods that ran before: no task other
	// than the 12 removed lost its pod, to the scale-in or to Karpenter.
	setPods = waitWorkloadRunning(t, c, ns, gputaskv1.LabelTask, 4)
	for _, pod := range setPods {
		if uid, ok := before[pod.Name]; !ok || uid != pod.UID {
			t.Errorf("pod %s (UID %s) of a kept task is not the one that ran before the scale-in (UID %q)", pod.Name, pod.UID, uid)
		}
	}
	setNodes, deployNodes = workloadNodes(t, c, "taskset"), workloadNodes(t, c, "deployment")
	t.Logf("nodes left: %d for the set, %d for the Deployment", len(setNodes), len(deployNodes))
	if len(setNodes) != 1 {
		t.Errorf("the set's 4 tasks keep %d nodes up (%v), want 1", len(setNodes), setNodes)
	}
	if len(deployNodes) < 2 {
		t.Errorf("the Deployment's 4 pods keep %d nodes up (%v), want at least 2", len(deployNodes), deployNodes)
	}
}

// createKarpenterPool creates the KWOKNodeClass and the NodePool, and marks
// the node class Ready as its provider's controller would: the kwok provider
// has none, and Karpenter launches nothing for a NodePool whose class is not.
func createKarpenterPool(t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	ctx := context.Background()
	for _, doc := range strings.Split(karpenterObjects, "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		gvr := nodePoolGVR
		if u.GetKind() == "KWOKNodeClass" {
			gvr = nodeClassGVR
		}
		created, err := dyn.Resource(gvr).Create(ctx, u, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		t.Cleanup(func() {
			_ = dyn.Resource(gvr).Delete(context.Background(), u.GetName(), metav1.DeleteOptions{})
		})
		if gvr != nodeClassGVR {
			continue
		}
		conditions := []any{map[string]any{
			"type": "Ready", "status": "True", "reason": "Ready", "message": "",
			"observedGeneration": created.GetGeneration(),
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
		}}
		if err := unstructured.SetNestedSlice(created.Object, conditions, "status", "conditions"); err != nil {
			t.Fatal(err)
		}
		if _, err := dyn.Resource(gvr).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("marking KWOKNodeClass %s Ready: %v", u.GetName(), err)
		}
	}
}

// karpenterDeployment returns a Deployment of 16 pods that ask for what
// taskPod asks for, on the same NodePool, apart from the set's nodes.
func karpenterDeployment(taskPod *corev1.Pod, placement func(string) ([]corev1.Toleration, map[string]string)) *appsv1.Deployment {
	tolerations, selector := placement("deployment")
	selector[framework.GPUProductLabel] = karpenterModel
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

// workloadNodes returns the names of the NodePool's nodes launched for
// workload, those being removed included.
func workloadNodes(t *testing.T, c *framework.ControlPlane, workload string) []string {
	t.Helper()
	list, err := c.Kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{
		LabelSelector: framework.KarpenterNodePoolLabel + "=" + karpenterPool + "," + karpenterWorkload + "=" + workload,
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

// waitWorkloadNodes waits until the nodes launched for workload are exactly
// the keys of want.
func waitWorkloadNodes(t *testing.T, c *framework.ControlPlane, workload string, want map[string]int) {
	t.Helper()
	var keys []string
	for node := range want {
		keys = append(keys, node)
	}
	sort.Strings(keys)
	framework.Poll(t, 3*time.Minute, fmt.Sprintf("the %s nodes to be %v", workload, keys), func(context.Context) (bool, string) {
		got := workloadNodes(t, c, workload)
		return slices.Equal(got, keys), fmt.Sprintf("nodes %v", got)
	})
}

func podsPerNode(pods []corev1.Pod) map[string]int {
	per := map[string]int{}
	for _, pod := range pods {
		per[pod.Spec.NodeName]++
	}
	return per
}

// oneAgeBucketAt returns a time from which, for at least margin, the ready
// and creation ages of all pods have the same floor(log2(nanoseconds)), as
// the ReplicaSet controller compares them: ages in [k, 2k) for a power of
// two k larger than the spread of the times plus margin.
func oneAgeBucketAt(pods []corev1.Pod, margin time.Duration) time.Time {
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
	return newest.Add(k + margin/10)
}

// TestOneAgeBucketAt checks that from the time oneAgeBucketAt returns, and
// for its margin, every ready and creation age of the pods has one
// floor(log2(nanoseconds)), for spreads on either side of a power of two.
func TestOneAgeBucketAt(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	margin := 5 * time.Second
	for _, spread := range []time.Duration{0, time.Second, 12 * time.Second, 13 * time.Second, 40 * time.Second} {
		created := metav1.NewTime(base)
		ready := metav1.NewTime(base.Add(spread))
		pods := []corev1.Pod{
			{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: created}},
			{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: created}, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: ready},
			}}},
		}
		at := oneAgeBucketAt(pods, margin)
		for _, now := range []time.Time{at, at.Add(margin / 2), at.Add(margin * 9 / 10)} {
			oldest, newest := math.Log2(float64(now.Sub(base))), math.Log2(float64(now.Sub(base.Add(spread))))
			if int(oldest) != int(newest) {
				t.Errorf("spread %s: at %s the ages %s and %s are in buckets %d and %d",
					spread, now.Sub(at), now.Sub(base), now.Sub(base.Add(spread)), int(oldest), int(newest))
			}
		}
		if wait := at.Sub(base.Add(spread)); wait > 2*(spread+margin)+margin {
			t.Errorf("spread %s: waits %s after the last ready pod, want at most %s", spread, wait, 2*(spread+margin)+margin)
		}
	}
}
