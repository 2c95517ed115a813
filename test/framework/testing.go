package framework

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// RunMain starts one control plane for a whole test package, runs the tests
// and exits. Binaries missing from bin/ make it fail, never skip. When a test
// fails the control plane's directory (logs, kubeconfig) is kept and printed.
// setup receives the control plane before the tests run; tests reach it
// through a package variable that setup sets.
func RunMain(m *testing.M, opts Options, setup func(context.Context, *ControlPlane) error) {
	os.Exit(runMain(m, opts, setup))
}

func runMain(m *testing.M, opts Options, setup func(context.Context, *ControlPlane) error) int {
	if opts.Logf == nil {
		opts.Logf = func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "framework: "+format+"\n", args...)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	cp, err := Start(ctx, opts)
	if err != nil {
		cancel()
		fmt.Fprintf(os.Stderr, "FAIL: starting the control plane: %v\n", err)
		return 1
	}
	if setup != nil {
		err = setup(ctx, cp)
	}
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: setting up the control plane: %v\n", err)
		fmt.Fprintf(os.Stderr, "control plane logs kept in %s\n", cp.Cleanup(true))
		return 1
	}
	code := m.Run()
	if dir := cp.Cleanup(code != 0); dir != "" {
		fmt.Fprintf(os.Stderr, "control plane logs kept in %s\n", dir)
	}
	return code
}

// StartT starts a control plane for one test; it is stopped when the test
// ends, and its directory kept and logged if the test failed.
func StartT(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	cp, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	// Logf must not be t.Logf once the test is over.
	cp.opts.Logf = nil
	t.Cleanup(func() {
		if dir := cp.Cleanup(t.Failed()); dir != "" {
			t.Logf("control plane logs kept in %s", dir)
		}
	})
	return cp
}

// NamespaceT creates a namespace named after the test, with a random suffix,
// and deletes it when the test ends.
func (cp *ControlPlane) NamespaceT(t testing.TB) string {
	t.Helper()
	name := namespaceName(t.Name())
	ctx := context.Background()
	if err := cp.CreateNamespace(ctx, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cp.Stopped() {
			return
		}
		if err := cp.DeleteNamespace(context.Background(), name); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	return name
}

// namespaceName turns a test name into a valid, unique namespace name.
func namespaceName(testName string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteRune('-')
		}
	}
	base := strings.Trim(b.String(), "-")
	if len(base) > 40 {
		base = strings.Trim(base[:40], "-")
	}
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	return base + "-" + hex.EncodeToString(suffix)
}

// StartControllerT runs the controller for one test and stops it when the
// test ends. Its log is kept with the control plane's.
func (cp *ControlPlane) StartControllerT(t testing.TB, args ...string) *Process {
	t.Helper()
	p, err := cp.StartController(context.Background(), args...)
	if err != nil {
		t.Fatalf("starting the controller: %v", err)
	}
	t.Cleanup(p.Stop)
	return p
}

// ServingAddrT is ServingAddr that fails the test on error, waiting up to
// a minute.
func ServingAddrT(t testing.TB, p *Process, name string) string {
	t.Helper()
	addr, err := ServingAddr(context.Background(), p, name, time.Minute)
	if err != nil {
		t.Fatalf("the address of the controller's %s: %v", name, err)
	}
	return addr
}

// KubectlT runs kubectl and fails the test on error.
func (cp *ControlPlane) KubectlT(t testing.TB, args ...string) string {
	t.Helper()
	out, err := cp.Kubectl(context.Background(), args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// CreateGPUNodeT creates a fake GPU node and deletes it when the test ends.
func (cp *ControlPlane) CreateGPUNodeT(t testing.TB, name, gpuModel string, gpus int) {
	t.Helper()
	if _, err := cp.CreateGPUNode(context.Background(), name, gpuModel, gpus); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cp.Stopped() {
			return
		}
		if err := cp.DeleteNode(context.Background(), name); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
}

// StartPrometheusT runs Prometheus scraping targets for one test and stops it
// when the test ends. Its log and TSDB are kept with the control plane's.
func (cp *ControlPlane) StartPrometheusT(t testing.TB, targets ...string) *Prometheus {
	t.Helper()
	p, err := cp.StartPrometheus(context.Background(), targets...)
	if err != nil {
		t.Fatalf("starting prometheus: %v", err)
	}
	t.Cleanup(p.Stop)
	return p
}
