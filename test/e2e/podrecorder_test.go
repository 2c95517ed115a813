package e2e

// The pod recorder: every watch event of the pods of a namespace, for tests
// that check the order in which pods came and went.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/gputask/gputask-controller/test/framework"
)

// podEvent is one watch event of a pod, as a test needs it.
type podEvent struct {
	at       time.Time
	typ      watch.EventType
	ns, name string
	uid      string
	phase    corev1.PodPhase
	deleting bool
}

// podRecorder records every watch event of the pods of a namespace (or of
// all namespaces) from the moment it starts, so a test can check the order
// in which pods came and went.
type podRecorder struct {
	mu     sync.Mutex
	events []podEvent
	// onEvent, if set, runs under mu after each event is recorded.
	onEvent func(all []podEvent)
	err     error
	stop    context.CancelFunc
	done    chan struct{}
}

// startPodRecorder watches the pods of ns ("" for all) until the test ends
// or stop is called.
func startPodRecorder(t *testing.T, c *framework.ControlPlane, ns string, onEvent func(all []podEvent)) *podRecorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.Kube.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		t.Fatalf("watching pods: %v", err)
	}
	r := &podRecorder{stop: cancel, done: make(chan struct{}), onEvent: onEvent}
	go r.run(ctx, w)
	t.Cleanup(r.Stop)
	return r
}

func (r *podRecorder) run(ctx context.Context, w watch.Interface) {
	defer close(r.done)
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok {
				r.mu.Lock()
				r.err = fmt.Errorf("pod watch closed early")
				r.mu.Unlock()
				return
			}
			pod, isPod := ev.Object.(*corev1.Pod)
			if !isPod {
				r.mu.Lock()
				r.err = fmt.Errorf("pod watch sent %s %T", ev.Type, ev.Object)
				r.mu.Unlock()
				continue
			}
			r.mu.Lock()
			r.events = append(r.events, podEvent{
				at: time.Now(), typ: ev.Type, ns: pod.Namespace, name: pod.Name, uid: string(pod.UID),
				phase: pod.Status.Phase, deleting: pod.DeletionTimestamp != nil,
			})
			if r.onEvent != nil {
				r.onEvent(r.events)
			}
			r.mu.Unlock()
		}
	}
}

// Stop ends the watch; it is safe to call more than once.
func (r *podRecorder) Stop() {
	r.stop()
	<-r.done
}

// Events returns the events so far, and the watch's error if it broke.
func (r *podRecorder) Events() ([]podEvent, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]podEvent(nil), r.events...), r.err
}

// checkPodOrder fails the test when any pod name was ADDED again before the
// pod of that name that came earlier was DELETED, i.e. when two pods of one
// task could have existed together. It returns the number of pods ADDED per
// name.
func checkPodOrder(t *testing.T, events []podEvent) map[string]int {
	t.Helper()
	added := map[string]int{}
	live := map[string]string{} // name -> uid of the pod that exists
	for _, e := range events {
		key := e.ns + "/" + e.name
		switch e.typ {
		case watch.Added:
			if uid, ok := live[key]; ok {
				t.Errorf("pod %s (uid %s) ADDED while pod uid %s of that name was not yet DELETED", key, e.uid, uid)
			}
			live[key] = e.uid
			added[key]++
		case watch.Deleted:
			if live[key] != e.uid {
				t.Errorf("pod %s uid %s DELETED, but the live pod of that name was %q", key, e.uid, live[key])
			}
			delete(live, key)
		}
	}
	return added
}
