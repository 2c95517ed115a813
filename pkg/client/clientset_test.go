package client_test

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	applyv1 "github.com/gputask/gputask-controller/pkg/generated/applyconfiguration/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/generated/clientset/versioned"
	"github.com/gputask/gputask-controller/pkg/generated/clientset/versioned/fake"
)

const (
	setManager        = "gputaskset-controller"
	autoscalerManager = "gputask-autoscaler"
)

func condition(typ string, status metav1.ConditionStatus, reason string) *metav1apply.ConditionApplyConfiguration {
	return metav1apply.Condition().WithType(typ).WithStatus(status).WithReason(reason).
		WithMessage(reason).WithLastTransitionTime(metav1.Now())
}

// TestApplyStatusKeepsEachManagersFields shows that the fake clientset tracks
// managed fields for GPUTaskSet status, as the API server does: two field
// managers apply different status fields and conditions, and each keeps what
// it applied whatever the other applies next.
func TestApplyStatusKeepsEachManagersFields(t *testing.T) {
	ctx := context.Background()
	clientset := fake.NewClientset(&gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: "render", Namespace: "team-a"},
		Spec:       gputaskv1.GPUTaskSetSpec{Template: gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{Image: "render:1"}}},
	})
	sets := clientset.GputaskV1().GPUTaskSets("team-a")
	applyStatus := func(manager string, status *applyv1.GPUTaskSetStatusApplyConfiguration, force bool) error {
		t.Helper()
		_, err := sets.ApplyStatus(ctx, applyv1.GPUTaskSet("render", "team-a").WithStatus(status),
			metav1.ApplyOptions{FieldManager: manager, Force: force})
		return err
	}
	get := func() *gputaskv1.GPUTaskSet {
		t.Helper()
		set, err := sets.Get(ctx, "render", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		return set
	}

	if err := applyStatus(setManager, applyv1.GPUTaskSetStatus().
		WithReplicas(3).WithReadyReplicas(2).
		WithConditions(condition(gputaskv1.ConditionReplicaFailure, metav1.ConditionTrue, "FailedCreate")), true); err != nil {
		t.Fatalf("set controller's apply: %v", err)
	}
	if err := applyStatus(autoscalerManager, applyv1.GPUTaskSetStatus().
		WithLoadIndex("0.83").WithDesiredReplicas(4).
		WithConditions(condition(gputaskv1.ConditionScalingActive, metav1.ConditionTrue, "ValidLoadIndex")), true); err != nil {
		t.Fatalf("autoscaler's apply: %v", err)
	}

	set := get()
	st := set.Status
	if st.Replicas != 3 || st.ReadyReplicas != 2 {
		t.Errorf("set controller's fields after the autoscaler's apply: replicas %d ready %d, want 3 and 2", st.Replicas, st.ReadyReplicas)
	}
	if st.LoadIndex != "0.83" || st.DesiredReplicas == nil || *st.DesiredReplicas != 4 {
		t.Errorf("autoscaler's fields: loadIndex %q desiredReplicas %v, want 0.83 and 4", st.LoadIndex, st.DesiredReplicas)
	}
	for _, typ := range []string{gputaskv1.ConditionReplicaFailure, gputaskv1.ConditionScalingActive} {
		if meta.FindStatusCondition(st.Conditions, typ) == nil {
			t.Errorf("condition %s missing from %+v", typ, st.Conditions)
		}
	}
	if set.Spec.Template.Spec.Image != "render:1" {
		t.Errorf("status applies changed the spec: image %q", set.Spec.Template.Spec.Image)
	}
	owned := fieldsByManager(t, set)
	if !strings.Contains(owned[setManager], `"f:replicas"`) || strings.Contains(owned[setManager], `"f:loadIndex"`) {
		t.Errorf("set controller owns %s", owned[setManager])
	}
	if !strings.Contains(owned[autoscalerManager], `"f:loadIndex"`) || strings.Contains(owned[autoscalerManager], `"f:readyReplicas"`) {
		t.Errorf("autoscaler owns %s", owned[autoscalerManager])
	}

	// The set controller applies again without readyReplicas and its
	// condition: they go, as fields a manager stops applying do, and the
	// autoscaler's stay.
	if err := applyStatus(setManager, applyv1.GPUTaskSetStatus().WithReplicas(4), true); err != nil {
		t.Fatalf("set controller's second apply: %v", err)
	}
	st = get().Status
	if st.Replicas != 4 || st.ReadyReplicas != 0 || meta.FindStatusCondition(st.Conditions, gputaskv1.ConditionReplicaFailure) != nil {
		t.Errorf("set controller's second apply: replicas %d ready %d conditions %+v, want 4, 0 and no ReplicaFailure", st.Replicas, st.ReadyReplicas, st.Conditions)
	}
	if st.LoadIndex != "0.83" || st.DesiredReplicas == nil || *st.DesiredReplicas != 4 ||
		meta.FindStatusCondition(st.Conditions, gputaskv1.ConditionScalingActive) == nil {
		t.Errorf("the set controller's apply removed the autoscaler's fields: %+v", st)
	}

	// A manager that applies another's field without force gets a conflict,
	// and the field keeps its owner's value.
	err := applyStatus(autoscalerManager, applyv1.GPUTaskSetStatus().WithLoadIndex("0.83").WithDesiredReplicas(4).
		WithConditions(condition(gputaskv1.ConditionScalingActive, metav1.ConditionTrue, "ValidLoadIndex")).
		WithReplicas(9), false)
	if !apierrors.IsConflict(err) {
		t.Errorf("autoscaler applying the set controller's replicas: got %v, want a conflict", err)
	}
	if got := get().Status.Replicas; got != 4 {
		t.Errorf("replicas after the refused apply: %d, want 4", got)
	}
}

