package main

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
)

// TestPodCreateFailed: a pod the API server refuses as invalid sets
// PodCreateFailed on the task once, backs off through the queue, and the
// condition goes away when a pod is created.
func TestPodCreateFailed(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task := newTask("render")
	f.Add(task)
	c := f.newController(ctx)
	refused := apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "render", field.ErrorList{
		field.Invalid(field.NewPath("spec", "containers").Index(0).Child("env").Index(0).Child("name"), "1BAD", "a valid environment variable name must consist of alphabetic characters"),
	})
	refuse := true
	f.KubeClient.PrependReactor("create", "pods", func(core.Action) (bool, runtime.Object, error) {
		if refuse {
			return true, nil, refused
		}
		return false, nil, nil
	})

	failed := podCreateFailed(task, "Invalid", refused.Error())
	f.expectCreatePod(expectedPod(task))
	f.ExpectApplyStatus(failed)
	f.RunExpectError(ctx, key(task))
	f.ExpectEvents("Warning FailedCreate")

	// The next attempt is refused the same way: no status write.
	f.Update(failed)
	f.expectCreatePod(expectedPod(task))
	f.RunExpectError(ctx, key(task))
	f.ExpectEvents("Warning FailedCreate")

	// The worker backs off rather than retrying at once.
	c.workqueue.Add(key(task))
	f.KubeClient.ClearActions()
	c.processNextWorkItem(ctx)
	if n := c.workqueue.NumRequeues(key(task)); n != 1 {
		t.Errorf("NumRequeues = %d after a refused create, want 1", n)
	}
	if n := c.workqueue.Len(); n != 0 {
		t.Errorf("queue holds %d items at once after a refused create, want 0", n)
	}
	f.ExpectEvents("Warning FailedCreate")

	// Once the pod is accepted, the create's worker moves on; the status,
	// and with it the condition, follows the pod's add event.
	refuse = false
	f.expectCreatePod(expectedPod(task))
	f.Run(ctx, key(task))
	f.ExpectEvents()
}
