package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// StartScheduler runs one more kube-scheduler with the
// KubeSchedulerConfiguration in configPath (for example
// artifacts/scheduler/gputask-pack.yaml), connected as admin and without
// leader election, and waits until it is healthy. The pods that name one of
// its profiles in spec.schedulerName are its own; the default scheduler
// (Options.Scheduler) keeps the others. It stops with the control plane, or
// earlier with Stop.
func (cp *ControlPlane) StartScheduler(ctx context.Context, configPath string) (*Process, error) {
	b, err := os.ReadFile(configPath)
	if err != nil {
		return nil, fmt.Errorf("reading the scheduler configuration: %w", err)
	}
	var config map[string]any
	if err := yaml.Unmarshal(b, &config); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", configPath, err)
	}
	// With --config kube-scheduler ignores --kubeconfig: the file must say it.
	conn, _ := config["clientConnection"].(map[string]any)
	if conn == nil {
		conn = map[string]any{}
	}
	conn["kubeconfig"] = cp.KubeconfigPath
	config["clientConnection"] = conn
	out, err := yaml.Marshal(config)
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(cp.Dir, "scheduler-*-"+filepath.Base(configPath))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Write(out); err != nil {
		return nil, fmt.Errorf("writing the scheduler configuration: %w", err)
	}
	// --leader-elect=false (from startSecureComponent) still applies with
	// --config, and overrides the file's leader election.
	return cp.startHealthyComponent(ctx, BinScheduler, []string{"--config=" + f.Name()})
}