func fieldsByManager(t *testing.T, obj metav1.Object) map[string]string {
	t.Helper()
	owned := map[string]string{}
	for _, mf := range obj.GetManagedFields() {
		if mf.Operation != metav1.ManagedFieldsOperationApply || mf.FieldsV1 == nil {
			continue
		}
		owned[mf.Manager] += string(mf.FieldsV1.Raw)
	}
	return owned
}

// applyRenderPool stands for a program's own code: it declares the render
// pool it wants with server-side apply and leaves spec.replicas to the
// autoscaler, so the two never fight over the count.
func applyRenderPool(ctx context.Context, clientset versioned.Interface, namespace string, maxReplicas int32) (*gputaskv1.GPUTaskSet, error) {
	set := applyv1.GPUTaskSet("render", namespace).
		WithLabels(map[string]string{"app": "render"}).
		WithSpec(applyv1.GPUTaskSetSpec().
			WithTemplate(applyv1.GPUTaskTemplateSpec().
				WithSpec(applyv1.GPUTaskSpec().
					WithGPU("NVIDIA-A100-SXM4-80GB").
					WithGPUAmount(intstr.FromInt32(1)).
					WithImage("registry.example/render:1.4"))).
			WithAutoscaling(applyv1.AutoscalingSpec().
				WithMinReplicas(1).
				WithMaxReplicas(maxReplicas).
				WithMetrics(applyv1.MetricSpec().
					WithName("load").
					WithHTTP(applyv1.HTTPSource().
						WithURL("https://render-backend/load").
						WithValueLocation("data.load_balance")).
					WithUpThreshold(resource.MustParse("0.8")).
					WithDownThreshold(resource.MustParse("0.3")))))
	return clientset.GputaskV1().GPUTaskSets(namespace).Apply(ctx, set,
		metav1.ApplyOptions{FieldManager: "render-pipeline", Force: true})
}

// TestUserCode is a model for testing one's own code against the generated
// fake clientset: run the code, then check the objects, their field owners,
// and the requests the code made.
func TestUserCode(t *testing.T) {
	ctx := context.Background()
	clientset := fake.NewClientset()

	if _, err := applyRenderPool(ctx, clientset, "team-a", 8); err != nil {
		t.Fatalf("first apply: %v", err)
	}

	// The autoscaler scales the set; on a cluster it writes spec.replicas
	// through the scale subresource as its own field manager.
	set, err := clientset.GputaskV1().GPUTaskSets("team-a").Get(ctx, "render", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	set.Spec.Replicas = ptr.To[int32](5)
	if _, err := clientset.GputaskV1().GPUTaskSets("team-a").Update(ctx, set, metav1.UpdateOptions{FieldManager: autoscalerManager}); err != nil {
		t.Fatalf("autoscaler's update: %v", err)
	}
	clientset.ClearActions()

	got, err := applyRenderPool(ctx, clientset, "team-a", 12)
	if err != nil {
		t.Fatalf("second apply: %v", err)
	}
	if got.Spec.Autoscaling == nil || got.Spec.Autoscaling.MaxReplicas != 12 {
		t.Errorf("maxReplicas after the second apply: %+v, want 12", got.Spec.Autoscaling)
	}
	if got.Spec.Replicas == nil || *got.Spec.Replicas != 5 {
		t.Errorf("the program's apply changed the autoscaler's replicas to %v, want 5 kept", got.Spec.Replicas)
	}
	if got.Labels["app"] != "render" {
		t.Errorf("labels %v, want app=render", got.Labels)
	}

	// The program wrote with one apply patch and read nothing first.
	actions := clientset.Actions()
	if len(actions) != 1 {
		t.Fatalf("the program made %d requests, want 1: %v", len(actions), actions)
	}
	patch, ok := actions[0].(clienttesting.PatchAction)
	if !ok || patch.GetVerb() != "patch" || patch.GetPatchType() != types.ApplyPatchType ||
		patch.GetResource().Resource != "gputasksets" || patch.GetName() != "render" {
		t.Errorf("the program's request: %#v, want an apply patch of gputasksets/render", actions[0])
	}
}
