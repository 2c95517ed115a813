package main

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
	"github.com/gputask/gputask-controller/pkg/podspec"
)

var (
	testNow      = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	taskResource = gputaskv1.SchemeGroupVersion.WithResource("gputasks")
)

// fixture is the shared controllertest fixture with the GPUTask controller
// over it.
type fixture struct {
	*controllertest.Fixture

	opts Options
	c    *Controller
	// dra gives the controller the caches of ResourceClaimTemplates and
	// ResourceClaims, as where the API server serves DRA.
	dra bool
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{
		Fixture: controllertest.NewFixture(t, testNow),
		opts:    Options{RescheduleInterval: 10 * time.Minute, PendingTimeout: 5 * time.Minute},
	}
	f.OwnedStatus = ownedStatus
	return f
}

// newController builds the controller once and loads the caches.
func (f *fixture) newController(ctx context.Context) *Controller {
	if f.c != nil {
		return f.c
	}
	f.Start()
	opts := f.opts
	opts.Recorder, opts.Clock = f.Recorder, f.Clock
	if f.dra {
		opts.ClaimTemplates, opts.Claims = f.KubeInformers.Resource().V1().ResourceClaimTemplates(), f.KubeInformers.Resource().V1().ResourceClaims()
	}
	c := NewController(ctx, f.KubeClient, f.Client,
		f.Informers.Gputask().V1().GPUTasks(), f.KubeInformers.Core().V1().Pods(), f.KubeInformers.Core().V1().Nodes(), opts)
	c.tasksSynced, c.podsSynced, c.nodesSynced = controllertest.AlwaysReady, controllertest.AlwaysReady, controllertest.AlwaysReady
	f.SyncHandler = c.syncHandler
	f.Preload()
	f.c = c
	return c
}

// Run builds the controller if need be, syncs key once, checks that the
// sync succeeded, and checks the actions.
func (f *fixture) Run(ctx context.Context, key cache.ObjectName) {
	f.T.Helper()
	f.newController(ctx)
	f.Fixture.Run(ctx, key)
}

// RunExpectError is Run for a sync that must fail.
func (f *fixture) RunExpectError(ctx context.Context, key cache.ObjectName) {
	f.T.Helper()
	f.newController(ctx)
	f.Fixture.RunExpectError(ctx, key)
}

// expectCreatePod expects the create of pod, stamped with its hash as the
// controller stamps every pod it makes.
func (f *fixture) expectCreatePod(pod *corev1.Pod) {
	pod = pod.DeepCopy()
	podspec.Stamp(pod)
	f.KubeActions = append(f.KubeActions, core.NewCreateAction(podsResource, pod.Namespace, pod))
}

func (f *fixture) expectDeletePod(pod *corev1.Pod) {
	f.KubeActions = append(f.KubeActions, core.NewDeleteActionWithOptions(podsResource, pod.Namespace, pod.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(pod.UID)}}))
}

// expectDeletePodNow is expectDeletePod without a grace period, for a pod
// whose node is gone.
func (f *fixture) expectDeletePodNow(pod *corev1.Pod) {
	f.KubeActions = append(f.KubeActions, core.NewDeleteActionWithOptions(podsResource, pod.Namespace, pod.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(pod.UID)}, GracePeriodSeconds: ptr.To[int64](0)}))
}

// ownedStatus is the apply the GPUTask controller's field manager owns
// for task: the whole status, which it alone writes, with the empty
// fields left out (as the typed status's JSON leaves them out).
func ownedStatus(obj runtime.Object) any {
	task := obj.(*gputaskv1.GPUTask)
	return map[string]any{
		"apiVersion": gputaskv1.SchemeGroupVersion.String(), "kind": "GPUTask",
		"metadata": map[string]any{"name": task.Name, "namespace": task.Namespace},
		"status":   task.Status,
	}
}

// renderSpec is the spec of the task most tests use. expectedPod spells out
// the pod it must produce.
var renderSpec = gputaskv1.GPUTaskSpec{
	GPU:       "NVIDIA-A100-SXM4-80GB",
	GPUAmount: ptr.To(intstr.FromString("2")),
	CPU:       ptr.To(intstr.FromInt32(4)),
	Memory:    ptr.To(intstr.FromString("16Gi")),
	Priority:  "gpu-high",
	Command:   []string{"render"},
	Args:      []string{"--frames=100"},
	Env:       []corev1.EnvVar{{Name: "MODE", Value: "fast"}},
}

