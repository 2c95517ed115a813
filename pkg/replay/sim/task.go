package sim

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// TaskOf is the GPUTask a worker is at now.
func TaskOf(w *Worker, now time.Time) *gputaskv1.GPUTask {
	t := &gputaskv1.GPUTask{
		ObjectMeta: metav1.ObjectMeta{
			Name:              w.Name,
			CreationTimestamp: metav1.NewTime(w.Created),
			Annotations:       map[string]string{},
		},
		Status: gputaskv1.GPUTaskStatus{Phase: gputaskv1.GPUTaskRunning, PodName: w.Name, NodeName: w.NodeName(now)},
	}
	if !w.Bound(now) {
		t.Status.Phase = gputaskv1.GPUTaskPending
	}
	if w.Busy() {
		t.Annotations[gputaskv1.AnnotationBusy] = "true"
	}
	if w.Draining {
		t.Annotations[gputaskv1.AnnotationDraining] = "true"
		t.Annotations[gputaskv1.AnnotationDrainStartedAt] = w.DrainStarted.UTC().Format(time.RFC3339Nano)
	}
	// The condition's transition time is when the worker was created or
	// became Ready: the start-up time the SLO policy measures.
	ready, since := metav1.ConditionFalse, w.Created
	if w.Ready(now) {
		ready, since = metav1.ConditionTrue, w.ReadyAt
	}
	meta.SetStatusCondition(&t.Status.Conditions, metav1.Condition{Type: gputaskv1.ConditionReady, Status: ready, Reason: "Modelled", LastTransitionTime: metav1.NewTime(since)})
	return t
}
