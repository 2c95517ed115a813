package framework

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

const modulePath = "github.com/gputask/gputask-controller"

// Names of the binaries that `make tools` builds into bin/, and of the
// controller that `make build` puts next to them.
const (
	BinEtcd              = "etcd"
	BinAPIServer         = "kube-apiserver"
	BinScheduler         = "kube-scheduler"
	BinControllerManager = "kube-controller-manager"
	BinKubectl           = "kubectl"
	BinKwok              = "kwok"
	// BinPrometheus is started by the tests of the Prometheus load-index
	// source only, through StartPrometheus.
	BinPrometheus = "prometheus"
	// BinKueue is started by the tests that run under Kueue, through
	// StartKueue.
	BinKueue = "kueue"
	// BinKarpenter is Karpenter's kwok provider, started by the test of how
	// many nodes a scale-in leaves up, through StartKarpenter.
	BinKarpenter  = "karpenter"
	BinController = "gputask-controller"
)

// RepoRoot returns the root of the gputask-controller module, found by
// walking up from the working directory. Tests run in their package directory
// and the demo in the repository root, so both find it.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the repository root: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module "+modulePath+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("finding the repository root: no go.mod of " + modulePath + " above the working directory")
		}
		dir = parent
	}
}

// BinDir returns where the control-plane binaries are: $GPUTASK_BIN_DIR (set
// by the Makefile) or else <repository root>/bin.
func BinDir(root string) string {
	if dir := os.Getenv("GPUTASK_BIN_DIR"); dir != "" {
		return dir
	}
	return filepath.Join(root, "bin")
}

// CheckBinaries reports every named binary missing from binDir. Tests fail on
// this error rather than skip, so that CI can never pass without having run
// against a real control plane.
func CheckBinaries(binDir string, names ...string) error {
	var errs []error
	for _, name := range names {
		path := filepath.Join(binDir, name)
		info, err := os.Stat(path)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s is missing: run make tools", path))
		case info.IsDir() || info.Mode()&0o111 == 0:
			errs = append(errs, fmt.Errorf("%s is not an executable file: run make tools", path))
		}
	}
	return errors.Join(errs...)
}
