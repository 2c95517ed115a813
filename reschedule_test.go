package main

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
	"github.com/gputask/gputask-controller/pkg/reschedule"
	"github.com/gputask/gputask-controller/pkg/taskstatus"
)

// TestReschedulesDeleteWaitCreate walks one replacement through its three
// syncs: delete the old pod; wait while it terminates; create the new one
// and count it.
func TestReschedulesDeleteWaitCreate(t *testing.T) {
	tests := []struct {
		name       string
		setup      func(f *fixture, task *gputaskv1.GPUTask) *corev1.Pod
		wantReason string
	}{
		{"failed pod", func(f *fixture, task *gputaskv1.GPUTask) *corev1.Pod {
			f.Add(controllertest.Node("gpu-1"))
			return podWith(task, corev1.PodFailed, "gpu-1")
		}, reschedule.ReasonPodFailed},
		{"evicted pod", func(f *fixture, task *gputaskv1.GPUTask) *corev1.Pod {
			f.Add(controllertest.Node("gpu-1"))
			p := podWith(task, corev1.PodFailed, "gpu-1")
			p.Status.Reason = "Evicted"
			return p
		}, reschedule.ReasonEvicted},
		{"node gone", func(f *fixture, task *gputaskv1.GPUTask) *corev1.Pod {
			return podWith(task, corev1.PodRunning, "gpu-1")
		}, reschedule.ReasonNodeLost},
		{"node not ready", func(f *fixture, task *gputaskv1.GPUTask) *corev1.Pod {
			f.Add(controllertest.NotReadyNode("gpu-1"))
			return podWith(task, corev1.PodRunning, "gpu-1")
		}, reschedule.ReasonNodeNotReady},
		{"unschedulable too long", func(f *fixture, task *gputaskv1.GPUTask) *corev1.Pod {
			p := podWith(task, corev1.PodPending, "")
			p.Status.Conditions = []corev1.PodCondition{{
				Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
				LastTransitionTime: metav1.NewTime(testNow.Add(-6 * time.Minute)),
			}}
			return p
		}, reschedule.ReasonUnschedulable},
		{"periodic", func(f *fixture, task *gputaskv1.GPUTask) *corev1.Pod {
			task.Spec.ReschedulePolicy = gputaskv1.ReschedulePeriodic
			f.Add(controllertest.Node("gpu-1"))
			return podWith(task, corev1.PodRunning, "gpu-1")
		}, reschedule.ReasonPeriodic},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			task := newTask("render")
			old := tc.setup(f, task)
			task.Status.Reschedules = 2
			f.Add(task)
			f.Add(old)
			c := f.newController(ctx)
			cur := c.status(task, taskstatus.View{Pod: old}, c.nodeOf(old))
			task = task.DeepCopy()
			task.Status, task.ResourceVersion = cur, "4"
			f.Update(task)

			// 1: delete the old pod, guarded by its UID; create nothing.
			if tc.wantReason == reschedule.ReasonNodeLost {
				f.expectDeletePodNow(old)
			} else {
				f.expectDeletePod(old)
			}
			f.Run(ctx, key(task))
			f.ExpectEvents("Normal Rescheduling Deleted pod render to replace it: " + tc.wantReason)

			// 2: the pod terminates and is still in the cache: wait.
			terminating := old.DeepCopy()
			terminating.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
			terminating.ResourceVersion = "2"
			f.Update(terminating)
			f.Run(ctx, key(task))

			// 3: the pod is gone: create the new one and count it. The
			// pod that replaces a failed one carries the count of failures
			// in a row, for the back-off of the next.
			f.Remove(terminating)
			if tc.wantReason == reschedule.ReasonPodFailed {
				f.expectCreatePod(afterFailures(expectedPod(task), 1))
			} else {
				f.expectCreatePod(expectedPod(task))
			}
			f.ExpectApplyStatus(replaced(task)) // reschedules 2 → 3
			f.Run(ctx, key(task))
			// The count is made from the cached task's version, and holds
			// only at that version.
			actions := controllertest.FilterInformerActions(f.Client.Actions())
			if rv := controllertest.ResourceVersionOf(t, actions[len(actions)-1]); rv != "4" {
				t.Errorf("the apply that counts the replacement has resourceVersion %q, want the cached task's 4", rv)
			}
			f.ExpectEvents("Normal Rescheduled Rescheduled (" + tc.wantReason + ")")
			if n := replacements(c); n != 0 {
				t.Errorf("%d replacements left in flight", n)
			}
		})
	}
}

