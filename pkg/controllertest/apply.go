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

// ApplyAction is an expected server-side apply of name's subresource (the
// object itself when empty) whose content the test checks on its own, such
// as with Applied.
func ApplyAction(resource schema.GroupVersionResource, namespace, name, subresource string) core.Action {
	return core.NewPatchSubresourceAction(resource, namespace, name, types.ApplyPatchType, nil, subresource)
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

// checkApply compares the fields that the apply a sends in its status with
// the same fields of the expected object.
func checkApply(t testing.TB, expected runtime.Object, a core.PatchAction) {
	t.Helper()
	var got, want map[string]any
	if err := json.Unmarshal(a.GetPatch(), &got); err != nil {
		t.Errorf("apply %s: %v", a.GetName(), err)
		return
	}
	data, err := json.Marshal(expected)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	gotStatus, _ := got["status"].(map[string]any)
	wantStatus, _ := want["status"].(map[string]any)
	sent := map[string]any{}
	for k, v := range gotStatus {
		if k == "conditions" {
			continue
		}
		sent[k] = v
	}
	expect := map[string]any{}
	for k, v := range sent {
		if w, ok := wantStatus[k]; ok {
			expect[k] = w
		} else {
			// The expected object leaves out what is empty (omitempty).
			expect[k] = zeroLike(v)
		}
	}
	sentConds, expectConds := conditionsByType(gotStatus["conditions"]), conditionsByType(wantStatus["conditions"])
	for typ := range expectConds {
		if _, ok := sentConds[typ]; !ok {
			delete(expectConds, typ)
		}
	}
	if !equality.Semantic.DeepEqual(expect, sent) || !equality.Semantic.DeepEqual(expectConds, sentConds) {
		t.Errorf("apply %s/status %s: status differs (-want +got):\n%s%s", a.GetResource().Resource, a.GetName(),
			diff.Diff(expect, sent), diff.Diff(expectConds, sentConds))
	}
}

func conditionsByType(v any) map[string]any {
	out := map[string]any{}
	list, _ := v.([]any)
	for _, c := range list {
		if m, ok := c.(map[string]any); ok {
			out[m["type"].(string)] = m
		}
	}
	return out
}

// zeroLike is the zero value of a decoded JSON value's type.
func zeroLike(v any) any {
	switch v.(type) {
	case float64:
		return float64(0)
	case string:
		return ""
	case bool:
		return false
	}
	return nil
}
