package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BinHelm is the Helm client that `make tools` builds into bin/.
const BinHelm = "helm"

// Helm runs bin/helm against the control plane and returns its stdout.
// Helm's configuration, cache and data go to a directory of the control
// plane's, so that a developer's repositories and plugins play no part and
// nothing is left behind.
func (cp *ControlPlane) Helm(ctx context.Context, args ...string) (string, error) {
	home := filepath.Join(cp.Dir, "helm-home")
	cmd := exec.CommandContext(ctx, filepath.Join(cp.BinDir, BinHelm), args...)
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+cp.KubeconfigPath,
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
