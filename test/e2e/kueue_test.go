package e2e

// The controller under a real Kueue: the Kueue release that make tools
// builds, its pod integration on and its webhooks on 127.0.0.1, on a control
// plane of its own (Kueue's pod webhook sees every pod create, and one test
// stops it). Each test has its own namespace, GPU model, ResourceFlavor,
// ClusterQueue and LocalQueue, so that quotas and GPUs are never shared.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

const (
	// kueuePendingTimeout is the controller's --pending-timeout here: short,
	// so that a wait of a few of them shows that a pod is not replaced.
	kueuePendingTimeout = 2 * time.Second
	// localQueue is the LocalQueue of every test's namespace.
	localQueue     = "gpus"
	labelQueueName = "kueue.x-k8s.io/queue-name"
	kueueFinalizer = "kueue.x-k8s.io/managed"
)

var (
	workloadsGVR     = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}
	clusterQueuesGVR = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"}
	localQueuesGVR   = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "localqueues"}
	flavorsGVR       = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "resourceflavors"}
	priorityClassGVR = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloadpriorityclasses"}
)

// flavorToleration is the toleration the ResourceFlavor of the drift test
// adds to the pods it admits.
const flavorToleration = "example.com/reserved"

// kueueEnv is the control plane of the Kueue tests.
type kueueEnv struct {
	cp    *framework.ControlPlane
	kueue *framework.Kueue
	dyn   dynamic.Interface
}

// queue is one test's namespace, GPU model and Kueue queue.
type queue struct {
	env       *kueueEnv
	ns, model string
}

func TestKueue(t *testing.T) {
	// Its own control plane: it runs beside the package's other tests.
	t.Parallel()
	c := startCluster(t)
	k, err := c.StartKueue(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	c.StartControllerT(t, "--workers=4", "--pending-timeout="+kueuePendingTimeout.String())
	env := &kueueEnv{cp: c, kueue: k, dyn: dyn}

	// First, while no other test's pods are being deleted: it counts the
	// API server's pod DELETEs.
	t.Run("OthersFinalizerWaitedFor", env.testFinalizer)
	t.Run("WaitingForAdmissionIsNotUnschedulable", env.testWaiting)
	t.Run("AdmittedPodIsNotReplaced", env.testAdmittedNotPlaced)
	t.Run("FlavorMutationsAreNotDrift", env.testFlavorNotDrift)
	t.Run("WebhookDown", env.testWebhookDown)
	t.Run("QueueReasonOnTheTask", env.testQueueReason)
	t.Run("QuotaAwareCapacity", env.testQuotaCapacity)
	t.Run("EvictionCounted", env.testEviction)
	t.Run("QueuedGPUTaskSetExample", env.testExample)
}

// newQueue makes a namespace with nodes of a GPU model of its own, and a
// ResourceFlavor of those nodes, a ClusterQueue of gpuQuota GPUs of that
// flavor and the LocalQueue "gpus" in the namespace. flavor adds to the
// flavor's spec and cq to the ClusterQueue's.
func (e *kueueEnv) newQueue(t *testing.T, nodes, gpusPerNode, gpuQuota int, flavor, cq string) *queue {
	t.Helper()
	ns := e.cp.NamespaceT(t)
	q := &queue{env: e, ns: ns, model: "gpu-" + ns}
	for i := range nodes {
		e.cp.CreateGPUNodeT(t, fmt.Sprintf("%s-%d", ns, i), q.model, gpusPerNode)
	}
	e.apply(t, flavorsGVR, "", fmt.Sprintf(`
metadata: {name: %s}
spec:
  nodeLabels: {%s: %s}
%s`, ns, framework.GPUProductLabel, q.model, flavor))
	e.apply(t, clusterQueuesGVR, "", fmt.Sprintf(`
metadata: {name: %s}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: %s
      resources:
      - {name: cpu, nominalQuota: 1000}
      - {name: memory, nominalQuota: 10Ti}
      - {name: nvidia.com/gpu, nominalQuota: %d}
%s`, ns, ns, gpuQuota, cq))
	e.apply(t, localQueuesGVR, ns, fmt.Sprintf(`
metadata: {name: %s}
spec: {clusterQueue: %s}`, localQueue, ns))
	framework.Poll(t, waitTimeout, "LocalQueue "+ns+"/"+localQueue+" active", func(ctx context.Context) (bool, string) {
		lq, err := e.dyn.Resource(localQueuesGVR).Namespace(ns).Get(ctx, localQueue, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		conds, _, _ := unstructured.NestedSlice(lq.Object, "status", "conditions")
		active := slices.ContainsFunc(conds, func(c any) bool {
			m, _ := c.(map[string]any)
			return m["type"] == "Active" && m["status"] == string(metav1.ConditionTrue)
		})
		return active, fmt.Sprint(conds)
	})
	return q
}

// apply creates a Kueue object of gvr from YAML, deleted when the test ends
// if it is cluster-scoped.
func (e *kueueEnv) apply(t *testing.T, gvr schema.GroupVersionResource, ns, doc string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatalf("decoding %s: %v", doc, err)
	}
	u.SetAPIVersion(gvr.GroupVersion().String())
	kind := map[string]string{"resourceflavors": "ResourceFlavor", "clusterqueues": "ClusterQueue", "localqueues": "LocalQueue", "workloadpriorityclasses": "WorkloadPriorityClass"}[gvr.Resource]
	u.SetKind(kind)
	created, err := e.dyn.Resource(gvr).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating %s %s: %v", kind, u.GetName(), err)
	}
	if ns == "" {
		t.Cleanup(func() {
			_ = e.dyn.Resource(gvr).Delete(context.Background(), created.GetName(), metav1.DeleteOptions{})
		})
	}
}

