package main

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
)

// TestStatusOwnerUpgradedFromUpdate: a task whose status an earlier
// version wrote with Update gets its status applied, and the fields that
// Update owned are handed to the apply manager, so that one manager owns
// each field and a field the controller stops applying goes.
func TestStatusOwnerUpgradedFromUpdate(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	task, _ := f.addTaskWithPod(newTask("render"), corev1.PodRunning, "gpu-1")
	stale := task.DeepCopy()
	stale.ResourceVersion = "3"
	stale.Status.NodeName, stale.Status.Devices = "gpu-0", []string{"gpu-0/gpu-7"}
	stale.ManagedFields = []metav1.ManagedFieldsEntry{{
		Manager: ControllerName, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "gputask.io/v1",
		Subresource: "status", FieldsType: "FieldsV1",
		FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{".":{},"f:devices":{},"f:nodeName":{},"f:phase":{}}}`)},
	}}
	f.Objects[0], f.Cached[0] = stale, stale
	f.ExpectApplyStatus(task)
	f.newController(ctx)
	if err := f.Sync(ctx, key(task)); err != nil {
		t.Fatal(err)
	}
	actions := controllertest.FilterInformerActions(f.Client.Actions())
	if len(actions) != 3 {
		t.Fatalf("actions = %s, want an apply of the status, a patch of the managed fields and the apply again", controllertest.Describe(actions))
	}
	controllertest.CheckAction(t, f.Actions[0], actions[0])
	if p, ok := actions[1].(core.PatchAction); !ok || p.GetPatchType() != types.JSONPatchType || p.GetSubresource() != "" {
		t.Fatalf("second action = %s, want a JSON patch of the task", controllertest.Describe(actions[1:]))
	}
	controllertest.CheckAction(t, f.Actions[0], actions[2])

	// The patch hands the Update's fields to the apply manager of the
	// status subresource, at the version the apply returned. (The fake
	// tracker files an apply of the status under no subresource, so the
	// removal of the Update's last fields by the second apply happens on
	// an API server only.)
	var patch []struct {
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(actions[1].(core.PatchAction).GetPatch(), &patch); err != nil || len(patch) != 2 {
		t.Fatalf("patch = %s (%v), want the managed fields and the resourceVersion", actions[1].(core.PatchAction).GetPatch(), err)
	}
	var entries []metav1.ManagedFieldsEntry
	if err := json.Unmarshal(patch[0].Value, &entries); err != nil || patch[0].Path != "/metadata/managedFields" {
		t.Fatalf("patch %s = %s (%v)", patch[0].Path, patch[0].Value, err)
	}
	var statusOwners []string
	for _, e := range entries {
		if e.Subresource == "status" {
			statusOwners = append(statusOwners, e.Manager+"/"+string(e.Operation)+" "+string(e.FieldsV1.Raw))
		}
	}
	// The apply took nodeName, whose value it changed; the Update still
	// shared phase, and alone had devices.
	want := ControllerName + `/Apply {"f:status":{".":{},"f:devices":{},"f:phase":{}}}`
	if len(statusOwners) != 1 || statusOwners[0] != want {
		t.Errorf("status managers = %q, want only %q", statusOwners, want)
	}
	got, err := f.Client.GputaskV1().GPUTasks(task.Namespace).Get(ctx, task.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Once handed over, a later write is the apply alone.
	f.Update(got)
	moved := podWith(task, corev1.PodSucceeded, "gpu-1")
	moved.ResourceVersion = "2"
	f.Update(moved)
	f.Actions = nil
	f.ExpectApplyStatus(withStatus(got, gputaskv1.GPUTaskSucceeded, "gpu-1"))
	f.Run(ctx, key(task))
}
