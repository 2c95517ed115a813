// Package controllertest is the sample-controller test fixture that the
// GPUTask, GPUTaskSet and autoscaler controller tests share. It compares the
// actions a sync made on the fake clientsets with the expected ones,
// preloads informer indexers, and drains recorded events.
package controllertest

import (
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/diff"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
)

// AlwaysReady stands for an informer's HasSynced when the test fills the
// indexers itself.
func AlwaysReady() bool { return true }

// Preload adds objs to an informer's indexer, as the informer would after
// its initial list.
func Preload[T any](t testing.TB, indexer cache.Indexer, objs ...T) {
	t.Helper()
	for _, obj := range objs {
		if err := indexer.Add(obj); err != nil {
			t.Fatalf("preloading indexer: %v", err)
		}
	}
}

// Update replaces obj in an informer's indexer, as a watch event would.
func Update(t testing.TB, indexer cache.Indexer, obj any) {
	t.Helper()
	if err := indexer.Update(obj); err != nil {
		t.Fatalf("updating indexer: %v", err)
	}
}

// Remove deletes obj from an informer's indexer, as a watch event would.
func Remove(t testing.TB, indexer cache.Indexer, obj any) {
	t.Helper()
	if err := indexer.Delete(obj); err != nil {
		t.Fatalf("deleting from indexer: %v", err)
	}
}

// FilterInformerActions drops what informers and event recorders do on the
// fake clientsets (list, watch, event writes), leaving the controller's own
// actions.
func FilterInformerActions(actions []core.Action) []core.Action {
	var out []core.Action
	for _, a := range actions {
		if a.GetVerb() == "list" || a.GetVerb() == "watch" ||
			a.Matches("create", "events") || a.Matches("patch", "events") {
			continue
		}
		out = append(out, a)
	}
	return out
}

// Describe renders actions for a test failure: verb, resource/subresource
// and, for deletes and patches, the name.
func Describe(actions []core.Action) string {
	var parts []string
	for _, a := range actions {
		s := verb(a) + " " + a.GetResource().Resource
		if sub := a.GetSubresource(); sub != "" {
			s += "/" + sub
		}
		switch a := a.(type) {
		case core.DeleteAction:
			s += " " + a.GetName()
		case core.PatchAction:
			s += " " + a.GetName()
		}
		parts = append(parts, s)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// CheckActions compares actual with expected, in order, and reports any
// missing or extra action.
func CheckActions(t testing.TB, expected, actual []core.Action) {
	t.Helper()
	for i, action := range actual {
		if i >= len(expected) {
			t.Errorf("%d unexpected actions: %s", len(actual)-len(expected), Describe(actual[i:]))
			break
		}
		CheckAction(t, expected[i], action)
	}
	if len(expected) > len(actual) {
		t.Errorf("%d additional expected actions: %s", len(expected)-len(actual), Describe(expected[len(actual):]))
	}
}

// CheckAction compares verb, resource, subresource and namespace, and the
// payload: the object of a create or update, the name and options of a
// delete (a UID precondition is what keeps a delete from hitting a
// successor), the name, type and body of a patch (of an apply, the whole
// body as decoded JSON, see ApplyStatusAction), the name of a get.
func CheckAction(t testing.TB, expected, actual core.Action) {
	t.Helper()
	if !(expected.Matches(actual.GetVerb(), actual.GetResource().Resource) && actual.GetSubresource() == expected.GetSubresource() &&
		actual.GetNamespace() == expected.GetNamespace()) {
		t.Errorf("action = %s in %q, want %s in %q", Describe([]core.Action{actual}), actual.GetNamespace(),
			Describe([]core.Action{expected}), expected.GetNamespace())
		return
	}
	switch a := actual.(type) {
	case core.CreateActionImpl:
		e := expected.(core.CreateActionImpl)
		if !equality.Semantic.DeepEqual(e.GetObject(), a.GetObject()) {
			t.Errorf("create %s: object differs (-want +got):\n%s", a.GetResource().Resource, diff.Diff(e.GetObject(), a.GetObject()))
		}
	case core.UpdateActionImpl:
		e := expected.(core.UpdateActionImpl)
		if !equality.Semantic.DeepEqual(e.GetObject(), a.GetObject()) {
			t.Errorf("update %s/%s: object differs (-want +got):\n%s", a.GetResource().Resource, a.GetSubresource(), diff.Diff(e.GetObject(), a.GetObject()))
		}
	case core.DeleteActionImpl:
		e := expected.(core.DeleteActionImpl)
		if e.GetName() != a.GetName() {
			t.Errorf("delete %s: name %q, want %q", a.GetResource().Resource, a.GetName(), e.GetName())
		}
		if !equality.Semantic.DeepEqual(e.DeleteOptions, a.DeleteOptions) {
			t.Errorf("delete %s: options differ (-want +got):\n%s", a.GetName(), diff.Diff(e.DeleteOptions, a.DeleteOptions))
		}
	case core.PatchActionImpl:
		e := expected.(core.PatchActionImpl)
		if IsApply(e) && IsApply(a) {
			checkApply(t, e, a)
			return
		}
		if a.GetName() != e.GetName() || a.GetPatchType() != e.GetPatchType() || string(a.GetPatch()) != string(e.GetPatch()) {
			t.Errorf("patch = %s %s %s, want %s %s %s", a.GetName(), a.GetPatchType(), a.GetPatch(), e.GetName(), e.GetPatchType(), e.GetPatch())
		}
	case core.GetActionImpl:
		e := expected.(core.GetActionImpl)
		if e.GetName() != a.GetName() {
			t.Errorf("get %s: name %q, want %q", a.GetResource().Resource, a.GetName(), e.GetName())
		}
	default:
		t.Errorf("uncovered action type %T", actual)
	}
}

// Events drains the events recorded so far, such as
// "Normal Created Created pod render".
func Events(recorder *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// CountEvents counts the events that start with prefix, such as
// "Warning FailedCreate".
func CountEvents(events []string, prefix string) int {
	n := 0
	for _, e := range events {
		if strings.HasPrefix(e, prefix) {
			n++
		}
	}
	return n
}

// ExpectEvents checks that events start with the prefixes in want, in order.
func ExpectEvents(t testing.TB, events []string, want ...string) {
	t.Helper()
	if len(events) != len(want) {
		t.Errorf("events = %q, want %d events %q", events, len(want), want)
		return
	}
	for i := range want {
		if !strings.HasPrefix(events[i], want[i]) {
			t.Errorf("event %d = %q, want prefix %q", i, events[i], want[i])
		}
	}
}

// ExpectStopped waits for what a Run-like function sent on done after its
// context was cancelled, and reports a non-nil error or no return at all.
// The timeout only keeps a hung test from hanging the suite.
func ExpectStopped(t testing.TB, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("%s = %v, want nil", what, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not return after its context ended", what)
	}
}

// RecordingQueue records the delays a sync asked its key back after, so a
// test sees when a controller wants to look again. Wrap the controller's
// queue in it after NewController.
type RecordingQueue struct {
	workqueue.TypedRateLimitingInterface[cache.ObjectName]
	mu    sync.Mutex
	after []time.Duration
}

// AddAfter records d and queues key as the wrapped queue does.
func (q *RecordingQueue) AddAfter(key cache.ObjectName, d time.Duration) {
	q.mu.Lock()
	q.after = append(q.after, d)
	q.mu.Unlock()
	q.TypedRateLimitingInterface.AddAfter(key, d)
}

// After returns the delays asked for so far and forgets them.
func (q *RecordingQueue) After() []time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.after
	q.after = nil
	return out
}