func TestRescheduleCacheLagsBehindDelete(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task, old := f.addTaskWithPod(newTask("render"), corev1.PodFailed, "gpu-1")

	f.expectDeletePod(old)
	f.Run(ctx, key(task))
	// The cache still shows the old pod without a deletion timestamp: the
	// delete must not be sent twice.
	f.Run(ctx, key(task))
}

func TestMaxConcurrentReschedules(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	f.opts.MaxConcurrentReschedules = 1
	a, podA := f.addTaskWithPod(newTask("a"), corev1.PodFailed, "gpu-1")
	b, podB := f.addTaskWithPod(newTask("b"), corev1.PodFailed, "gpu-1")

	f.expectDeletePod(podA)
	f.Run(ctx, key(a))
	// b must wait: a is between delete and create.
	f.Run(ctx, key(b))

	// a's new pod is created; b may go.
	f.Remove(podA)
	f.expectCreatePod(afterFailures(expectedPod(a), 1))
	f.ExpectApplyStatus(replaced(a))
	f.Run(ctx, key(a))

	f.expectDeletePod(podB)
	f.Run(ctx, key(b))
}

func TestRestart(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	f.opts.RescheduleInterval = 0 // a restart does not depend on rescheduling
	restartAt := testNow.Add(-time.Minute).Format(time.RFC3339)
	task, old := f.addTaskWithPod(newTask("render", controllertest.Annotation(gputaskv1.AnnotationRestartedAt, restartAt)),
		corev1.PodRunning, "gpu-1") // the pod was created an hour ago

	f.expectDeletePod(old)
	f.Run(ctx, key(task))
	f.ExpectEvents("Normal Rescheduling Deleted pod render to replace it: Restart")

	f.Remove(old)
	f.expectCreatePod(expectedPod(task))
	want := replaced(task)
	f.ExpectApplyStatus(want)
	f.Run(ctx, key(task))
	f.ExpectEvents("Normal Restarted")

	// The new pod is newer than the request: done, no further restart.
	newPod := podWith(task, corev1.PodRunning, "gpu-1")
	newPod.UID = "new-pod"
	newPod.CreationTimestamp = metav1.NewTime(testNow)
	f.Update(newPod)
	// The cache shows the status write, with the version the API gave it.
	shown := want.DeepCopy()
	shown.ResourceVersion = "2"
	f.Update(shown)
	f.ExpectApplyStatus(withStatus(shown, gputaskv1.GPUTaskRunning, "gpu-1"))
	f.Run(ctx, key(task))
}

func TestRestartAcknowledgedWhenPodIsNewer(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	restartAt := testNow.Add(-time.Hour).Format(time.RFC3339)
	task, pod := f.addTaskWithPod(newTask("render", controllertest.Annotation(gputaskv1.AnnotationRestartedAt, restartAt)), corev1.PodRunning, "gpu-1")
	pod.CreationTimestamp = metav1.NewTime(testNow.Add(-time.Minute))

	want := task.DeepCopy()
	want.Status.LastRescheduleTime = ptr.To(pod.CreationTimestamp)
	f.ExpectApplyStatus(want)
	f.Run(ctx, key(task))
}

func TestInvalidRestartedAtIsIgnored(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task, _ := f.addTaskWithPod(newTask("render", controllertest.Annotation(gputaskv1.AnnotationRestartedAt, "last tuesday")), corev1.PodRunning, "gpu-1")

	f.Run(ctx, key(task))
	f.ExpectEvents("Warning InvalidRestartedAt")
	f.Run(ctx, key(task))
	f.ExpectEvents()
}

