package controllertest

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/diff"
	core "k8s.io/client-go/testing"
)

// IsApply reports whether a is a server-side apply.
func IsApply(a core.Action) bool {
	p, ok := a.(core.PatchAction)
	return ok && p.GetPatchType() == types.ApplyPatchType
}

// verb is the action's verb as a user reads it: "apply" for a server-side
// apply, which the fake records as a patch.
func verb(a core.Action) string {
	if IsApply(a) {
		return "apply"
	}
	return a.GetVerb()
}

// ApplyStatusAction is an expected server-side apply of the status of
// name whose body is exactly applied, an apply configuration: the whole
// set of fields the field manager is to own after the write, no more and
// no fewer. A field the controller leaves out, or sends beyond these,
// fails CheckAction.
func ApplyStatusAction(t testing.TB, resource schema.GroupVersionResource, namespace, name string, applied any) core.Action {
	t.Helper()
	body, err := json.Marshal(applied)
	if err != nil {
		t.Fatalf("encoding the expected apply of %s: %v", name, err)
	}
	return core.NewPatchSubresourceAction(resource, namespace, name, types.ApplyPatchType, body, "status")
}

// ResourceVersionOf is the resourceVersion that the apply a sends as its
// precondition, "" for none.
func ResourceVersionOf(t testing.TB, a core.Action) string {
	t.Helper()
	var body struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if !IsApply(a) {
		t.Fatalf("%s is not a server-side apply", Describe([]core.Action{a}))
	}
	if err := json.Unmarshal(a.(core.PatchAction).GetPatch(), &body); err != nil {
		t.Fatalf("decoding the apply: %v", err)
	}
	return body.Metadata.ResourceVersion
}

// ApplyAnyStatusAction is an expected server-side apply of the status of
// name whose body the test checks on its own (as the autoscaler's tests do
// from the object the apply left); CheckAction then compares its target
// only.
func ApplyAnyStatusAction(resource schema.GroupVersionResource, namespace, name string) core.Action {
	return core.NewPatchSubresourceAction(resource, namespace, name, types.ApplyPatchType, nil, "status")
}

// Applied decodes the object that a server-side apply sent into into, and
// fails the test if it is not one.
func Applied(t testing.TB, a core.Action, into runtime.Object) {
	t.Helper()
	if !IsApply(a) {
		t.Fatalf("%s is not a server-side apply", Describe([]core.Action{a}))
	}
	if err := json.Unmarshal(a.(core.PatchAction).GetPatch(), into); err != nil {
		t.Fatalf("decoding the applied object: %v", err)
	}
}

// checkApply compares the whole body of the apply a with the expected
// one, field by field as decoded JSON, so that key order does not count
// and a field sent or left out does. A resourceVersion, a precondition
// rather than a field anyone owns, is compared only when the expected
// body has one.
func checkApply(t testing.TB, expected, actual core.PatchAction) {
	t.Helper()
	if expected.GetPatch() == nil {
		if actual.GetName() != expected.GetName() {
			t.Errorf("apply of %s, want one of %s", actual.GetName(), expected.GetName())
		}
		return
	}
	var got, want map[string]any
	if err := json.Unmarshal(actual.GetPatch(), &got); err != nil {
		t.Errorf("apply %s: %v", actual.GetName(), err)
		return
	}
	if err := json.Unmarshal(expected.GetPatch(), &want); err != nil {
		t.Fatalf("expected apply %s: %v", expected.GetName(), err)
	}
	if wantMeta, _ := want["metadata"].(map[string]any); wantMeta != nil && wantMeta["resourceVersion"] == nil {
		if gotMeta, _ := got["metadata"].(map[string]any); gotMeta != nil {
			delete(gotMeta, "resourceVersion")
		}
	}
	if actual.GetName() != expected.GetName() || !equality.Semantic.DeepEqual(want, got) {
		t.Errorf("apply %s/%s %s: body differs (-want +got):\n%s", actual.GetResource().Resource, actual.GetSubresource(),
			actual.GetName(), diff.Diff(want, got))
	}
}
