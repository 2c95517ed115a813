package taskindex

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

func task(name, owner string) *gputaskv1.GPUTask {
	t := &gputaskv1.GPUTask{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	if owner != "" {
		t.OwnerReferences = []metav1.OwnerReference{{APIVersion: "gputask.io/v1", Kind: "GPUTaskSet", Name: "s", UID: types.UID("uid-" + owner), Controller: ptr.To(true)}}
	}
	return t
}

func TestControlled(t *testing.T) {
	informer := cache.NewSharedIndexInformer(&cache.ListWatch{}, &gputaskv1.GPUTask{}, 0, cache.Indexers{})
	for range 2 {
		// A second controller asking for the index is not an error.
		if err := Add(informer); err != nil {
			t.Fatal(err)
		}
	}
	indexer := informer.GetIndexer()
	for _, obj := range []*gputaskv1.GPUTask{task("a1", "a"), task("a2", "a"), task("b1", "b"), task("orphan", "")} {
		if err := indexer.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Controlled(indexer, "uid-a")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, t := range got {
		names[t.Name] = true
	}
	if len(got) != 2 || !names["a1"] || !names["a2"] {
		t.Errorf("Controlled(uid-a) = %v, want a1 and a2", names)
	}
	if got, _ := Controlled(indexer, "uid-none"); len(got) != 0 {
		t.Errorf("Controlled(uid-none) = %d tasks, want none", len(got))
	}
}
