package podspec

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// TestWorkloadExamples builds the pod of every example in
// artifacts/examples/workloads: none of them may be an invalid spec.
func TestWorkloadExamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "artifacts", "examples", "workloads", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no workload examples: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var typed struct{ Kind string }
			if err := yaml.Unmarshal(raw, &typed); err != nil {
				t.Fatal(err)
			}
			task := &gputaskv1.GPUTask{}
			if typed.Kind == "GPUTask" {
				if err := yaml.UnmarshalStrict(raw, task); err != nil {
					t.Fatal(err)
				}
			} else {
				set := &gputaskv1.GPUTaskSet{}
				if err := yaml.UnmarshalStrict(raw, set); err != nil {
					t.Fatal(err)
				}
				task = &gputaskv1.GPUTask{ObjectMeta: set.ObjectMeta, Spec: set.Spec.Template.Spec}
			}
			o := opts
			o.GPUTaintToleration = true
			pod, err := Build(task, o)
			if err != nil {
				t.Fatalf("Build(): %v", err)
			}
			if d := FirstDifference(pod, pod); d != "" {
				t.Errorf("a pod differs from itself at %s", d)
			}
		})
	}
}