// newTask is a task labelled app=render with renderSpec, changed by opts.
func newTask(name string, opts ...controllertest.TaskOption) *gputaskv1.GPUTask {
	base := []controllertest.TaskOption{controllertest.Labels(map[string]string{"app": "render"}), controllertest.TaskSpec(renderSpec)}
	return controllertest.Task(name, append(base, opts...)...)
}

// addTaskWithPod preloads task with its pod in podPhase on node, and a
// Ready node unless the cache has that node already. The task's status is
// the one the controller writes for that pod, so nothing is left to write.
// It returns the task and the pod as the caches hold them.
func (f *fixture) addTaskWithPod(task *gputaskv1.GPUTask, podPhase corev1.PodPhase, node string) (*gputaskv1.GPUTask, *corev1.Pod) {
	pod := podWith(task, podPhase, node)
	phase := map[corev1.PodPhase]gputaskv1.GPUTaskPhase{
		corev1.PodRunning: gputaskv1.GPUTaskRunning, corev1.PodFailed: gputaskv1.GPUTaskFailed, corev1.PodSucceeded: gputaskv1.GPUTaskSucceeded,
	}[podPhase]
	task = withStatus(task, phase, node)
	f.Add(task)
	f.Add(pod)
	if node != "" && !slices.ContainsFunc(f.Cached, func(o runtime.Object) bool {
		n, ok := o.(*corev1.Node)
		return ok && n.Name == node
	}) {
		f.Add(controllertest.Node(node))
	}
	return task, pod
}

// expectedPod is the pod newTask(name) must produce, written out by hand so
// that the test does not trust the builder it checks.
func expectedPod(task *gputaskv1.GPUTask) *corev1.Pod {
	q := resource.MustParse
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: task.Name, Namespace: task.Namespace,
			Labels: map[string]string{"app": "render", gputaskv1.LabelTask: task.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "gputask.io/v1", Kind: "GPUTask", Name: task.Name, UID: task.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:     corev1.RestartPolicyNever,
			PriorityClassName: "gpu-high",
			NodeSelector:      map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
			Containers: []corev1.Container{{
				Name: "task", Image: "busybox:1.36",
				Command: []string{"render"}, Args: []string{"--frames=100"},
				Env: []corev1.EnvVar{{Name: "MODE", Value: "fast"}},
				Resources: corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{"nvidia.com/gpu": q("2"), corev1.ResourceCPU: q("4"), corev1.ResourceMemory: q("16Gi")},
					Requests: corev1.ResourceList{corev1.ResourceCPU: q("4"), corev1.ResourceMemory: q("16Gi")},
				},
			}},
		},
	}
}

// podWith returns the task's pod as the API would hold it, in the given phase.
func podWith(task *gputaskv1.GPUTask, phase corev1.PodPhase, node string) *corev1.Pod {
	p := expectedPod(task)
	p.UID = types.UID("pod-uid-" + task.Name)
	p.ResourceVersion = "1"
	p.CreationTimestamp = metav1.NewTime(testNow.Add(-time.Hour))
	p.Spec.NodeName = node
	p.Status.Phase = phase
	if node != "" {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue})
	}
	ready := corev1.ConditionFalse
	if phase == corev1.PodRunning {
		ready = corev1.ConditionTrue
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: ready})
	return p
}

func cond(t string, s metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(testNow)}
}

