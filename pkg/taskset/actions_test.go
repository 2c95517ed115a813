package taskset

import (
	"slices"
	"strings"

	core "k8s.io/client-go/testing"
)

// sortDeletes returns actions with each run of consecutive deletes sorted by
// name: the deletes of a scale-in run in parallel, so their order is not
// part of what a test can expect.
func sortDeletes(actions []core.Action) []core.Action {
	out := slices.Clone(actions)
	isDelete := func(a core.Action) bool { return a.GetVerb() == "delete" }
	for i := 0; i < len(out); {
		if !isDelete(out[i]) {
			i++
			continue
		}
		j := i
		for j < len(out) && isDelete(out[j]) {
			j++
		}
		slices.SortStableFunc(out[i:j], func(a, b core.Action) int {
			return strings.Compare(a.(core.DeleteAction).GetName(), b.(core.DeleteAction).GetName())
		})
		i = j
	}
	return out
}
