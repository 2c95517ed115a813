package app

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/gputask/gputask-controller"

// TestImportsNoController: the runner builds clients, informers and
// servers, and main hands them to the controllers; a controller package
// imported here, even for one helper, would make the runner depend on the
// code it runs. A controller package is one of this module that runs a
// workqueue (the GPUTask controller, the set controller, the autoscaler).
func TestImportsNoController(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, " ")
		if pkg != module && !strings.HasPrefix(pkg, module+"/") {
			continue
		}
		for _, imp := range strings.Fields(imports) {
			if imp == "k8s.io/client-go/util/workqueue" {
				t.Errorf("pkg/app depends on %s, which runs a workqueue: move what the runner needs out of the controller", pkg)
			}
		}
	}
}