// withStatus returns a copy of task with the status the controller writes
// for a pod in phase on node.
func withStatus(task *gputaskv1.GPUTask, phase gputaskv1.GPUTaskPhase, node string) *gputaskv1.GPUTask {
	t := task.DeepCopy()
	scheduled := cond(gputaskv1.ConditionScheduled, metav1.ConditionFalse, "PodNotScheduled", "")
	if node != "" {
		scheduled = cond(gputaskv1.ConditionScheduled, metav1.ConditionTrue, "PodScheduled", "")
	}
	ready := cond(gputaskv1.ConditionReady, metav1.ConditionFalse, "PodNotReady", "")
	if phase == gputaskv1.GPUTaskRunning {
		ready = cond(gputaskv1.ConditionReady, metav1.ConditionTrue, "PodReady", "")
	}
	t.Status = gputaskv1.GPUTaskStatus{
		Phase: phase, PodName: task.Name, NodeName: node, ObservedGeneration: 1,
		Reschedules: task.Status.Reschedules, LastRescheduleTime: task.Status.LastRescheduleTime,
		Conditions: []metav1.Condition{
			cond(gputaskv1.ConditionSpecValid, metav1.ConditionTrue, "Valid", ""),
			cond(gputaskv1.ConditionPodOwned, metav1.ConditionTrue, "PodControlled", ""),
			scheduled,
			ready,
			cond(gputaskv1.ConditionPodUpToDate, metav1.ConditionTrue, "PodMatchesSpec", ""),
		},
	}
	return t
}

// replaced is task after its pod was replaced: one more reschedule, at
// testNow, and the new pod Pending. Conditions that did not flip keep their
// transition time.
func replaced(task *gputaskv1.GPUTask) *gputaskv1.GPUTask {
	want := task.DeepCopy()
	want.Status.Reschedules++
	want.Status.LastRescheduleTime = ptr.To(metav1.NewTime(testNow))
	want = withStatus(want, gputaskv1.GPUTaskPending, "")
	for i := range want.Status.Conditions {
		if old := meta.FindStatusCondition(task.Status.Conditions, want.Status.Conditions[i].Type); old != nil && old.Status == want.Status.Conditions[i].Status {
			want.Status.Conditions[i].LastTransitionTime = old.LastTransitionTime
		}
	}
	return want
}

// conflicted is task with the status the controller writes when a pod it
// does not control holds the task's pod name.
func conflicted(task *gputaskv1.GPUTask, msg string) *gputaskv1.GPUTask {
	want := task.DeepCopy()
	want.Status = gputaskv1.GPUTaskStatus{
		Phase: gputaskv1.GPUTaskPending, ObservedGeneration: 1,
		Conditions: []metav1.Condition{
			cond(gputaskv1.ConditionSpecValid, metav1.ConditionTrue, "Valid", ""),
			cond(gputaskv1.ConditionPodOwned, metav1.ConditionFalse, "PodConflict", msg),
			cond(gputaskv1.ConditionScheduled, metav1.ConditionFalse, "PodConflict", msg),
			cond(gputaskv1.ConditionReady, metav1.ConditionFalse, "PodConflict", msg),
		},
	}
	return want
}

// findCond is meta.FindStatusCondition under the name older tests use.
func findCond(conds []metav1.Condition, t string) *metav1.Condition {
	return meta.FindStatusCondition(conds, t)
}

func key(task *gputaskv1.GPUTask) cache.ObjectName { return cache.MetaObjectToName(task) }
func TestCreatesPod(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task := newTask("render")
	f.Add(task)

	// The status waits for the pod's add event: the create's worker moves on.
	f.expectCreatePod(expectedPod(task))
	f.Run(ctx, key(task))
	f.ExpectEvents()
}

func TestCreatesPodWithDefaults(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	f.opts.GPUResourceName = "amd.com/gpu"
	f.opts.DefaultImage = "registry.local/worker:1"
	task := newTask("plain")
	task.Spec = gputaskv1.GPUTaskSpec{}
	task.Labels = nil
	f.Add(task)

	want := expectedPod(task)
	want.Labels = map[string]string{gputaskv1.LabelTask: "plain"}
	want.Spec.NodeSelector, want.Spec.PriorityClassName = nil, ""
	c := &want.Spec.Containers[0]
	c.Image, c.Command, c.Args, c.Env = "registry.local/worker:1", nil, nil, nil
	c.Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{"amd.com/gpu": resource.MustParse("1")}}
	f.expectCreatePod(want)
	f.Run(ctx, key(task))
}

func TestNoWritesWhenInSync(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task, _ := f.addTaskWithPod(newTask("render"), corev1.PodRunning, "gpu-1")

	f.Run(ctx, key(task))
	f.ExpectEvents()
}

