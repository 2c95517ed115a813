package controllertest

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// TaskOption changes a task that Task builds.
type TaskOption interface{ applyToTask(*gputaskv1.GPUTask) }

// SetOption changes a set that Set builds.
type SetOption interface{ applyToSet(*gputaskv1.GPUTaskSet) }

// TaskFunc is a TaskOption written in place, for a variant only one test
// needs.
type TaskFunc func(*gputaskv1.GPUTask)

func (f TaskFunc) applyToTask(t *gputaskv1.GPUTask) { f(t) }

// SetFunc is a SetOption written in place.
type SetFunc func(*gputaskv1.GPUTaskSet)

func (f SetFunc) applyToSet(s *gputaskv1.GPUTaskSet) { f(s) }

// MetaFunc changes the object metadata, of a task or a set alike.
type MetaFunc func(metav1.Object)

func (f MetaFunc) applyToTask(t *gputaskv1.GPUTask)   { f(t) }
func (f MetaFunc) applyToSet(s *gputaskv1.GPUTaskSet) { f(s) }

// Task is a GPUTask in the default namespace with the UID uid-<name> and
// generation 1, changed by opts in order.
func Task(name string, opts ...TaskOption) *gputaskv1.GPUTask {
	t := &gputaskv1.GPUTask{
		TypeMeta:   metav1.TypeMeta{APIVersion: gputaskv1.SchemeGroupVersion.String(), Kind: "GPUTask"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault, UID: types.UID("uid-" + name), Generation: 1},
	}
	for _, o := range opts {
		o.applyToTask(t)
	}
	return t
}

// Set is a GPUTaskSet in the default namespace with the UID uid-<name> and
// generation 1, changed by opts in order.
func Set(name string, opts ...SetOption) *gputaskv1.GPUTaskSet {
	s := &gputaskv1.GPUTaskSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: gputaskv1.SchemeGroupVersion.String(), Kind: "GPUTaskSet"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault, UID: types.UID("uid-" + name), Generation: 1},
	}
	for _, o := range opts {
		o.applyToSet(s)
	}
	return s
}

// Labels adds labels.
func Labels(labels map[string]string) MetaFunc {
	return func(o metav1.Object) {
		l := o.GetLabels()
		if l == nil {
			l = map[string]string{}
		}
		for k, v := range labels {
			l[k] = v
		}
		o.SetLabels(l)
	}
}

// Annotation adds the annotation key=value.
func Annotation(key, value string) MetaFunc {
	return func(o metav1.Object) {
		a := o.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		a[key] = value
		o.SetAnnotations(a)
	}
}

// Generation sets metadata.generation.
func Generation(g int64) MetaFunc {
	return func(o metav1.Object) { o.SetGeneration(g) }
}

// CreatedAt sets the creation timestamp.
func CreatedAt(t time.Time) MetaFunc {
	return func(o metav1.Object) { o.SetCreationTimestamp(metav1.NewTime(t)) }
}

// Deleting marks the object as being deleted at t, held by finalizer.
func Deleting(t time.Time, finalizer string) MetaFunc {
	return func(o metav1.Object) {
		o.SetDeletionTimestamp(ptr.To(metav1.NewTime(t)))
		o.SetFinalizers([]string{finalizer})
	}
}

// TaskSpec sets the task's spec to a copy of spec.
func TaskSpec(spec gputaskv1.GPUTaskSpec) TaskFunc {
	return func(t *gputaskv1.GPUTask) { t.Spec = *spec.DeepCopy() }
}

// ControlledBy makes set the task's controller, as OwnedTask does: the
// set's namespace, label and controller reference.
func ControlledBy(set *gputaskv1.GPUTaskSet) TaskFunc {
	return func(t *gputaskv1.GPUTask) {
		t.Namespace = set.Namespace
		Labels(map[string]string{gputaskv1.LabelTaskSet: set.Name})(t)
		t.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(set, gputaskv1.SchemeGroupVersion.WithKind("GPUTaskSet"))}
	}
}

// TaskStatus sets the task's status to a copy of status.
func TaskStatus(status gputaskv1.GPUTaskStatus) TaskFunc {
	return func(t *gputaskv1.GPUTask) { t.Status = *status.DeepCopy() }
}

// Replicas sets spec.replicas.
func Replicas(n int32) SetFunc {
	return func(s *gputaskv1.GPUTaskSet) { s.Spec.Replicas = ptr.To(n) }
}

// Template sets the set's task template to a copy of tmpl.
func Template(tmpl gputaskv1.GPUTaskTemplateSpec) SetFunc {
	return func(s *gputaskv1.GPUTaskSet) { s.Spec.Template = *tmpl.DeepCopy() }
}

// Autoscaling sets spec.autoscaling to a copy of as.
func Autoscaling(as gputaskv1.AutoscalingSpec) SetFunc {
	return func(s *gputaskv1.GPUTaskSet) { s.Spec.Autoscaling = as.DeepCopy() }
}
