package taskset

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/setplan"
	"github.com/gputask/gputask-controller/pkg/taskindex"
)

// activeTasks lists the tasks the set controls that are not being deleted.
// The index by controller UID finds them without a scan of the namespace, so
// a task left over from an earlier set of the same name, or an orphan
// carrying the label, is never counted or touched; a task must still carry
// the set's label to count.
func (c *Controller) activeTasks(set *gputaskv1.GPUTaskSet) ([]*gputaskv1.GPUTask, error) {
	active, err := taskindex.OfSet(c.tasksIndexer, set)
	if err != nil {
		return nil, fmt.Errorf("listing tasks of gputaskset %s: %w", klog.KObj(set), err)
	}
	return active, nil
}

// taskSelector selects the set's tasks by the gputask.io/taskset label.
func taskSelector(set *gputaskv1.GPUTaskSet) labels.Selector {
	return labels.SelectorFromSet(labels.Set{gputaskv1.LabelTaskSet: set.Name})
}

// replicaError is a failure to create or delete tasks; its reason becomes
// the ReplicaFailure condition's.
type replicaError struct {
	reason string
	err    error
}

func (e *replicaError) Error() string { return e.err.Error() }
func (e *replicaError) Unwrap() error { return e.err }

// manageReplicas carries out the plan. Tasks on disrupted nodes are taken
// out of service first, so their workers stop taking requests as early as
// can be; drains taken back come before any creation, so a scale-up reuses
// warm workers first.
func (c *Controller) manageReplicas(ctx context.Context, set *gputaskv1.GPUTaskSet, plan setplan.Plan) error {
	logger := klog.FromContext(ctx)
	var errs []error
	if d := plan.Disruption; len(d.Drain)+len(d.Delete) > 0 {
		logger.V(2).Info("Taking tasks off nodes being disrupted", "nodes", d.Nodes(), "draining", len(d.Drain), "deleting", len(d.Delete))
		errs = append(errs, c.leaveDisruptedNodes(ctx, set, d))
	}
	if len(plan.Undrain) > 0 {
		logger.V(2).Info("Taking drains back", "desired", plan.Desired, "undraining", len(plan.Undrain))
		errs = append(errs, c.setDraining(ctx, set, plan.Undrain, false, plan.NodeGPUs))
	}
	if len(plan.Drain) > 0 {
		logger.V(2).Info("Draining busy tasks", "desired", plan.Desired, "draining", len(plan.Drain))
		errs = append(errs, c.setDraining(ctx, set, plan.Drain, true, plan.NodeGPUs))
	}
	if plan.Create > 0 {
		logger.V(2).Info("Too few tasks", "desired", plan.Desired, "creating", plan.Create)
		errs = append(errs, c.createTasks(ctx, set, plan.Create))
	}
	if len(plan.Delete) > 0 {
		logger.V(2).Info("Too many tasks", "desired", plan.Desired, "deleting", len(plan.Delete))
		errs = append(errs, c.deleteTasks(ctx, set, plan.Delete, plan.NodeGPUs))
	}
	return errors.Join(errs...)
}

// createTasks creates n tasks in slow-start batches. The creations are
// expected before the first call, because the informer may report a new task
// before Create even returns.
func (c *Controller) createTasks(ctx context.Context, set *gputaskv1.GPUTaskSet, n int) error {
	key := cache.MetaObjectToName(set).String()
	c.expectations.ExpectCreations(key, n)
	var made atomic.Int32
	created, err := slowStartBatch(n, 1, func() error {
		ok, err := c.createTask(ctx, set)
		if ok {
			made.Add(1)
		}
		return err
	})
	// The informer will never report tasks that failed or were not tried;
	// without this the set would wait for the expectations to expire.
	for range n - created {
		c.expectations.CreationObserved(key)
	}
	// One event for the whole step, as the ReplicaSet controller's events
	// end up once aggregated: an event per task would cost as many writes
	// as the tasks themselves. The names are in the V(2) log.
	if m := made.Load(); m > 0 {
		c.recorder.Eventf(set, corev1.EventTypeNormal, gputaskv1.ReasonSuccessfulCreate, "Created %d %s", m, tasksNoun(int(m)))
	}
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Slow start stopped at a failing batch", "created", created, "skipped", n-created)
		return &replicaError{reason: gputaskv1.ReasonFailedCreate, err: fmt.Errorf("creating tasks for gputaskset %s: %w", klog.KObj(set), err)}
	}
	return nil
}

// createTask creates one task from the set's template, and reports whether
// it did.
func (c *Controller) createTask(ctx context.Context, set *gputaskv1.GPUTaskSet) (bool, error) {
	created, err := c.gputaskclientset.GputaskV1().GPUTasks(set.Namespace).Create(ctx, newTask(set), metav1.CreateOptions{})
	if err != nil {
		if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			// Every create fails while the namespace goes away, and the set
			// goes with it: not worth an error, an event or a retry.
			c.expectations.CreationObserved(cache.MetaObjectToName(set).String())
			return false, nil
		}
		c.recorder.Eventf(set, corev1.EventTypeWarning, gputaskv1.ReasonFailedCreate, "Error creating task: %v", err)
		return false, err
	}
	klog.FromContext(ctx).V(2).Info("Created task", "gputask", klog.KObj(created))
	return true, nil
}