// task creates a task of gpus GPUs in the queue and returns its name.
func (q *queue) task(t *testing.T, name string, gpus int32, edits ...func(*gputaskv1.GPUTaskSpec)) string {
	t.Helper()
	task := newTask(name, q.model, gpus, edits...)
	task.Labels = map[string]string{labelQueueName: localQueue}
	createTask(t, q.env.cp, q.ns, task)
	return name
}

// waitTask waits until the task satisfies ok.
func (q *queue) waitTask(t *testing.T, name, what string, ok func(*gputaskv1.GPUTask) bool) *gputaskv1.GPUTask {
	t.Helper()
	return waitTask(t, q.env.cp, q.ns, name, what, ok)
}

// workloads returns the Workloads of the namespace, by the name of the pod
// that owns each.
func (q *queue) workloads(t *testing.T) map[string][]*unstructured.Unstructured {
	t.Helper()
	list, err := q.env.dyn.Resource(workloadsGVR).Namespace(q.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byPod := map[string][]*unstructured.Unstructured{}
	for i := range list.Items {
		for _, o := range list.Items[i].GetOwnerReferences() {
			if o.Kind == "Pod" {
				byPod[o.Name] = append(byPod[o.Name], &list.Items[i])
			}
		}
	}
	return byPod
}

// checkPods checks that the recorder saw pods pods of the task, all but the
// last deleted, and that its status counts reschedules.
func checkPods(t *testing.T, rec *podRecorder, task *gputaskv1.GPUTask, pods int, reschedules int32) {
	t.Helper()
	events, err := rec.Events()
	if err != nil {
		t.Fatal(err)
	}
	uids, deleted := podUIDs(events, task.Name), deletions(events, task.Name)
	if len(uids) != pods || deleted != pods-1 || task.Status.Reschedules != reschedules {
		t.Errorf("task %s: pods %v, %d deleted, reschedules %d; want %d pods, %d deleted, %d reschedules",
			task.Name, uids, deleted, task.Status.Reschedules, pods, pods-1, reschedules)
	}
}

// podUIDs returns the UIDs of every pod of the task the recorder saw.
func podUIDs(events []podEvent, task string) []string {
	var uids []string
	for _, e := range events {
		if e.name == task && !slices.Contains(uids, e.uid) {
			uids = append(uids, e.uid)
		}
	}
	return uids
}

// deletions returns how many pods of the task the recorder saw deleting.
func deletions(events []podEvent, task string) int {
	var uids []string
	for _, e := range events {
		if e.name == task && (e.deleting || e.typ == "DELETED") && !slices.Contains(uids, e.uid) {
			uids = append(uids, e.uid)
		}
	}
	return len(uids)
}

func gated(pod *corev1.Pod) bool {
	return pod != nil && len(pod.Spec.SchedulingGates) > 0
}

func scheduledCondition(task *gputaskv1.GPUTask) *metav1.Condition {
	return meta.FindStatusCondition(task.Status.Conditions, gputaskv1.ConditionScheduled)
}

// hold waits for n pending timeouts of the controller: long enough for it
// to have replaced a pod it meant to replace.
func hold(n int) { time.Sleep(time.Duration(n) * kueuePendingTimeout) }

// testWaiting: item 1. A pod gated by Kueue for longer than the pending
// timeout is not replaced, and when Kueue admits it, it runs: one pod, one
// Workload, no deletion.
func (e *kueueEnv) testWaiting(t *testing.T) {
	q := e.newQueue(t, 1, 8, 2, "", "")
	rec := startPodRecorder(t, e.cp, q.ns, nil)
	q.task(t, "first", 2)
	q.waitTask(t, "first", "running", taskRunning)
	q.task(t, "second", 2)
	framework.Poll(t, waitTimeout, "pod second gated", func(ctx context.Context) (bool, string) {
		pod := taskPod(t, e.cp, q.ns, "second")
		return gated(pod), fmt.Sprint(pod != nil)
	})
	hold(5)
	if pod := taskPod(t, e.cp, q.ns, "second"); !gated(pod) {
		t.Fatalf("pod second is no longer gated while the quota is taken")
	}
	if err := e.cp.GPUTask.GputaskV1().GPUTasks(q.ns).Delete(context.Background(), "first", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	q.onePodOneWorkload(t, rec, q.waitTask(t, "second", "running", taskRunning))
}

// onePodOneWorkload checks that the task ran on the one pod it started
// with, which nobody deleted, admitted once: one Workload, no reschedule.
func (q *queue) onePodOneWorkload(t *testing.T, rec *podRecorder, task *gputaskv1.GPUTask) {
	t.Helper()
	checkPods(t, rec, task, 1, 0)
	if wls := q.workloads(t)[task.Name]; len(wls) != 1 {
		t.Errorf("pod %s has %d Workloads; want 1 (its admission kept)", task.Name, len(wls))
	}
}

// testAdmittedNotPlaced: item 2. Kueue admits a pod that no node can take
// yet (GPUs another pod holds, which Kueue does not count). The controller
// leaves it to Kueue for many pending timeouts; once the GPUs free, the
// same pod runs on the same admission.
func (e *kueueEnv) testAdmittedNotPlaced(t *testing.T) {
	q := e.newQueue(t, 1, 8, 8, "", "")
	blocker := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "blocker"},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{framework.GPUProductLabel: q.model},
			Tolerations:  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "c", Image: "blocker", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{framework.GPUResourceName: resource.MustParse("6")},
			}}},
		},
	}
	if _, err := e.cp.Kube.CoreV1().Pods(q.ns).Create(context.Background(), blocker, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, waitTimeout, "pod blocker running", func(ctx context.Context) (bool, string) {
		pod := taskPod(t, e.cp, q.ns, "blocker")
		return pod != nil && pod.Status.Phase == corev1.PodRunning, ""
	})
	rec := startPodRecorder(t, e.cp, q.ns, nil)
	q.task(t, "big", 4)
	q.waitTask(t, "big", "admitted and unschedulable", unschedulableForGPUs)
	hold(6)
	if err := e.cp.Kube.CoreV1().Pods(q.ns).Delete(context.Background(), "blocker", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	q.onePodOneWorkload(t, rec, q.waitTask(t, "big", "running", taskRunning))
}