// TestRescheduleDeleteConflict: the pod of that name changed between the
// cache and the API server, so the UID precondition fails; the replacement is
// abandoned and judged again rather than counted as in flight.
func TestRescheduleDeleteConflict(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	f.opts.MaxConcurrentReschedules = 1
	task, old := f.addTaskWithPod(newTask("render"), corev1.PodFailed, "gpu-1")
	c := f.newController(ctx)
	f.KubeClient.PrependReactor("delete", "pods", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(podsResource.GroupResource(), old.Name, errors.New("uid precondition failed"))
	})

	f.expectDeletePod(old)
	f.Run(ctx, key(task))
	if n := replacements(c); n != 0 {
		t.Errorf("%d replacements in flight after a failed precondition, want 0", n)
	}
}

// TestRescheduleDeleteError: an API error is retried with backoff and is
// reported once as FailedDelete.
func TestRescheduleDeleteError(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task, old := f.addTaskWithPod(newTask("render"), corev1.PodFailed, "gpu-1")
	c := f.newController(ctx)
	f.KubeClient.PrependReactor("delete", "pods", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("try later")
	})

	f.expectDeletePod(old)
	f.RunExpectError(ctx, key(task))
	f.ExpectEvents("Warning FailedDelete")
	if n := replacements(c); n != 0 {
		t.Errorf("%d replacements in flight after a failed delete, want 0", n)
	}
}

func TestTaskDeletedMidReplacement(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task, old := f.addTaskWithPod(newTask("render"), corev1.PodFailed, "gpu-1")
	c := f.newController(ctx)

	f.expectDeletePod(old)
	f.Run(ctx, key(task))

	if err := f.Informers.Gputask().V1().GPUTasks().Informer().GetIndexer().Delete(task); err != nil {
		t.Fatal(err)
	}
	c.deleteTask(klog.Background(), task)
	f.Remove(old)
	f.Run(ctx, key(task))
	if n := replacements(c); n != 0 {
		t.Errorf("%d replacements left for a deleted task", n)
	}
}

// TestReplacementCountedOnce: the status write after the create fails (say,
// a timeout after the server applied it). The retry must neither create again
// nor count the replacement twice.
func TestReplacementCountedOnce(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task, old := f.addTaskWithPod(newTask("render"), corev1.PodFailed, "gpu-1")
	c := f.newController(ctx)

	f.expectDeletePod(old)
	f.Run(ctx, key(task))
	f.ExpectEvents("Normal Rescheduling")
	f.Remove(old)

	failStatus := true
	f.Client.PrependReactor("patch", "gputasks", func(a core.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" && failStatus {
			return true, nil, apierrors.NewTimeoutError("request timed out", 1)
		}
		return false, nil, nil
	})
	want := replaced(task)
	f.expectCreatePod(afterFailures(expectedPod(task), 1))
	f.ExpectApplyStatus(want)
	f.RunExpectError(ctx, key(task))
	f.ExpectEvents("Normal Rescheduled")

	// The write had in fact been applied, and the cache now shows it and the
	// new pod: nothing is left to write, and the count stays at 1.
	failStatus = false
	f.Update(want)
	newPod := expectedPod(task)
	newPod.UID, newPod.ResourceVersion = "new-pod", "5"
	f.Update(newPod)
	f.Run(ctx, key(task))
	if n := replacements(c); n != 0 {
		t.Errorf("%d replacements left in flight", n)
	}
}

