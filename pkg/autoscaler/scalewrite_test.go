package autoscaler

import (
	"testing"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// TestStatusAfterScaleUsesTheScaleWritesVersion: the status write after a
// scale write carries the resourceVersion that write returned, so it is not
// refused with a 409 for the autoscaler's own write.
func TestStatusAfterScaleUsesTheScaleWritesVersion(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	f.sets = []*gputaskv1.GPUTaskSet{newSet("web", 5)}
	f.scaleReplicas = 5
	f.readings["queue"] = fakeSource{value: 0.91}
	c, _ := f.newController(ctx)
	f.client.PrependReactor("update", "gputasksets", func(action core.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "scale" {
			return false, nil, nil
		}
		sc := action.(core.UpdateAction).GetObject().(*autoscalingv1.Scale).DeepCopy()
		f.mu.Lock()
		defer f.mu.Unlock()
		f.scaleReplicas = sc.Spec.Replicas
		sc.ResourceVersion = "8"
		return true, sc, nil
	})

	if _, err := f.sync(ctx, c, "web"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	set := f.lastStatus()
	if set.ResourceVersion != "8" {
		t.Errorf("status written with resourceVersion %q, want the scale write's 8", set.ResourceVersion)
	}
	if set.Spec.Replicas == nil || *set.Spec.Replicas != 8 {
		t.Errorf("status written with spec.replicas %v, want the scale write's 8", set.Spec.Replicas)
	}
}
