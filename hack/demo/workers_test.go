package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

func TestWorkerOf(t *testing.T) {
	readyTask := func(annotations map[string]string) *gputaskv1.GPUTask {
		return &gputaskv1.GPUTask{
			ObjectMeta: metav1.ObjectMeta{Annotations: annotations},
			Status: gputaskv1.GPUTaskStatus{Phase: gputaskv1.GPUTaskRunning, Conditions: []metav1.Condition{
				{Type: gputaskv1.ConditionReady, Status: metav1.ConditionTrue},
			}},
		}
	}
	pod := func(ready corev1.ConditionStatus, annotations map[string]string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Annotations: annotations},
			Status:     corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}},
		}
	}
	busy := map[string]string{gputaskv1.AnnotationBusy: "true"}
	draining := map[string]string{gputaskv1.AnnotationDraining: "true"}
	cases := []struct {
		name  string
		task  *gputaskv1.GPUTask
		pod   *corev1.Pod
		want  worker
		state string
	}{
		{"no pod yet", &gputaskv1.GPUTask{}, nil, worker{}, "starting"},
		{"pod loading its model", &gputaskv1.GPUTask{}, pod(corev1.ConditionFalse, nil), worker{}, "starting"},
		{"pod Ready before the task says so", &gputaskv1.GPUTask{}, pod(corev1.ConditionTrue, nil), worker{ready: true}, "idle"},
		{"task Ready", readyTask(nil), pod(corev1.ConditionTrue, nil), worker{ready: true}, "idle"},
		{"busy on the task", readyTask(busy), pod(corev1.ConditionTrue, nil), worker{ready: true, busy: true}, "busy"},
		{"busy on the pod", readyTask(nil), pod(corev1.ConditionTrue, busy), worker{ready: true, busy: true}, "busy"},
		{"busy false is idle", readyTask(map[string]string{gputaskv1.AnnotationBusy: "false"}), nil, worker{ready: true}, "idle"},
		{"draining and busy", readyTask(mergeMaps(busy, draining)), pod(corev1.ConditionTrue, draining),
			worker{ready: true, busy: true, draining: true}, "draining(busy)"},
		{"draining, done", readyTask(draining), nil, worker{ready: true, draining: true}, "draining"},
		{"finished", &gputaskv1.GPUTask{Status: gputaskv1.GPUTaskStatus{Phase: gputaskv1.GPUTaskSucceeded}}, nil, worker{finished: true}, "-"},
	}
	for _, tc := range cases {
		got := workerOf(tc.task, tc.pod)
		if got != tc.want {
			t.Errorf("%s: workerOf = %+v, want %+v", tc.name, got, tc.want)
		}
		if s := got.state(); s != tc.state {
			t.Errorf("%s: state = %q, want %q", tc.name, s, tc.state)
		}
	}
}