func TestLeavesForeignPodAlone(t *testing.T) {
	tests := []struct {
		name  string
		owner []metav1.OwnerReference
	}{
		{"no owner", nil},
		{"owned by a Job", []metav1.OwnerReference{{
			APIVersion: "batch/v1", Kind: "Job", Name: "render", UID: "uid-render", Controller: ptr.To(true),
		}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			task := newTask("render")
			f.Add(task)
			foreign := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
				Name: "render", Namespace: task.Namespace, UID: "foreign", OwnerReferences: tc.owner,
				Labels: map[string]string{gputaskv1.LabelTask: "render"},
			}, Status: corev1.PodStatus{Phase: corev1.PodRunning}, Spec: corev1.PodSpec{NodeName: "gpu-1"}}
			f.Add(foreign)

			msg := "pod default/render exists and is not controlled by this GPUTask"
			want := conflicted(task, msg)
			f.ExpectApplyStatus(want)
			f.Run(ctx, key(task))
			f.ExpectEvents("Warning PodConflict " + msg)

			// Once reported, the conflict costs neither writes nor events.
			f.Update(want)
			f.Run(ctx, key(task))
			f.ExpectEvents()
		})
	}
}

func TestCreateConflictWithUnlabelledPod(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task := newTask("render")
	f.Add(task)
	// Not in the filtered pod cache: it lacks the gputask.io/task label.
	f.Objects = append(f.Objects, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "render", Namespace: task.Namespace, UID: "foreign"}})

	f.expectCreatePod(expectedPod(task))
	f.KubeActions = append(f.KubeActions, core.NewGetAction(podsResource, task.Namespace, "render"))
	f.ExpectApplyStatus(conflicted(task, "pod default/render exists and is not controlled by this GPUTask"))
	f.Run(ctx, key(task))
	f.ExpectEvents("Warning PodConflict")
	if !f.c.expectations.Satisfied(key(task).String()) {
		t.Error("a failed create must not leave an expectation behind")
	}
}

func TestDeletedTask(t *testing.T) {
	tests := []struct {
		name       string
		podOwner   types.UID
		wantDelete bool
	}{
		{"deletes the pod it controlled", "uid-render", true},
		{"keeps a pod of another incarnation", "uid-older", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			task := newTask("render")
			pod := podWith(task, corev1.PodRunning, "gpu-1")
			pod.OwnerReferences[0].UID = tc.podOwner
			f.Add(pod)
			c := f.newController(ctx)

			// The task is gone from the cache; the informer hands over a tombstone.
			c.deleteTask(klog.Background(), cache.DeletedFinalStateUnknown{Key: "default/render", Obj: task})
			if tc.wantDelete {
				f.expectDeletePod(pod)
			}
			f.Run(ctx, key(task))
			if tc.wantDelete {
				f.Remove(pod)
			} else {
				// The other incarnation is a successor the cache does not
				// show yet; the API server does.
				successor := task.DeepCopy()
				successor.UID = tc.podOwner
				if err := f.Client.Tracker().Add(successor); err != nil {
					t.Fatal(err)
				}
				f.Actions = append(f.Actions, core.NewGetAction(taskResource, task.Namespace, task.Name))
			}
			// The UID is used up: a second sync deletes nothing.
			f.Run(ctx, key(task))
		})
	}
}

func TestDeletedTaskLeavesForeignPod(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task := newTask("render")
	f.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "render", Namespace: task.Namespace, UID: "foreign"}})
	c := f.newController(ctx)
	c.deleteTask(klog.Background(), task)
	f.Run(ctx, key(task))
}

