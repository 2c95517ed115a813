package main

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// TestEveryCreateFailureIsShown: a pod create that fails for any reason,
// such as an admission webhook that is down (500), unavailable (503) or
// slow (504), or a client-side timeout, shows PodCreateFailed with the
// class of the failure and the API's message; it is written once while the
// message stays the same, and goes once the pod is made.
func TestEveryCreateFailureIsShown(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		name, reason, msg string
		err               error
	}{
		{"webhook down", "InternalError",
			`Internal error occurred: failed calling webhook "mpod.kb.io": Post "https://kueue-webhook-service.kueue-system.svc:443/mutate--v1-pod": dial tcp 10.96.0.10:443: connect: connection refused`,
			apierrors.NewInternalError(errors.New(`failed calling webhook "mpod.kb.io": Post "https://kueue-webhook-service.kueue-system.svc:443/mutate--v1-pod": dial tcp 10.96.0.10:443: connect: connection refused`))},
		{"unavailable", "ServiceUnavailable", "the server is currently unable to handle the request", apierrors.NewServiceUnavailable("the server is currently unable to handle the request")},
		{"gateway timeout", "Timeout", "the server was unable to return a response in the time allotted, but may still be processing the request (create pods render)",
			apierrors.NewGenericServerResponse(http.StatusGatewayTimeout, "create", gr, "render", "", 0, false)},
		{"client timeout", "Unknown", "creating pod for gputask default/render: context deadline exceeded", context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			task := newTask("render")
			f.Add(task)
			f.newController(ctx)
			fail := true
			f.KubeClient.PrependReactor("create", "pods", func(core.Action) (bool, runtime.Object, error) {
				if fail {
					return true, nil, tc.err
				}
				return false, nil, nil
			})
			failed := podCreateFailed(task, tc.reason, tc.msg)
			f.expectCreatePod(expectedPod(task))
			f.ExpectApplyStatus(failed)
			f.RunExpectError(ctx, key(task))
			f.ExpectEvents("Warning FailedCreate")

			// Failing the same way again writes nothing.
			f.Update(failed)
			f.expectCreatePod(expectedPod(task))
			f.RunExpectError(ctx, key(task))
			f.ExpectEvents("Warning FailedCreate")

			// The webhook is back: the pod is made.
			fail = false
			f.expectCreatePod(expectedPod(task))
			f.Run(ctx, key(task))
		})
	}
}

// TestRetryDelayIsBounded: however often a task's sync fails, its next try
// is at most maxRetryDelay away, so a recovered webhook is used within it.
func TestRetryDelayIsBounded(t *testing.T) {
	limiter := retryRateLimiter()
	item := cache.ObjectName{Namespace: "default", Name: "render"}
	var last time.Duration
	for range 30 {
		last = limiter.When(item)
	}
	if last != maxRetryDelay || maxRetryDelay > time.Minute {
		t.Errorf("delay after 30 failures = %v, want maxRetryDelay (%v), at most a minute", last, maxRetryDelay)
	}
	limiter.Forget(item)
	if d := limiter.When(item); d > time.Second {
		t.Errorf("first delay after Forget = %v", d)
	}
}

// podCreateFailed is task with the status of a pod create that failed with
// reason and msg.
func podCreateFailed(task *gputaskv1.GPUTask, reason, msg string) *gputaskv1.GPUTask {
	failed := task.DeepCopy()
	failed.Status = gputaskv1.GPUTaskStatus{
		Phase: gputaskv1.GPUTaskPending, ObservedGeneration: 1,
		Conditions: []metav1.Condition{
			cond(gputaskv1.ConditionSpecValid, metav1.ConditionTrue, "Valid", ""),
			cond(gputaskv1.ConditionPodCreateFailed, metav1.ConditionTrue, reason, msg),
			cond(gputaskv1.ConditionPodOwned, metav1.ConditionUnknown, "PodNotCreated", ""),
			cond(gputaskv1.ConditionScheduled, metav1.ConditionFalse, "PodNotCreated", ""),
			cond(gputaskv1.ConditionReady, metav1.ConditionFalse, "PodNotCreated", ""),
		},
	}
	return failed
}
