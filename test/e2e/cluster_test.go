package e2e

// The cluster the tests run on. Helpers that take the control plane as an
// argument serve tests that run their own controller with special flags and
// so need a control plane of their own: a controller acts on every
// namespace, and two of them on one control plane would both reconcile
// everything. The others work on the package's control plane (main_test.go),
// where each test has its own namespace and, for a pool, its own fake GPU
// nodes with a GPU model nobody else asks for, so the tests run in parallel
// without sharing GPUs.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gputask/gputask-controller/test/framework"
)

const (
	// waitTimeout bounds each wait for the cluster to settle, a scaling
	// step or a condition.
	waitTimeout = 60 * time.Second
)

// gpuNode is a fake GPU node to create.
type gpuNode struct {
	name, model string
	gpus        int
}

// startCluster starts a control plane for one test, with the scheduler,
// the controller manager (garbage collection) and kwok, and creates nodes.
// No gputask-controller runs on it yet.
func startCluster(t *testing.T, nodes ...gpuNode) *framework.ControlPlane {
	t.Helper()
	c := framework.StartT(t, framework.Options{Scheduler: true, ControllerManager: true, Kwok: true})
	for _, n := range nodes {
		c.CreateGPUNodeT(t, n.name, n.model, n.gpus)
	}
	return c
}

// createGPUNodes creates n fake nodes with gpus GPUs each on the package's
// control plane, of a GPU model named after the namespace, and returns the
// model.
func createGPUNodes(t *testing.T, ns string, n, gpus int) string {
	t.Helper()
	model := "gpu-" + ns
	for i := range n {
		cp.CreateGPUNodeT(t, fmt.Sprintf("%s-%d", ns, i), model, gpus)
	}
	return model
}

// applyDeployWithoutDeployment applies what `kubectl kustomize
// artifacts/deploy` renders, less the Deployment: the controller runs as a
// process here, with the ServiceAccount's rights.
func applyDeployWithoutDeployment(t *testing.T, c *framework.ControlPlane, dir string) {
	t.Helper()
	ctx := context.Background()
	rendered := c.KubectlT(t, "kustomize", dir)
	var kept []string
	for _, doc := range strings.Split(rendered, "\n---\n") {
		if !kindDeployment.MatchString(doc) {
			kept = append(kept, doc)
		}
	}
	if len(kept) == len(strings.Split(rendered, "\n---\n")) {
		t.Fatalf("no Deployment in the rendered kustomization:\n%s", rendered)
	}
	out, err := c.KubectlWithInput(ctx, []byte(strings.Join(kept, "\n---\n")), "apply", "-f", "-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("applied:\n%s", out)
}

// waitLeaseHolder waits until the Lease's holder satisfies ok and returns it.
func waitLeaseHolder(t *testing.T, c *framework.ControlPlane, ns, name string, ok func(string) bool) string {
	t.Helper()
	var holder string
	framework.Poll(t, 30*time.Second, fmt.Sprintf("holder of lease %s/%s", ns, name), func(ctx context.Context) (bool, string) {
		lease, err := c.Kube.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		holder = ptr.Deref(lease.Spec.HolderIdentity, "")
		return ok(holder), "holder " + holder
	})
	return holder
}