func TestInvalidSpec(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*gputaskv1.GPUTaskSpec)
		wantMsg string
	}{
		{"bad cpu quantity", func(s *gputaskv1.GPUTaskSpec) { s.CPU = ptr.To(intstr.FromString("lots")) },
			`spec.cpu: "lots" is not a quantity: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'`},
		{"gpu-amount 0", func(s *gputaskv1.GPUTaskSpec) { s.GPUAmount = ptr.To(intstr.FromInt32(0)) },
			"spec.gpu-amount: 0 is not an integer from 1 to 1024"},
		{"gpu-amount abc", func(s *gputaskv1.GPUTaskSpec) { s.GPUAmount = ptr.To(intstr.FromString("abc")) },
			`spec.gpu-amount: "abc" is not an integer from 1 to 1024`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			task := newTask("render")
			tc.mutate(&task.Spec)
			f.Add(task)

			want := task.DeepCopy()
			want.Status = gputaskv1.GPUTaskStatus{
				Phase: gputaskv1.GPUTaskPending, ObservedGeneration: 1,
				Conditions: []metav1.Condition{
					cond(gputaskv1.ConditionSpecValid, metav1.ConditionFalse, "InvalidSpec", tc.wantMsg),
					cond(gputaskv1.ConditionPodOwned, metav1.ConditionUnknown, "PodNotCreated", ""),
					cond(gputaskv1.ConditionScheduled, metav1.ConditionFalse, "PodNotCreated", ""),
					cond(gputaskv1.ConditionReady, metav1.ConditionFalse, "PodNotCreated", ""),
				},
			}
			f.ExpectApplyStatus(want)
			f.Run(ctx, key(task)) // no error: a retry cannot fix the spec
			f.ExpectEvents("Warning InvalidSpec " + tc.wantMsg)

			f.Update(want)
			f.Run(ctx, key(task))
			f.ExpectEvents()
		})
	}
}

func TestNoDuplicateCreateWhileExpectationPending(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task := newTask("render")
	f.Add(task)

	f.expectCreatePod(expectedPod(task))
	f.Run(ctx, key(task))

	// The pod's add event has not arrived yet: a stale cache must not cause
	// a second create.
	f.Run(ctx, key(task))

	// The informer delivers the pod; the expectation is met.
	pod := podWith(task, corev1.PodPending, "")
	f.c.addPod(klog.Background(), pod)
	if !f.c.expectations.Satisfied(key(task).String()) {
		t.Fatal("expectation not met after the pod was observed")
	}
}

func TestExpectationExpires(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task := newTask("render")
	f.Add(task)
	c := f.newController(ctx)
	c.expectations.ExpectCreations(key(task).String(), 1)
	f.Run(ctx, key(task)) // pending: nothing happens

	// Expired expectations no longer block.
	c.expectations.Delete(key(task).String())
	f.expectCreatePod(expectedPod(task))
	f.Run(ctx, key(task))
}

func TestHandleObject(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task := newTask("render")
	f.Add(task)
	other := newTask("other")
	f.Add(other)
	c := f.newController(ctx)

	drain := func() []cache.ObjectName {
		var keys []cache.ObjectName
		for c.workqueue.Len() > 0 {
			k, _ := c.workqueue.Get()
			c.workqueue.Done(k)
			keys = append(keys, k)
		}
		return keys
	}

	owned := podWith(task, corev1.PodRunning, "gpu-1")
	c.deletePod(klog.Background(), cache.DeletedFinalStateUnknown{Key: "default/render", Obj: owned})
	if got := drain(); len(got) != 1 || got[0] != key(task) {
		t.Errorf("tombstone of owned pod enqueued %v, want [%v]", got, key(task))
	}

	// A pod that claims the task by name but with another UID is not owned,
	// and must not count down the task's expectation.
	stale := owned.DeepCopy()
	stale.Name = "stray"
	stale.OwnerReferences[0].Name = "other"
	c.expectations.ExpectCreations(key(other).String(), 1)
	c.addPod(klog.Background(), stale)
	// Its own name is synced, to find out whether it is an orphan.
	if got := drain(); len(got) != 1 || got[0] != cache.MetaObjectToName(stale) {
		t.Errorf("pod with a stale owner UID enqueued %v, want [default/stray]", got)
	}
	if c.expectations.Satisfied(key(other).String()) {
		t.Error("a pod with another UID met the expectation")
	}

	// A node going NotReady enqueues the tasks of its pods.
	f.Update(owned)
	oldNode, newNode := controllertest.Node("gpu-1"), controllertest.Node("gpu-1")
	newNode.Status.Conditions[0].Status = corev1.ConditionFalse
	c.updateNode(klog.Background(), oldNode, oldNode.DeepCopy())
	if got := drain(); len(got) != 0 {
		t.Errorf("a heartbeat enqueued %v", got)
	}
	c.updateNode(klog.Background(), oldNode, newNode)
	if got := drain(); len(got) != 1 || got[0] != key(task) {
		t.Errorf("node NotReady enqueued %v, want [%v]", got, key(task))
	}
	c.deleteNode(klog.Background(), cache.DeletedFinalStateUnknown{Key: "gpu-1", Obj: newNode})
	if got := drain(); len(got) != 1 || got[0] != key(task) {
		t.Errorf("node delete enqueued %v, want [%v]", got, key(task))
	}
}

