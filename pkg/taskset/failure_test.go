package taskset

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
)

func TestFailureMessage(t *testing.T) {
	set := newSet("render", ptr.To[int32](5))
	tests := []struct {
		name string
		err  error
		want string
	}{{
		name: "generated name replaced",
		err:  apierrors.NewForbidden(tasksResource.GroupResource(), "render-x7k2p", errors.New("exceeded quota: q, requested: count/gputasks.gputask.io=1")),
		want: `gputasks.gputask.io "render-*" is forbidden: exceeded quota: q, requested: count/gputasks.gputask.io=1`,
	}, {
		name: "other names kept",
		err:  errors.New(`gputask "render-a" and "other-x7k2p" and "render-aaaaa"`),
		want: `gputask "render-a" and "other-x7k2p" and "render-aaaaa"`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := failureMessage(set, tc.err); got != tc.want {
				t.Errorf("failureMessage() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFailureMessageIsCapped(t *testing.T) {
	set := newSet("render", ptr.To[int32](5))
	// A 64 KiB label value quoted by the API, ending in multi-byte runes
	// right where the cut falls.
	long := errors.New("metadata.labels: Invalid value: " + strings.Repeat("é", 32*1024))
	got := failureMessage(set, long)
	if len(got) > maxFailureMessage {
		t.Errorf("message is %d bytes, want at most %d", len(got), maxFailureMessage)
	}
	if !utf8.ValidString(got) || !strings.HasSuffix(got, "... (truncated)") || !strings.HasPrefix(got, "metadata.labels: Invalid value: é") {
		t.Errorf("message not cut cleanly: ...%q", got[max(0, len(got)-40):])
	}
}

// TestStandingCreateFailureWritesStatusOnce: under a quota, every create is
// refused with a new random name. The first refusal writes ReplicaFailure;
// the next attempt finds the same message and writes nothing, and the sync's
// error sends the set back through the queue's backoff.
func TestStandingCreateFailureWritesStatusOnce(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	set := newSet("render", ptr.To[int32](1))
	refuse := func(name string) controllertest.Reactor {
		return controllertest.Reactor{Verb: "create", Resource: "gputasks", Fn: func(core.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(tasksResource.GroupResource(), name, errors.New("exceeded quota: q"))
		}}
	}

	first := newFixture(t)
	first.Add(withStatus(set, 0, 0, 0, 0, 0))
	first.Reactors = append(first.Reactors, refuse("render-x7k2p"))
	c := first.newController(ctx)
	first.Client.ClearActions()
	if err := c.syncHandler(ctx, cache.MetaObjectToName(set)); err == nil {
		t.Fatal("sync with a refused create returned no error, so the set would not back off")
	}
	lastStatusUpdate(t, first.Client.Actions())
	written, err := first.Client.GputaskV1().GPUTaskSets(set.Namespace).Get(ctx, set.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	written.ManagedFields = nil
	cond := meta.FindStatusCondition(written.Status.Conditions, gputaskv1.ConditionReplicaFailure)
	if cond == nil || strings.Contains(cond.Message, "x7k2p") {
		t.Fatalf("ReplicaFailure = %+v, want one without the generated name", cond)
	}

	second := newFixture(t)
	second.Add(written)
	second.Reactors = append(second.Reactors, refuse("render-b9zq4"))
	second.expectCreate(expectedTask(set))
	c = second.newController(ctx)
	second.RunExpectError(ctx, key(set)) // a create, no status write

	// The worker hands the error to the rate limiter, not to a plain Add.
	key := cache.MetaObjectToName(set)
	c.workqueue.Add(key)
	second.expectCreate(expectedTask(set))
	second.Client.ClearActions()
	c.processNextWorkItem(context.Background())
	second.CheckActions()
	if n := c.workqueue.NumRequeues(key); n != 1 {
		t.Errorf("NumRequeues = %d after a failed sync, want 1", n)
	}
	if n := c.workqueue.Len(); n != 0 {
		t.Errorf("queue holds %d items at once after a failed sync, want 0 (retry after the backoff)", n)
	}
}
