// Package e2e runs the whole system as users would: kube-scheduler places
// the pods of GPUTasks on kwok fake GPU nodes, and the gputask-controller
// runs as a process against the real apiserver.
package e2e

import (
	"context"
	"testing"

	"github.com/gputask/gputask-controller/test/framework"
)

// The cluster: two nodes with 8 A100 GPUs each.
const (
	gpuModel    = "A100"
	gpusPerNode = 8
)

var nodeNames = []string{"a100-1", "a100-2"}

// The package's control plane, its two nodes and its controller. The tests
// that fill those nodes or stop that controller (capacity, completion,
// lifecycle, the controller's crash) run alone, before the others; every
// other test calls t.Parallel(), with a namespace and GPU model of its own
// on this control plane or with a control plane of its own.
var (
	cp         *framework.ControlPlane
	controller *framework.Process
)

func TestMain(m *testing.M) {
	framework.RunMain(m, framework.Options{Scheduler: true, ControllerManager: true, Kwok: true},
		func(ctx context.Context, started *framework.ControlPlane) error {
			cp = started
			for _, name := range nodeNames {
				if _, err := cp.CreateGPUNode(ctx, name, gpuModel, gpusPerNode); err != nil {
					return err
				}
			}
			var err error
			controller, err = cp.StartController(ctx, "--workers=4")
			return err
		})
}
