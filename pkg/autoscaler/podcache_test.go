package autoscaler

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	kubefake "k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/gputask/gputask-controller/pkg/controllertest"
)

// cachedPods is a PodCache over a preloaded lister, for the fixture.
type cachedPods struct{ corelisters.PodLister }

func (p cachedPods) Lister(context.Context) (corelisters.PodLister, error) { return p.PodLister, nil }
func (cachedPods) Stop()                                                   {}

// TestLazyPodsStartsOnUseAndStopsWhenIdle: the cluster-wide pod cache runs
// only from the first capacity-aware read until PodCacheIdleStop after the
// last one, and starts again on the next read.
func TestLazyPodsStartsOnUseAndStopsWhenIdle(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clock := testingclock.NewFakeClock(t0)
	p1 := controllertest.GPUPod("p1", "gpu-1", 1, corev1.PodRunning)
	p1.Spec.Containers[0].Image = "vllm:1"
	client := kubefake.NewClientset(p1, controllertest.GPUPod("p2", "gpu-1", 1, corev1.PodPending))
	pods := NewLazyPods(client, 0, clock)
	t.Cleanup(pods.Stop)
	if pods.running() {
		t.Fatal("the cache runs before any read")
	}

	read := func() {
		t.Helper()
		lister, err := pods.Lister(ctx)
		if err != nil {
			t.Fatal(err)
		}
		list, err := lister.List(labels.Everything())
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 2 {
			t.Fatalf("%d pods in the cache, want 2", len(list))
		}
		for _, pod := range list {
			if image := pod.Spec.Containers[0].Image; image != "" {
				t.Errorf("cached pod %s keeps its image %q, want it trimmed", pod.Name, image)
			}
		}
	}
	read()
	if !pods.running() {
		t.Fatal("the cache does not run after a read")
	}

	// Read again before the idle time is up: the timer moves on.
	clock.Step(PodCacheIdleStop / 2)
	read()
	clock.Step(PodCacheIdleStop / 2)
	if !pods.running() {
		t.Fatal("the cache stopped less than PodCacheIdleStop after the last read")
	}
	clock.Step(PodCacheIdleStop / 2)
	if pods.running() {
		t.Fatal("the cache still runs PodCacheIdleStop after the last read")
	}

	read()
	if !pods.running() {
		t.Fatal("the cache did not start again")
	}
}