// TestRun drives the controller through its informers and queue, as main
// does, and checks that Run returns once the context is cancelled.
func TestRun(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	f := newFixture(t)
	f.Objects = append(f.Objects, newTask("render"))
	f.Start()
	inf, kinf := f.Informers, f.KubeInformers
	c := NewController(ctx, f.KubeClient, f.Client, inf.Gputask().V1().GPUTasks(), kinf.Core().V1().Pods(), kinf.Core().V1().Nodes(), Options{})
	inf.Start(ctx.Done())
	kinf.Start(ctx.Done())

	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 2) }()

	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := f.KubeClient.CoreV1().Pods("default").Get(ctx, "render", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("pod was not created: %v", err)
	}
	cancel()
	controllertest.ExpectStopped(t, done, "Run()")
	inf.Shutdown()
	kinf.Shutdown()
}

func TestCreateErrorIsRetried(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task := newTask("render")
	f.Add(task)
	c := f.newController(ctx)
	f.KubeClient.PrependReactor("create", "pods", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInternalError(errors.New("etcd timeout"))
	})

	failed := podCreateFailed(task, "InternalError", "Internal error occurred: etcd timeout")
	f.expectCreatePod(expectedPod(task))
	f.ExpectApplyStatus(failed)
	f.RunExpectError(ctx, key(task))
	f.ExpectEvents("Warning FailedCreate")
	if !c.expectations.Satisfied(key(task).String()) {
		t.Error("a failed create must not leave an expectation behind")
	}
}

// TestOrphanedTaskKeepsPod: `kubectl delete --cascade=orphan` must leave the
// pod running even if the pod cache still shows the owner reference.
func TestOrphanedTaskKeepsPod(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task := newTask("render")
	pod := podWith(task, corev1.PodRunning, "gpu-1")
	f.Cached = append(f.Cached, pod)
	// The garbage collector removed the owner reference before it let the
	// task go; the cache has not seen that yet.
	orphaned := pod.DeepCopy()
	orphaned.OwnerReferences = nil
	f.Objects = append(f.Objects, orphaned)
	c := f.newController(ctx)

	orphaning := task.DeepCopy()
	orphaning.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
	orphaning.Finalizers = []string{metav1.FinalizerOrphanDependents}
	c.updateTask(klog.Background(), task, orphaning)
	c.deleteTask(klog.Background(), task)
	f.Actions = append(f.Actions, core.NewGetAction(taskResource, task.Namespace, task.Name))
	f.KubeActions = append(f.KubeActions, core.NewGetAction(podsResource, task.Namespace, task.Name))
	f.Run(ctx, key(task)) // no delete
}

// TestControllersShareThePodInformer: two GPUTask controllers built on the
// same informers (as after a restart within one process) do not fail on the
// node index the first one added.
func TestControllersShareThePodInformer(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	f.Start()
	for range 2 {
		NewController(ctx, f.KubeClient, f.Client, f.Informers.Gputask().V1().GPUTasks(),
			f.KubeInformers.Core().V1().Pods(), f.KubeInformers.Core().V1().Nodes(), Options{})
	}
}

