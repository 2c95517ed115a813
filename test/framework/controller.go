package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

var buildOnce struct {
	sync.Once
	err error
}

// ControllerBinary returns the path of bin/gputask-controller, building it
// from the repository with `go build` when it is missing. The build runs at
// most once per process. `make test-integration` and `make demo` build it
// first, so a stale binary is never used there; when running `go test`
// directly, run `make build` after changing the controller.
func (cp *ControlPlane) ControllerBinary() (string, error) {
	path := filepath.Join(cp.BinDir, BinController)
	buildOnce.Do(func() {
		if _, err := os.Stat(path); err == nil {
			return
		}
		cp.logf("building %s", path)
		cmd := exec.Command("go", "build", "-o", path, ".")
		cmd.Dir = cp.Root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildOnce.err = fmt.Errorf("building %s: %w\n%s", path, err, out)
		}
	})
	return path, buildOnce.err
}

// StartController runs the gputask-controller binary with the admin
// kubeconfig. Its metrics and health servers are off unless args turn them
// on; args come last, so they override the defaults. Load-index sources may
// reach loopback addresses, where the tests serve them. The process is
// stopped with the control plane, or earlier with Stop or Kill.
func (cp *ControlPlane) StartController(ctx context.Context, args ...string) (*Process, error) {
	return cp.StartControllerWithEnv(ctx, nil, args...)
}

// StartControllerWithEnv is StartController with env ("KEY=value") added to
// the process's environment, such as GOMEMLIMIT for a benchmark.
func (cp *ControlPlane) StartControllerWithEnv(ctx context.Context, env []string, args ...string) (*Process, error) {
	path, err := cp.ControllerBinary()
	if err != nil {
		return nil, err
	}
	full := append(cp.controllerArgs(), args...)
	p, err := cp.startBinary(BinController, path, env, full...)
	if err != nil {
		return nil, err
	}
	// A controller that rejects its flags exits at once; say so here rather
	// than as a timeout later.
	select {
	case <-p.Done():
		return nil, fmt.Errorf("%w; last log lines of %s:\n%s", p.ExitError(), p.LogPath, p.LogTail(20))
	case <-time.After(300 * time.Millisecond):
	case <-ctx.Done():
		p.Stop()
		return nil, ctx.Err()
	}
	return p, nil
}

// ServingAddr waits until the controller p logs the address it serves name
// on ("metrics" or "health probes", as pkg/server logs "Serving metrics"
// addr=...) and returns it. A test gives the controller 127.0.0.1:0 and
// reads the port here: a port picked free beforehand could be taken by
// another process before the controller binds it, and the controller would
// exit. It fails if p exits first or timeout passes.
func ServingAddr(ctx context.Context, p *Process, name string, timeout time.Duration) (string, error) {
	line := regexp.MustCompile(`"Serving ` + regexp.QuoteMeta(name) + `" addr="([^"]+)"`)
	var addr string
	err := p.waitReady(ctx, timeout, func(context.Context) bool {
		data, err := os.ReadFile(p.LogPath)
		if m := line.FindSubmatch(data); err == nil && m != nil {
			addr = string(m[1])
		}
		return addr != ""
	})
	return addr, err
}

// ControllerArgs returns the args StartController uses before the caller's,
// for documentation and for the demo's banner.
func (cp *ControlPlane) ControllerArgs() string {
	return strings.Join(cp.controllerArgs(), " ")
}

func (cp *ControlPlane) controllerArgs() []string {
	return []string{
		"--kubeconfig=" + cp.KubeconfigPath,
		"--metrics-bind-address=0",
		"--health-probe-bind-address=0",
		"--load-index-allow-loopback",
		"-v=2",
	}
}