// tasksNoun is "task" or "tasks", for an event about n tasks.
func tasksNoun(n int) string {
	if n == 1 {
		return "task"
	}
	return "tasks"
}

// newTask builds a task from the set's template. The template is deep-copied
// so that the new task shares no memory with the cached set.
func newTask(set *gputaskv1.GPUTaskSet) *gputaskv1.GPUTask {
	tmpl := set.Spec.Template.DeepCopy()
	taskLabels := tmpl.Metadata.Labels
	if taskLabels == nil {
		taskLabels = map[string]string{}
	}
	// Set last, so that a template label cannot take the task out of the set.
	taskLabels[gputaskv1.LabelTaskSet] = set.Name
	return &gputaskv1.GPUTask{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    set.Name + "-",
			Namespace:       set.Namespace,
			Labels:          taskLabels,
			Annotations:     tmpl.Metadata.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(set, setKind)},
		},
		Spec: tmpl.Spec,
	}
}

// slowStartBatch calls fn count times in batches of initialBatchSize, then
// double that, and so on, with the calls of a batch running in parallel. It
// stops after the first batch with a failure, so that an error every call
// would hit (a quota, a webhook) costs a handful of calls instead of count.
// It returns how many calls succeeded and the first error.
func slowStartBatch(count, initialBatchSize int, fn func() error) (int, error) {
	successes := 0
	for batch := min(count, initialBatchSize); batch > 0; batch = min(2*batch, count-successes) {
		errs := make(chan error, batch)
		var wg sync.WaitGroup
		for range batch {
			wg.Go(func() {
				if err := fn(); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		successes += batch - len(errs)
		if len(errs) > 0 {
			return successes, <-errs
		}
	}
	return successes, nil
}

// deleteTasks deletes the victims in parallel, as the ReplicaSet controller
// does: the ranking chose them, and the order of the calls changes nothing.
// Each delete is conditional on the task's UID, so a task re-created under
// the same name is never removed by mistake. The event names the nodes the
// victims leave, with the set's GPUs in use on each (use), which is how
// the ranking chose among them.
func (c *Controller) deleteTasks(ctx context.Context, set *gputaskv1.GPUTaskSet, victims []*gputaskv1.GPUTask, use setplan.NodeGPUs) error {
	deleted, err := c.removeTasks(ctx, set, victims)
	if deleted > 0 {
		msg := fmt.Sprintf("Deleted %d %s", deleted, tasksNoun(deleted))
		if nodes := setplan.ExplainNodes(victims, use); nodes != "" {
			msg += "; " + nodes
		}
		c.recorder.Event(set, corev1.EventTypeNormal, gputaskv1.ReasonSuccessfulDelete, msg)
	}
	return err
}

// removeTasks deletes the tasks in parallel, and returns how many it
// deleted; the caller records the event.
func (c *Controller) removeTasks(ctx context.Context, set *gputaskv1.GPUTaskSet, victims []*gputaskv1.GPUTask) (int, error) {
	if len(victims) == 0 {
		return 0, nil
	}
	key := cache.MetaObjectToName(set).String()
	names := make([]string, 0, len(victims))
	for _, t := range victims {
		names = append(names, t.Name)
	}
	c.expectations.ExpectDeletions(key, names...)

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		errs    []error
		deleted int
	)
	for _, t := range victims {
		wg.Go(func() {
			ok, err := c.removeTask(ctx, set, t)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				// The informer will never report a delete that did not happen.
				c.expectations.DeletionObserved(key, t.Name)
				errs = append(errs, err)
			}
			if ok {
				deleted++
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return deleted, &replicaError{reason: gputaskv1.ReasonFailedDelete, err: fmt.Errorf("deleting tasks of gputaskset %s: %w", klog.KObj(set), errors.Join(errs...))}
	}
	return deleted, nil
}

// removeTask deletes one task, and reports whether it did. A task that is
// already gone is not an error.
func (c *Controller) removeTask(ctx context.Context, set *gputaskv1.GPUTaskSet, task *gputaskv1.GPUTask) (bool, error) {
	uid := task.UID
	err := c.gputaskclientset.GputaskV1().GPUTasks(task.Namespace).Delete(ctx, task.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid},
	})
	switch {
	case apierrors.IsNotFound(err):
		c.expectations.DeletionObserved(cache.MetaObjectToName(set).String(), task.Name)
		return false, nil
	case err != nil:
		c.recorder.Eventf(set, corev1.EventTypeWarning, gputaskv1.ReasonFailedDelete, "Error deleting task %s: %v", task.Name, err)
		return false, fmt.Errorf("deleting gputask %s: %w", klog.KObj(task), err)
	}
	klog.FromContext(ctx).V(2).Info("Deleted task", "gputask", klog.KObj(task))
	return true, nil
}