// TestCarriesScaleInMarks: only this controller writes pods. The set's
// draining mark on a task reaches its pod, where the worker reads it; the
// worker's busy mark on its pod is mirrored on the task as
// gputask.io/pod-busy, where the set reads it; a busy worker's pod carries
// the marks that keep Karpenter and the cluster autoscaler from evicting
// it, and loses them once idle. The pod's marks go in one patch, and marks
// in step cost no write.
func TestCarriesScaleInMarks(t *testing.T) {
	drainOn := `{"metadata":{"annotations":{"gputask.io/draining":"true"}}}`
	drainOff := `{"metadata":{"annotations":{"gputask.io/draining":null}}}`
	busyOn := `{"metadata":{"annotations":{"gputask.io/pod-busy":"true"}}}`
	busyOff := `{"metadata":{"annotations":{"gputask.io/pod-busy":null}}}`
	protectOn := `{"metadata":{"annotations":{"cluster-autoscaler.kubernetes.io/safe-to-evict":"false","karpenter.sh/do-not-disrupt":"true"}}}`
	protectOff := `{"metadata":{"annotations":{"cluster-autoscaler.kubernetes.io/safe-to-evict":null,"karpenter.sh/do-not-disrupt":null}}}`
	drainAndProtect := `{"metadata":{"annotations":{"cluster-autoscaler.kubernetes.io/safe-to-evict":"false","gputask.io/draining":"true","karpenter.sh/do-not-disrupt":"true"}}}`
	protected := func(marks map[string]string) map[string]string {
		marks[gputaskv1.AnnotationDoNotDisrupt], marks[gputaskv1.AnnotationSafeToEvict] = "true", "false"
		return marks
	}
	tests := []struct {
		name                string
		taskMarks, podMarks map[string]string
		podPatch, taskPatch string
	}{
		{name: "no marks"},
		{name: "drain carried to the pod", taskMarks: map[string]string{gputaskv1.AnnotationDraining: "true"}, podPatch: drainOn},
		{name: "drain taken back from the pod", podMarks: map[string]string{gputaskv1.AnnotationDraining: "true"}, podPatch: drainOff},
		{name: "busy pod mirrored on the task and kept from eviction", podMarks: map[string]string{gputaskv1.AnnotationBusy: "true"}, podPatch: protectOn, taskPatch: busyOn},
		{name: "idle pod mirrored on the task", taskMarks: map[string]string{gputaskv1.AnnotationPodBusy: "true"}, taskPatch: busyOff},
		{name: "idle pod marked false", taskMarks: map[string]string{gputaskv1.AnnotationPodBusy: "true"},
			podMarks: map[string]string{gputaskv1.AnnotationBusy: "false"}, taskPatch: busyOff},
		{name: "a worker that marks its task: its pod is kept from eviction", taskMarks: map[string]string{gputaskv1.AnnotationBusy: "true"}, podPatch: protectOn},
		{name: "idle again: the eviction marks go", podMarks: protected(map[string]string{}), podPatch: protectOff},
		{name: "in step", taskMarks: map[string]string{gputaskv1.AnnotationDraining: "true", gputaskv1.AnnotationPodBusy: "true"},
			podMarks: protected(map[string]string{gputaskv1.AnnotationDraining: "true", gputaskv1.AnnotationBusy: "true"})},
		{name: "both ways at once, the pod's marks in one patch", taskMarks: map[string]string{gputaskv1.AnnotationDraining: "true"},
			podMarks: map[string]string{gputaskv1.AnnotationBusy: "true"}, podPatch: drainAndProtect, taskPatch: busyOn},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			task := newTask("render")
			task.Annotations = tc.taskMarks
			task, pod := f.addTaskWithPod(task, corev1.PodRunning, "gpu-1")
			pod.Annotations = tc.podMarks
			if tc.podPatch != "" {
				f.KubeActions = append(f.KubeActions, core.NewPatchAction(podsResource, pod.Namespace, pod.Name, types.MergePatchType, []byte(tc.podPatch)))
			}
			if tc.taskPatch != "" {
				f.Actions = append(f.Actions, core.NewPatchAction(taskResource, task.Namespace, task.Name, types.MergePatchType, []byte(tc.taskPatch)))
			}
			f.Run(ctx, key(task))
		})
	}
}

// stateOf is a copy of what the controller remembers of the task.
func stateOf(c *Controller, key cache.ObjectName) taskState {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.state[key]; s != nil {
		return *s
	}
	return taskState{}
}