// testFlavorNotDrift: item 3. The flavor's node selector and toleration,
// Kueue's gate, finalizer, labels and annotations, all added to the pod,
// are not drift: PodUpToDate stays True and the pod is kept.
func (e *kueueEnv) testFlavorNotDrift(t *testing.T) {
	q := e.newQueue(t, 1, 8, 8, fmt.Sprintf("  tolerations: [{key: %s, operator: Exists, effect: NoSchedule}]", flavorToleration), "")
	rec := startPodRecorder(t, e.cp, q.ns, nil)
	q.task(t, "flavored", 2)
	q.waitTask(t, "flavored", "running", taskRunning)
	pod := taskPod(t, e.cp, q.ns, "flavored")
	if !slices.ContainsFunc(pod.Spec.Tolerations, func(tol corev1.Toleration) bool { return tol.Key == flavorToleration }) ||
		pod.Spec.NodeSelector[framework.GPUProductLabel] != q.model || !slices.Contains(pod.Finalizers, kueueFinalizer) {
		t.Fatalf("pod without the flavor's toleration and node selector and Kueue's finalizer: %+v %v %v", pod.Spec.Tolerations, pod.Spec.NodeSelector, pod.Finalizers)
	}
	hold(3)
	task := q.waitTask(t, "flavored", "PodUpToDate True", func(task *gputaskv1.GPUTask) bool {
		return meta.IsStatusConditionTrue(task.Status.Conditions, gputaskv1.ConditionPodUpToDate)
	})
	checkPods(t, rec, task, 1, 0)
}

