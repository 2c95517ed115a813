package framework

import (
	"context"
	"errors"
	"fmt"
)

// RestartAPIServer stops kube-apiserver with SIGTERM, as a rolling upgrade
// would, and starts it again with the same flags on the same address,
// against the same etcd. Clients keep their address: their requests fail
// for a while and their watches break, and they must recover on their own.
// It returns once the new kube-apiserver is ready.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) error {
	old := cp.Process(BinAPIServer)
	if old == nil {
		return errors.New("restarting kube-apiserver: it is not running")
	}
	old.Stop()
	p, err := cp.startBinary(BinAPIServer, old.cmd.Path, nil, old.cmd.Args[1:]...)
	if err != nil {
		return fmt.Errorf("restarting kube-apiserver: %w", err)
	}
	err = p.waitReady(ctx, apiServerStartTimeout, func(ctx context.Context) bool {
		body, err := cp.Kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok"
	})
	if err != nil {
		return fmt.Errorf("restarting kube-apiserver: %w; last log lines of %s:\n%s", err, p.LogPath, p.LogTail(20))
	}
	return nil
}
