package autoscaler

import (
	"testing"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
)

// TestStatusAfterScaleUsesTheScaleWritesVersion: the status write after a
// scale write is a server-side apply of the autoscaler's own fields, so it
// is never refused with a 409 for the autoscaler's own scale write.
func TestStatusAfterScaleUsesTheScaleWritesVersion(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	f.Add(newSet("web", 5))
	f.scaleReplicas = 5
	f.readings["queue"] = fakeSource{value: 0.91}
	c := f.newController(ctx)
	f.Client.PrependReactor("update", "gputasksets", func(action core.Action) (bool, runtime.Object, error) {
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
	// A server-side apply names no resourceVersion and no spec, so it
	// cannot be refused for the scale write that came just before it.
	var applied gputaskv1.GPUTaskSet
	for _, a := range f.Client.Actions() {
		if controllertest.IsApply(a) && a.GetSubresource() == "status" {
			controllertest.Applied(t, a, &applied)
		}
	}
	if applied.ResourceVersion != "" || applied.Spec.Replicas != nil || applied.Status.DesiredReplicas == nil {
		t.Errorf("status apply with resourceVersion %q, spec.replicas %v, desired %v; want neither of the first two, and the decision",
			applied.ResourceVersion, applied.Spec.Replicas, applied.Status.DesiredReplicas)
	}
}