func mergeMaps(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func TestCountWorkers(t *testing.T) {
	ws := []worker{
		{},                        // starting
		{},                        // starting
		{ready: true},             // idle
		{ready: true, busy: true}, // busy
		{ready: true, busy: true, draining: true},
		{ready: true, draining: true}, // drained, about to go
		{finished: true, ready: true, busy: true},
	}
	want := workerCounts{starting: 2, ready: 4, busy: 2, draining: 2}
	if got := countWorkers(ws); got != want {
		t.Errorf("countWorkers = %+v, want %+v", got, want)
	}
	if got := countWorkers(nil); got != (workerCounts{}) {
		t.Errorf("countWorkers(nil) = %+v, want zero", got)
	}
}

func TestBusyAt(t *testing.T) {
	ready := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cycle := jobLength + restLength
	at := func(d time.Duration) time.Time { return ready.Add(d) }
	var never time.Time
	cases := []struct {
		name     string
		offset   time.Duration
		draining time.Time
		now      time.Time
		want     bool
	}{
		{"before Ready", 0, never, at(-time.Second), false},
		{"first job starts at once", 0, never, at(0), true},
		{"still in the first job", 0, never, at(jobLength - time.Second), true},
		{"resting", 0, never, at(jobLength), false},
		{"second job", 0, never, at(cycle + time.Second), true},
		{"drained mid-job: finishes it", 0, at(time.Second), at(jobLength - time.Second), true},
		{"drained mid-job: then stops", 0, at(time.Second), at(jobLength), false},
		{"drained mid-job: takes no next job", 0, at(time.Second), at(cycle + time.Second), false},
		{"drained while resting: takes no next job", 0, at(jobLength + time.Second), at(cycle + time.Second), false},
		{"drained in the second job: finishes it", 0, at(cycle + time.Second), at(cycle + 2*time.Second), true},
		{"drain mark older than Ready", 0, at(-time.Second), at(time.Second), false},
		{"offset into its rest: idle at Ready", jobLength + time.Second, never, at(0), false},
		{"offset into its rest: next job", jobLength + time.Second, never, at(restLength), true},
		{"offset into its job: ends early", jobLength - 2*time.Second, never, at(2 * time.Second), false},
		{"offset, drained mid-job: finishes it", jobLength - 2*time.Second, at(0), at(time.Second), true},
		{"offset, drained mid-job: no next job", jobLength - 2*time.Second, at(0), at(restLength + 3*time.Second), false},
	}
	for _, tc := range cases {
		if got := busyAt(ready, tc.offset, tc.draining, tc.now); got != tc.want {
			t.Errorf("%s: busyAt = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestCycleOffset(t *testing.T) {
	seen := map[time.Duration]bool{}
	for _, name := range []string{"a100-elastic-7xk2p", "a100-elastic-9qv4c", "a100-elastic-b2m8n", "a100-elastic-d5r7t"} {
		off := cycleOffset(name)
		if off < 0 || off >= jobLength+restLength {
			t.Errorf("cycleOffset(%s) = %v, want within one cycle", name, off)
		}
		seen[off] = true
	}
	if len(seen) < 2 {
		t.Errorf("4 workers share %d offset(s); want them spread", len(seen))
	}
}

func TestSomeWorkersTakeJobs(t *testing.T) {
	// The demo needs both kinds among a set's first few tasks: idle ones
	// that scale-in prefers and busy ones that it drains.
	jobs, idle, onPod := 0, 0, 0
	for _, name := range []string{"a100-elastic-7xk2p", "a100-elastic-9qv4c", "a100-elastic-b2m8n", "a100-elastic-d5r7t", "a100-elastic-h3w9z", "a100-elastic-k8j2f"} {
		if takesJobs(name) {
			jobs++
			if marksPod(name) {
				onPod++
			}
		} else {
			idle++
		}
	}
	if jobs == 0 || idle == 0 {
		t.Errorf("of 6 workers %d take jobs and %d never do; want some of each", jobs, idle)
	}
	if onPod == 0 || onPod == jobs {
		t.Errorf("of %d busy workers %d mark their pod; want some on the pod and some on the task", jobs, onPod)
	}
}

func TestWithSlowStart(t *testing.T) {
	manifest, err := os.ReadFile(filepath.Join("..", "..", autoscaledSetFile))
	if err != nil {
		t.Fatal(err)
	}
	out, err := withSlowStart(manifest)
	if err != nil {
		t.Fatalf("withSlowStart: %v", err)
	}
	var before, after gputaskv1.GPUTaskSet
	if err := yaml.UnmarshalStrict(manifest, &before); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(out, &after); err != nil {
		t.Fatalf("decoding the result: %v", err)
	}
	env := after.Spec.Template.Spec.Env
	if len(env) != len(before.Spec.Template.Spec.Env)+1 || env[len(env)-1] != slowStartEnv {
		t.Errorf("env = %v, want the file's env and then %v", env, slowStartEnv)
	}
	after.Spec.Template.Spec.Env = before.Spec.Template.Spec.Env
	if before.Name != after.Name || before.Spec.Autoscaling.MaxReplicas != after.Spec.Autoscaling.MaxReplicas ||
		after.Spec.Template.Spec.GPU != before.Spec.Template.Spec.GPU {
		t.Errorf("the rest of the set changed: %+v", after.Spec)
	}
	if _, err := withSlowStart([]byte("spec:\n  replicaz: 3\n")); err == nil {
		t.Error("withSlowStart accepted an unknown field")
	}
}
