package autoscaler

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/gputask/gputask-controller/pkg/controllertest"
)

// TestReadsAreBoundedPerNamespace: reads beyond a namespace's slots wait in
// their own goroutines, and another namespace's reads run meanwhile.
func TestReadsAreBoundedPerNamespace(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := newReads(2)
	release := make(chan struct{})
	var running, done atomic.Int32
	var once sync.Once
	blocked := func() {
		running.Add(1)
		<-release
		done.Add(1)
	}
	for range 5 {
		r.run(ctx, "alice", blocked)
	}
	r.run(ctx, "bob", func() { running.Add(1); done.Add(1) })
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		return done.Load() == 1 && running.Load() == 3, nil
	}); err != nil {
		t.Fatalf("running %d, done %d; want alice's 2 slots taken and bob's read done", running.Load(), done.Load())
	}
	once.Do(func() { close(release) })
	r.wait()
	if running.Load() != 6 || done.Load() != 6 {
		t.Errorf("running %d, done %d after the release; want all 6", running.Load(), done.Load())
	}
}

// TestReadsNeverHoldAWorker: a set whose endpoint does not answer costs its
// own decision only. Its sync starts the read and returns; another set is
// decided meanwhile; a second sync starts no second read; the answer
// queues the set, and the sync after it decides.
func TestReadsNeverHoldAWorker(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	release := make(chan struct{})
	f.blockers = map[string]chan struct{}{"silent": release}
	silent := newSet("silent", 2)
	silent.Spec.Autoscaling.Metrics[0].Name = "silent"
	f.readings["silent"] = fakeSource{value: 0.6}
	c := f.autoscale(ctx, newSet("web", 2), fakeSource{value: 0.95})
	controllertest.Preload(t, f.Informers.Gputask().V1().GPUTaskSets().Informer().GetIndexer(), silent)
	if _, err := f.Client.GputaskV1().GPUTaskSets(silent.Namespace).Create(ctx, silent, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	silentKey := cache.MetaObjectToName(silent)

	if err := c.syncHandler(ctx, silentKey); err != nil || !c.readsInFlight(silentKey) {
		t.Fatalf("sync of the silent set = %v, read in flight %v; want nil and true", err, c.readsInFlight(silentKey))
	}
	// The other set is decided while the silent read hangs.
	f.syncOK(ctx, c, "web")
	f.expectScale("web", 5)
	f.expectStatus("web")
	f.CheckActions()
	before := f.readsStarted.Load()
	if err := c.syncHandler(ctx, silentKey); err != nil {
		t.Fatal(err)
	}
	if n := f.readsStarted.Load(); n != before {
		t.Errorf("a second sync of the silent set started %d more reads, want none", n-before)
	}

	close(release)
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		return !c.readsInFlight(silentKey) && c.workqueue.Len() == 1, nil
	}); err != nil {
		t.Fatal("the answer did not queue the set")
	}
	f.drainQueue(c, silentKey)
	f.Client.ClearActions()
	if err := c.syncHandler(ctx, silentKey); err != nil {
		t.Fatal(err)
	}
	if st := f.lastStatus(); st.Status.LoadIndex != "0.6" {
		t.Errorf("load index %q after the answer, want 0.6", st.Status.LoadIndex)
	}
}