// testWebhookDown: item 4. While Kueue's pod webhook is down, the task's
// status says why its pod is missing; once Kueue is back, the pod is made
// (the retry delay is at most a minute) and the condition clears.
func (e *kueueEnv) testWebhookDown(t *testing.T) {
	q := e.newQueue(t, 1, 8, 8, "", "")
	e.kueue.Stop()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = e.kueue.Start(context.Background())
		}
	})
	q.task(t, "refused", 2)
	task := q.waitTask(t, "refused", "PodCreateFailed", func(task *gputaskv1.GPUTask) bool {
		return meta.IsStatusConditionTrue(task.Status.Conditions, gputaskv1.ConditionPodCreateFailed)
	})
	cond := meta.FindStatusCondition(task.Status.Conditions, gputaskv1.ConditionPodCreateFailed)
	if cond.Reason != "InternalError" || !strings.Contains(cond.Message, "mpod.kb.io") {
		t.Errorf("PodCreateFailed %s: %q; want InternalError naming Kueue's webhook", cond.Reason, cond.Message)
	}
	if err := e.kueue.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	restarted = true
	framework.Poll(t, 90*time.Second, "task refused running without PodCreateFailed", func(ctx context.Context) (bool, string) {
		task, err := e.cp.GPUTask.GputaskV1().GPUTasks(q.ns).Get(ctx, "refused", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return taskRunning(task) && meta.FindStatusCondition(task.Status.Conditions, gputaskv1.ConditionPodCreateFailed) == nil, string(task.Status.Phase)
	})
	if wls := q.workloads(t)["refused"]; len(wls) != 1 {
		t.Errorf("pod refused has %d Workloads; want 1", len(wls))
	}
}

// testQueueReason: item 5. A task whose pod waits for quota carries the
// queue's own reason in its Scheduled condition, and kubectl shows it.
func (e *kueueEnv) testQueueReason(t *testing.T) {
	q := e.newQueue(t, 1, 8, 2, "", "")
	q.task(t, "admitted", 2)
	q.waitTask(t, "admitted", "running", taskRunning)
	q.task(t, "waiting", 2)
	task := q.waitTask(t, "waiting", "Scheduled with Kueue's reason", func(task *gputaskv1.GPUTask) bool {
		c := scheduledCondition(task)
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "insufficient unused quota for nvidia.com/gpu in flavor "+q.ns)
	})
	cond := scheduledCondition(task)
	out := e.cp.KubectlT(t, "get", "gputasks", "-n", q.ns, "waiting", "--no-headers")
	if !strings.Contains(out, cond.Reason) || cond.Reason == "SchedulingGated" {
		t.Errorf("kubectl get gt shows %q; want the queue's reason %s (not SchedulingGated)", out, cond.Reason)
	}
	out = e.cp.KubectlT(t, "get", "gputasks", "-n", q.ns, "waiting", "-o", `jsonpath={.status.conditions[?(@.type=="Scheduled")].message}`)
	if !strings.Contains(out, "2 more needed") {
		t.Errorf("kubectl shows the Scheduled message %q; want Kueue's", out)
	}
}

