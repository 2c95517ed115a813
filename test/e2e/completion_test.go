package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/kwok"
)

// TestTaskCompletion lets fake containers end (the kwok stages read
// GPUTASK_FAKE_EXIT_CODE from the task's env): exit 0 makes the task
// Succeeded, exit 2 with reschedulePolicy Never leaves it Failed, with the
// same single pod in both cases.
func TestTaskCompletion(t *testing.T) {
	ns := cp.NamespaceT(t)
	ctx := context.Background()
	tasks := cp.GPUTask.GputaskV1().GPUTasks(ns)
	amount := intstr.FromInt32(1)
	cases := []struct {
		name, exitCode string
		want           gputaskv1.GPUTaskPhase
	}{
		{"succeeds", "0", gputaskv1.GPUTaskSucceeded},
		{"fails", "2", gputaskv1.GPUTaskFailed},
	}
	for _, tc := range cases {
		_, err := tasks.Create(ctx, &gputaskv1.GPUTask{
			ObjectMeta: metav1.ObjectMeta{Name: tc.name},
			Spec: gputaskv1.GPUTaskSpec{
				GPU: gpuModel, GPUAmount: &amount,
				ReschedulePolicy: gputaskv1.RescheduleNever,
				Env:              []corev1.EnvVar{{Name: kwok.FakeExitCodeEnv, Value: tc.exitCode}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range cases {
		var task *gputaskv1.GPUTask
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
			var err error
			task, err = tasks.Get(ctx, tc.name, metav1.GetOptions{})
			return err == nil && task.Status.Phase == tc.want, nil
		})
		if err != nil {
			t.Errorf("task %s did not reach %s (last status %+v): %v", tc.name, tc.want, task.Status, err)
			continue
		}
		if pods := podsOf(t, ns, tc.name); len(pods) != 1 {
			t.Errorf("task %s has pods %v, want its one pod kept", tc.name, pods)
		}
	}
}