// TestForceDeleteOnNotReadyNode: a pod deleted because its node is NotReady
// stays terminating, as no kubelet confirms its end. Past its grace period
// and the margin it is removed without waiting, so the task gets a new pod.
func TestForceDeleteOnNotReadyNode(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	f.Add(controllertest.NotReadyNode("gpu-1"))
	task, old := f.addTaskWithPod(newTask("render"), corev1.PodRunning, "gpu-1")
	f.newController(ctx)

	f.expectDeletePod(old)
	f.Run(ctx, key(task))
	f.ExpectEvents("Normal Rescheduling Deleted pod render to replace it: NodeNotReady")

	// Terminating, within its grace period: wait.
	terminating := old.DeepCopy()
	terminating.DeletionTimestamp = ptr.To(metav1.NewTime(testNow.Add(30 * time.Second)))
	terminating.ResourceVersion = "2"
	f.Update(terminating)
	f.Run(ctx, key(task))

	// Well past it: force delete.
	f.Clock.SetTime(testNow.Add(30*time.Second + reschedule.ForceDeleteMargin))
	f.expectDeletePodNow(terminating)
	f.Run(ctx, key(task))
	f.ExpectEvents("Warning ForceDeleted")
}

// TestFailedPodBacksOff: a pod that failed, second in a row (the pod it
// replaced failed too, within ten minutes of its start), is replaced only
// once its back-off is over. Meanwhile the task shows it Failed, with one
// status write and one BackOff Warning, whatever number of syncs; the task
// comes back by itself when the wait ends, and then the pod is replaced.
func TestFailedPodBacksOff(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	f.Add(controllertest.Node("gpu-1"))
	task := newTask("render")
	failed := afterFailures(podWith(task, corev1.PodFailed, "gpu-1"), 1)
	failed.Status.StartTime = ptr.To(metav1.NewTime(testNow.Add(-time.Minute)))
	failed.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "task", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 3, Reason: "Error", StartedAt: metav1.NewTime(testNow.Add(-time.Minute)), FinishedAt: metav1.NewTime(testNow.Add(-4 * time.Second)),
	}}}}
	f.Add(task)
	f.Add(failed)
	c := f.newController(ctx)

	shown := withStatus(task, gputaskv1.GPUTaskFailed, "gpu-1")
	f.ExpectApplyStatus(shown)
	f.Run(ctx, key(task))
	f.ExpectEvents("Warning BackOff Back-off 10s before replacing failed pod render: 2 of the task's pods failed in a row, each within 10m0s of its start")

	// Within the back-off, with the status shown: no write, no event.
	shown.ResourceVersion = "2"
	f.Update(shown)
	f.Clock.Step(5 * time.Second)
	f.Run(ctx, key(shown))
	f.ExpectEvents()
	for c.workqueue.Len() > 0 {
		k, _ := c.workqueue.Get()
		c.workqueue.Done(k)
	}

	// The key comes back when the back-off ends, 10 s after the pod ended.
	f.Clock.Step(time.Second)
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		return c.workqueue.Len() > 0, nil
	}); err != nil {
		t.Fatal("the task did not come back when its back-off ended")
	}
	f.expectDeletePod(failed)
	f.Run(ctx, key(shown))
	f.ExpectEvents("Normal Rescheduling Deleted pod render to replace it: PodFailed")

	// The new pod carries the count, 2.
	f.Remove(failed)
	f.expectCreatePod(afterFailures(expectedPod(task), 2))
	at := metav1.NewTime(f.Clock.Now())
	want := replaced(shown)
	want.Status.LastRescheduleTime = &at
	for i, cond := range want.Status.Conditions {
		if was := findCond(shown.Status.Conditions, cond.Type); was == nil || was.Status != cond.Status {
			want.Status.Conditions[i].LastTransitionTime = at
		}
	}
	f.ExpectApplyStatus(want)
	f.Run(ctx, key(shown))
	f.ExpectEvents("Normal Rescheduled")
}

// afterFailures is pod carrying the count of the task's pods that failed
// in a row before it.
func afterFailures(pod *corev1.Pod, n int) *corev1.Pod {
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[gputaskv1.AnnotationFailureCount] = strconv.Itoa(n)
	return pod
}

// replacements counts the tasks whose pod the controller is replacing.
func replacements(c *Controller) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.state {
		if s.memory.Replacement != nil {
			n++
		}
	}
	return n
}
