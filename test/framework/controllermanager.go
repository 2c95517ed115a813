package framework

import (
	"context"
	"strings"
)

// StartControllerManager runs one more kube-controller-manager with only the
// named controllers and the extra flags, and waits until it is healthy. A
// benchmark runs the ReplicaSet controller this way, in a process of its own,
// so that its CPU and memory are measured apart from the housekeeping
// controllers that Options.ControllerManager starts. It stops with the
// control plane, or earlier with Stop.
func (cp *ControlPlane) StartControllerManager(ctx context.Context, controllers []string, extra ...string) (*Process, error) {
	args := append([]string{
		"--controllers=" + strings.Join(controllers, ","),
		"--root-ca-file=" + cp.pki.CACert,
		"--service-account-private-key-file=" + cp.pki.SAPrivateKey,
		"--use-service-account-credentials=false",
	}, extra...)
	return cp.startHealthyComponent(ctx, BinControllerManager, args)
}

// startHealthyComponent starts a component with a secure port and waits
// until it is healthy; one that never is, is stopped.
func (cp *ControlPlane) startHealthyComponent(ctx context.Context, bin string, args []string) (*Process, error) {
	p, port, err := cp.startSecureComponent(bin, args)
	if err != nil {
		return nil, err
	}
	if err := cp.waitHealthz(ctx, p, port); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}
