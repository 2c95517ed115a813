package podspec

import (
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// FuzzBuild feeds random GPUTask specs, and the task templates of random
// GPUTaskSets, through Build: whatever a user stores, the builder returns a
// pod or an error and never panics. `go test` runs the seeds; `go test
// -fuzz FuzzBuild ./pkg/podspec/` explores further.
func FuzzBuild(f *testing.F) {
	for _, seed := range []string{
		`{"spec":{}}`,
		`{"spec":{"gpu":"A100","gpu-amount":2,"cpu":"4","memory":"16Gi","priority":"gpu-high","image":"r:1","command":["run"],"args":["-v"],"env":[{"name":"A","value":"b"}]}}`,
		`{"spec":{"gpu":"A100","gpu-amount":"abc","cpu":-1,"memory":"1Ei"}}`,
		`{"spec":{"gpu-amount":"99999999999999999999","gpuAlternatives":["H100","",""]}}`,
		`{"spec":{"gpu-amount":-3,"cpu":"0.0000001m","memory":"12e999"}}`,
		`{"spec":{"gpu":"A100","template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[]}}}}`,
		`{"spec":{"gpu":"A100","cpu":"2","template":{"spec":{"containers":[{"name":"task","image":"x","resources":{"limits":{"cpu":"3","nvidia.com/gpu":"7"}}},{"name":"side"}],"nodeSelector":{"nvidia.com/gpu.product":"H100"}}}}}`,
		`{"spec":{"template":{"spec":{"containers":[{"name":"other"}],"initContainers":[{"name":"task"}]}}}}`,
		`{"spec":{"replicas":3,"template":{"metadata":{"labels":{"gputask.io/task":"x"}},"spec":{"gpu":"A100","gpu-amount":1}}}}`,
		`{"spec":{"template":{"spec":{"gpu-amount":"1.5","memory":"-1Gi","template":{"spec":{}}}}}}`,
	} {
		f.Add([]byte(seed))
	}
	opts := Options{GPUResourceName: DefaultGPUResourceName, GPULabelKey: DefaultGPULabelKey, DefaultImage: "busybox:1.36"}
	f.Fuzz(func(t *testing.T, data []byte) {
		var task gputaskv1.GPUTask
		if json.Unmarshal(data, &task) == nil {
			task.Name, task.Namespace, task.UID = "fuzz", "default", "uid-fuzz"
			checkBuild(t, &task, opts)
		}
		var set gputaskv1.GPUTaskSet
		if json.Unmarshal(data, &set) == nil {
			tmpl := set.Spec.Template
			checkBuild(t, &gputaskv1.GPUTask{
				ObjectMeta: metav1.ObjectMeta{Name: "fuzz-x7k2p", Namespace: "default", UID: "uid-fuzz", Labels: tmpl.Metadata.Labels},
				Spec:       tmpl.Spec,
			}, opts)
		}
	})
}

func checkBuild(t *testing.T, task *gputaskv1.GPUTask, opts Options) {
	t.Helper()
	pod, err := Build(task, opts)
	if err != nil {
		return
	}
	if pod == nil || pod.Name != task.Name || pod.Namespace != task.Namespace {
		t.Fatalf("Build returned pod %v for task %s/%s", pod, task.Namespace, task.Name)
	}
	if ref := metav1.GetControllerOf(pod); ref == nil || ref.UID != task.UID {
		t.Fatalf("pod's controller reference %v, want the task's UID %s", ref, task.UID)
	}
}