// testQuotaCapacity: item 6. A capacity-aware set under a high load is
// capped at what the ClusterQueue admits, though the nodes hold more; a
// task over the quota counts as queued, not starting; and when the quota
// grows the set scales up at once.
func (e *kueueEnv) testQuotaCapacity(t *testing.T) {
	q := e.newQueue(t, 2, 8, 4, "", "")
	load := newLoadServer(t, 0.95)
	two := intstr.FromInt32(2)
	set := &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: poolName},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To[int32](1),
			Template: gputaskv1.GPUTaskTemplateSpec{
				Metadata: gputaskv1.TaskTemplateMeta{Labels: map[string]string{labelQueueName: localQueue}},
				Spec:     gputaskv1.GPUTaskSpec{GPU: q.model, GPUAmount: &two},
			},
			Autoscaling: &gputaskv1.AutoscalingSpec{
				MinReplicas:                  ptr.To[int32](1),
				MaxReplicas:                  6,
				Interval:                     &gputaskv1.Duration{Duration: poolInterval},
				Metrics:                      []gputaskv1.MetricSpec{{Name: "load", HTTP: &gputaskv1.HTTPSource{URL: load.URL()}}},
				Policy:                       gputaskv1.ScalingPolicy{Type: gputaskv1.StepPolicy},
				ScaleDownStabilizationWindow: &gputaskv1.Duration{},
				CapacityAware:                true,
			},
		},
	}
	sets := e.cp.GPUTask.GputaskV1().GPUTaskSets(q.ns)
	if _, err := sets.Create(context.Background(), set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	getSet := func(ctx context.Context) *gputaskv1.GPUTaskSet {
		s, err := sets.Get(ctx, poolName, metav1.GetOptions{})
		if err != nil {
			t.Logf("getting the set: %v", err)
			return nil
		}
		return s
	}
	quotaMsg := "quota of ClusterQueue " + q.ns
	framework.Poll(t, waitTimeout, "set capped at the quota", func(ctx context.Context) (bool, string) {
		s := getSet(ctx)
		return s != nil && ptr.Deref(s.Spec.Replicas, 0) == 2 && s.Status.RunningReplicas == 2 &&
			decisionReason(s) == "CapacityLimited" && strings.Contains(s.Status.LastDecision.Message, quotaMsg), describeStatus(s)
	})
	reads := load.Reads()
	framework.Poll(t, waitTimeout, "five more decisions", func(ctx context.Context) (bool, string) {
		return load.Reads() >= reads+5, ""
	})
	if s := getSet(context.Background()); ptr.Deref(s.Spec.Replicas, 0) != 2 {
		t.Fatalf("the set left its quota cap: %s", describeStatus(s))
	}
	// A floor above the quota: the third task waits for admission and is
	// queued, not starting.
	patch := func(p string) {
		t.Helper()
		if _, err := sets.Patch(context.Background(), poolName, types.MergePatchType, []byte(p), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	patch(`{"spec":{"autoscaling":{"minReplicas":3}}}`)
	framework.Poll(t, waitTimeout, "a queued task", func(ctx context.Context) (bool, string) {
		s := getSet(ctx)
		return s != nil && s.Status.QueuedReplicas == 1 && s.Status.StartingReplicas == 0 && s.Status.RunningReplicas == 2, describeStatus(s)
	})
	// The quota grows: the set scales to its maximum without waiting for
	// the queued task to start.
	if _, err := e.dyn.Resource(clusterQueuesGVR).Patch(context.Background(), q.ns, types.JSONPatchType,
		[]byte(`[{"op":"replace","path":"/spec/resourceGroups/0/flavors/0/resources/2/nominalQuota","value":12}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, waitTimeout, "set at its maximum, all running", func(ctx context.Context) (bool, string) {
		s := getSet(ctx)
		return s != nil && ptr.Deref(s.Spec.Replicas, 0) == 6 && s.Status.RunningReplicas == 6 && s.Status.QueuedReplicas == 0, describeStatus(s)
	})
}

// testEviction: item 7. Kueue preempts a task's pod for a workload of
// higher priority: the task counts a reschedule, an event names Kueue and
// its reason, and the replacement waits in the queue.
func (e *kueueEnv) testEviction(t *testing.T) {
	q := e.newQueue(t, 1, 8, 2, "", "  preemption: {withinClusterQueue: LowerPriority}")
	e.apply(t, priorityClassGVR, "", fmt.Sprintf("metadata: {name: %s-high}\nvalue: 1000", q.ns))
	rec := startPodRecorder(t, e.cp, q.ns, nil)
	q.task(t, "low", 2)
	q.waitTask(t, "low", "running", taskRunning)
	high := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "high", Labels: map[string]string{
			labelQueueName: localQueue, "kueue.x-k8s.io/priority-class": q.ns + "-high",
		}},
		Spec: corev1.PodSpec{
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "c", Image: "high", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{framework.GPUResourceName: resource.MustParse("2")},
			}}},
		},
	}
	if _, err := e.cp.Kube.CoreV1().Pods(q.ns).Create(context.Background(), high, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	q.waitTask(t, "low", "rescheduled and queued", func(task *gputaskv1.GPUTask) bool {
		return task.Status.Reschedules >= 1 && gated(taskPod(t, e.cp, q.ns, "low"))
	})
	framework.Poll(t, waitTimeout, "pod high running", func(ctx context.Context) (bool, string) {
		pod := taskPod(t, e.cp, q.ns, "high")
		return pod != nil && pod.Status.Phase == corev1.PodRunning, ""
	})
	var messages []string
	framework.Poll(t, waitTimeout, "an event naming Kueue", func(ctx context.Context) (bool, string) {
		list, err := e.cp.Kube.CoreV1().Events(q.ns).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"involvedObject.kind": "GPUTask", "involvedObject.name": "low", "type": corev1.EventTypeWarning,
		}.AsSelector().String()})
		if err != nil {
			return false, err.Error()
		}
		messages = messages[:0]
		for _, ev := range list.Items {
			messages = append(messages, ev.Reason+": "+ev.Message)
		}
		return slices.ContainsFunc(messages, func(m string) bool { return strings.Contains(m, "by Kueue") }), strings.Join(messages, "; ")
	})
	// The evicted pod and its replacement, queued. Kueue may admit the
	// replacement before the high pod, whose workload it then preempts
	// again: so the check is that every pod deleted is one reschedule
	// counted, once the task and its pods have settled.
	framework.Poll(t, waitTimeout, "every deleted pod counted once", func(ctx context.Context) (bool, string) {
		events, err := rec.Events()
		if err != nil {
			return false, err.Error()
		}
		task, err := e.cp.GPUTask.GputaskV1().GPUTasks(q.ns).Get(ctx, "low", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		uids, deleted := podUIDs(events, "low"), deletions(events, "low")
		pod := taskPod(t, e.cp, q.ns, "low")
		return task.Status.Reschedules >= 1 && len(uids) == int(task.Status.Reschedules)+1 && deleted == len(uids)-1 &&
				pod != nil && pod.DeletionTimestamp == nil && string(pod.UID) == uids[len(uids)-1],
			fmt.Sprintf("reschedules %d, pods %v, %d deleted; %s", task.Status.Reschedules, uids, deleted, describePodEvents(events, "low"))
	})
}

// describePodEvents lists the watch events of a task's pods, in order.
func describePodEvents(events []podEvent, task string) string {
	var b strings.Builder
	for _, e := range events {
		if e.name == task {
			fmt.Fprintf(&b, "[%s %s %s deleting=%t] ", e.typ, e.uid, e.phase, e.deleting)
		}
	}
	return b.String()
}

// testFinalizer: item 7. A task's pod that someone deletes while Kueue's
// finalizer holds it (Kueue is down, so nobody lifts the finalizer) is
// waited for, never deleted again; once Kueue is back and lifts it, the
// task gets one new pod. A pod deleted by someone else is replaced, not
// counted as a reschedule, as a ReplicaSet would.
func (e *kueueEnv) testFinalizer(t *testing.T) {
	q := e.newQueue(t, 1, 8, 8, "", "")
	q.task(t, "held", 2)
	q.waitTask(t, "held", "running", taskRunning)
	old := taskPod(t, e.cp, q.ns, "held")
	if !slices.Contains(old.Finalizers, kueueFinalizer) {
		t.Fatalf("pod held has finalizers %v; want Kueue's", old.Finalizers)
	}
	e.kueue.Stop()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = e.kueue.Start(context.Background())
		}
	})
	podDeletes := func(k framework.WriteKey) bool { return k.Verb == "DELETE" && k.Resource == "pods" }
	before, err := e.cp.WaitWritesQuiet(context.Background(), podDeletes, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	pods := e.cp.Kube.CoreV1().Pods(q.ns)
	if err := pods.Delete(context.Background(), "held", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, waitTimeout, "pod held terminating", func(ctx context.Context) (bool, string) {
		pod := taskPod(t, e.cp, q.ns, "held")
		return pod != nil && pod.DeletionTimestamp != nil, ""
	})
	hold(5)
	after, err := e.cp.ScrapeAPIWrites(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if deletes := after.Sub(before).Filter(podDeletes); deletes.Total() != 1 {
		t.Errorf("pod DELETEs while Kueue's finalizer held the pod: %s; want the test's one", deletes)
	}
	if pod := taskPod(t, e.cp, q.ns, "held"); pod == nil || pod.UID != old.UID {
		t.Fatalf("pod held is gone while Kueue's finalizer holds it")
	}
	if err := e.kueue.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	restarted = true
	q.waitTask(t, "held", "running on a new pod", func(task *gputaskv1.GPUTask) bool {
		pod := taskPod(t, e.cp, q.ns, "held")
		return taskRunning(task) && pod != nil && pod.UID != old.UID
	})
}

// testExample: the queued GPUTaskSet of docs/kueue.md, as
// artifacts/examples/kueue has it (Kueue's queues.yaml and
// gputaskset.yaml in the namespace team-a, on A100 nodes), with its load
// index served here at a high load: Kueue's 4 GPUs hold 2 of its 2-GPU
// tasks, and the set says so in the words of the example.
func (e *kueueEnv) testExample(t *testing.T) {
	const ns = "team-a"
	ctx := context.Background()
	if err := e.cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cp.DeleteNamespace(context.Background(), ns) })
	for i := range 2 {
		e.cp.CreateGPUNodeT(t, fmt.Sprintf("example-a100-%d", i), "A100", 8)
	}
	dir := filepath.Join(e.cp.Root, "artifacts", "examples", "kueue")
	raw, err := os.ReadFile(filepath.Join(dir, "queues.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	gvrs := map[string]schema.GroupVersionResource{"ResourceFlavor": flavorsGVR, "ClusterQueue": clusterQueuesGVR, "LocalQueue": localQueuesGVR}
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var obj struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		e.apply(t, gvrs[obj.Kind], obj.Metadata.Namespace, doc)
	}
	raw, err = os.ReadFile(filepath.Join(dir, "gputaskset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	set := &gputaskv1.GPUTaskSet{}
	if err := yaml.UnmarshalStrict(raw, set); err != nil {
		t.Fatal(err)
	}
	// The example's router is a Service of the cluster; here the load
	// index is served on 127.0.0.1.
	set.Spec.Autoscaling.Metrics[0].HTTP.URL = newLoadServer(t, 0.95).URL()
	sets := e.cp.GPUTask.GputaskV1().GPUTaskSets(ns)
	if _, err := sets.Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := "only 2 tasks fit the quota of ClusterQueue team-a (LocalQueue gpus: 0 nvidia.com/gpu not reserved)"
	framework.Poll(t, waitTimeout, "the example's set capped at its quota", func(ctx context.Context) (bool, string) {
		s, err := sets.Get(ctx, set.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return ptr.Deref(s.Spec.Replicas, 0) == 2 && s.Status.RunningReplicas == 2 && decisionReason(s) == "CapacityLimited" &&
			strings.Contains(s.Status.LastDecision.Message, want), describeStatus(s)
	})
	out := e.cp.KubectlT(t, "get", "gt", "-n", ns, "--no-headers")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || strings.Count(out, "Running") != 2 {
		t.Errorf("kubectl get gt -n team-a:\n%s\nwant the example's 2 tasks Running", out)
	}
}
