// Package taskindex indexes the GPUTask cache by the set that controls each
// task, so a set's tasks are found without scanning every task of its
// namespace.
package taskindex

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// ByController names the index of tasks by their controller's UID.
const ByController = "gputask.io/controller-uid"

// controllerUID is the index function: the UID of the task's controller
// reference, none for an orphan.
func controllerUID(obj any) ([]string, error) {
	task, ok := obj.(*gputaskv1.GPUTask)
	if !ok {
		return nil, nil
	}
	ref := metav1.GetControllerOf(task)
	if ref == nil {
		return nil, nil
	}
	return []string{string(ref.UID)}, nil
}

// Add adds the index to the task informer, once however many controllers
// ask. It must be called before the informer starts.
func Add(informer cache.SharedIndexInformer) error {
	if _, ok := informer.GetIndexer().GetIndexers()[ByController]; ok {
		return nil
	}
	if err := informer.AddIndexers(cache.Indexers{ByController: controllerUID}); err != nil {
		return fmt.Errorf("adding the %s index to the gputask informer: %w", ByController, err)
	}
	return nil
}

// Controlled returns the cached tasks whose controller reference has uid.
// The caller still checks the reference's kind: a UID alone says nothing of
// what it belongs to.
func Controlled(indexer cache.Indexer, uid string) ([]*gputaskv1.GPUTask, error) {
	objs, err := indexer.ByIndex(ByController, uid)
	if err != nil {
		return nil, fmt.Errorf("reading the %s index: %w", ByController, err)
	}
	tasks := make([]*gputaskv1.GPUTask, 0, len(objs))
	for _, obj := range objs {
		if task, ok := obj.(*gputaskv1.GPUTask); ok {
			tasks = append(tasks, task)
		}
	}
	return tasks, nil
}

// OfSet returns the set's tasks that are not being deleted: the cached tasks
// whose controller reference is this very set (UID and kind), in its
// namespace and labelled with its name, as the set's selector selects. Every
// controller finds a set's tasks this way.
func OfSet(indexer cache.Indexer, set *gputaskv1.GPUTaskSet) ([]*gputaskv1.GPUTask, error) {
	tasks, err := Controlled(indexer, string(set.UID))
	if err != nil {
		return nil, err
	}
	active := tasks[:0]
	for _, t := range tasks {
		// The label test is what the set's selector selects, without
		// building a label set per task: this runs over every task of the
		// set on every sync.
		ref := metav1.GetControllerOf(t)
		if t.DeletionTimestamp == nil && t.Namespace == set.Namespace && t.Labels[gputaskv1.LabelTaskSet] == set.Name &&
			ref.UID == set.UID && gputaskv1.IsRefTo(ref, "GPUTaskSet") {
			active = append(active, t)
		}
	}
	return active, nil
}
