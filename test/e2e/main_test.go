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
