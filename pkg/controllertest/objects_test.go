package controllertest

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

func TestTaskAndSetOptions(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	set := Set("web", Replicas(3), Generation(3), Annotation("a", "1"),
		Template(gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{GPU: "A100"}}))
	if set.UID != "uid-web" || set.Namespace != metav1.NamespaceDefault || *set.Spec.Replicas != 3 ||
		set.Generation != 3 || set.Annotations["a"] != "1" || set.Spec.Template.Spec.GPU != "A100" {
		t.Errorf("Set() = %+v", set)
	}

	task := Task("web-0", ControlledBy(set), Labels(map[string]string{"app": "x"}), CreatedAt(at),
		TaskSpec(set.Spec.Template.Spec), TaskFunc(func(t *gputaskv1.GPUTask) { t.Status.NodeName = "n" }))
	ref := metav1.GetControllerOf(task)
	if ref == nil || ref.UID != set.UID || task.Labels[gputaskv1.LabelTaskSet] != "web" || task.Labels["app"] != "x" ||
		!task.CreationTimestamp.Time.Equal(at) || task.Spec.GPU != "A100" || task.Status.NodeName != "n" || task.Generation != 1 {
		t.Errorf("Task() = %+v", task)
	}
	// Options copy what they are given.
	task.Spec.GPU = "H100"
	if set.Spec.Template.Spec.GPU != "A100" {
		t.Error("TaskSpec shares the spec it was given")
	}
}
