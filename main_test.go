package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gputask/gputask-controller/pkg/controllertest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

func TestFlagValidation(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "defaults"},
		{name: "integration-test flags", args: []string{"--kubeconfig=/k", "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0"}},
		{name: "servers off", args: []string{"--metrics-bind-address=0", "--health-probe-bind-address=0"}},
		{name: "workers 0", args: []string{"--workers=0"}, wantErr: "--workers must be at least 1"},
		{name: "qps 0", args: []string{"--kube-api-qps=0"}, wantErr: "--kube-api-qps"},
		{name: "json", args: []string{"--kube-api-content-type=application/json"}},
		{name: "unknown content type", args: []string{"--kube-api-content-type=application/yaml"}, wantErr: "--kube-api-content-type must be application/vnd.kubernetes.protobuf or application/json"},
		{name: "bad resource name", args: []string{"--gpu-resource-name=nvidia.com/g p u"}, wantErr: "--gpu-resource-name"},
		{name: "empty image", args: []string{"--default-image="}, wantErr: "--default-image"},
		{name: "negative interval", args: []string{"--reschedule-interval=-1s"}, wantErr: "--reschedule-interval"},
		{name: "no concurrent reschedules", args: []string{"--max-concurrent-reschedules=0"}, wantErr: "--max-concurrent-reschedules"},
		{name: "bad bind address", args: []string{"--metrics-bind-address=8080"}, wantErr: "--metrics-bind-address"},
		{name: "lease shorter than renew", args: []string{"--leader-elect", "--leader-elect-lease-duration=5s"}, wantErr: "--leader-elect-lease-duration"},
		{name: "renew shorter than retry", args: []string{"--leader-elect", "--leader-elect-renew-deadline=2s"}, wantErr: "--leader-elect-renew-deadline"},
		{name: "leader election timings ignored when off", args: []string{"--leader-elect-lease-duration=1s"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := flagSet()
			cfg := bindFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := cfg.validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Errorf("validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("validate() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func flagSet() *flag.FlagSet { return flag.NewFlagSet("gputask-controller", flag.ContinueOnError) }

// TestGPUTaintTolerationFlag: the GPU taint toleration is on unless the flag
// turns it off.
func TestGPUTaintTolerationFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, true},
		{[]string{"--gpu-taint-toleration=false"}, false},
		{[]string{"--gpu-taint-toleration"}, true},
	} {
		fs := flagSet()
		cfg := bindFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got := cfg.controllerOptions().GPUTaintToleration; got != tc.want {
			t.Errorf("%v: GPUTaintToleration = %v, want %v", tc.args, got, tc.want)
		}
	}
}

func TestHealthEndpoints(t *testing.T) {
	var ready atomic.Bool
	srv := httptest.NewServer(healthMux(&ready, nil))
	defer srv.Close()

	get := func(path string) int {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d, want 200", code)
	}
	if code := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before sync = %d, want 503", code)
	}
	ready.Store(true)
	if code := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after sync = %d, want 200", code)
	}
}

// TestProfilingFlag serves pprof on the metrics address only when asked.
func TestProfilingFlag(t *testing.T) {
	for _, profiling := range []bool{false, true} {
		srv := httptest.NewServer(metricsMux(profiling))
		resp, err := http.Get(srv.URL + "/debug/pprof/cmdline")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		srv.Close()
		want := http.StatusNotFound
		if profiling {
			want = http.StatusOK
		}
		if resp.StatusCode != want {
			t.Errorf("--profiling=%v: /debug/pprof/cmdline = %d, want %d", profiling, resp.StatusCode, want)
		}
	}
}

// TestLeaderElection runs the controllers only once the Lease is held, and
// releases the Lease on shutdown so a successor need not wait it out.
func TestLeaderElection(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fs := flagSet()
	cfg := bindFlags(fs)
	if err := fs.Parse([]string{"--leader-elect", "--leader-elect-namespace=gputask-system",
		"--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=100ms"}); err != nil {
		t.Fatal(err)
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	kube := k8sfake.NewClientset()
	started := make(chan struct{})
	done := make(chan error, 1)
	var holderWhileStopping string
	go func() {
		done <- runWithLeaderElection(ctx, cfg, clients{kube: kube}, nil, func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			// The controllers stop before the Lease is released, so no new
			// leader starts while this one may still write.
			lease, err := kube.CoordinationV1().Leases("gputask-system").Get(context.Background(), "gputask-controller", metav1.GetOptions{})
			if err != nil {
				return err
			}
			holderWhileStopping = ptr.Deref(lease.Spec.HolderIdentity, "")
			return nil
		})
	}()

	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("controllers not started after acquiring the lease")
	}
	lease, err := kube.CoordinationV1().Leases("gputask-system").Get(ctx, "gputask-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("lease not created: %v", err)
	}
	if holder := ptr.Deref(lease.Spec.HolderIdentity, ""); !strings.Contains(holder, "_") {
		t.Errorf("holder identity %q, want hostname_uuid", holder)
	}

	cancel()
	controllertest.ExpectStopped(t, done, "runWithLeaderElection()")
	lease, err = kube.CoordinationV1().Leases("gputask-system").Get(context.Background(), "gputask-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holder := ptr.Deref(lease.Spec.HolderIdentity, ""); holder != "" {
		t.Errorf("lease still held by %q after shutdown, want released", holder)
	}
	if holderWhileStopping == "" {
		t.Error("lease released before the controllers stopped")
	}
}

// TestLeaderElectionCancelledAsLeaseIsWon ends the context at the moment the
// Lease is created, the window in which the elector starts the controllers in
// a goroutine of its own. Run with -race.
func TestLeaderElectionCancelledAsLeaseIsWon(t *testing.T) {
	for range 10 {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		fs := flagSet()
		cfg := bindFlags(fs)
		if err := fs.Parse([]string{"--leader-elect", "--leader-elect-namespace=gputask-system",
			"--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=100ms"}); err != nil {
			t.Fatal(err)
		}
		kube := k8sfake.NewClientset()
		kube.PrependReactor("create", "leases", func(core.Action) (bool, runtime.Object, error) {
			cancel()
			return false, nil, nil
		})
		var starts atomic.Int32
		err := runWithLeaderElection(ctx, cfg, clients{kube: kube}, nil, func(ctx context.Context) error {
			starts.Add(1)
			<-ctx.Done()
			return errors.New("controllers stopped")
		})
		// Either the controllers never started, or they did and their
		// error is returned after they stopped.
		if n := starts.Load(); (n == 0) != (err == nil) || n > 1 {
			t.Errorf("controllers started %d times, runWithLeaderElection() = %v", n, err)
		}
		cancel()
	}
}

// TestShutdownBeforeCacheSync: a SIGTERM before the caches synced is a
// normal shutdown, with and without leader election.
func TestShutdownBeforeCacheSync(t *testing.T) {
	// An API server that answers nothing, so no cache ever syncs.
	requests := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case requests <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)

	for _, args := range [][]string{nil, {"--leader-elect", "--leader-elect-namespace=gputask-system"}} {
		t.Run(fmt.Sprintf("args=%v", args), func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			fs := flagSet()
			cfg := bindFlags(fs)
			if err := fs.Parse(append([]string{"--master=" + srv.URL, "--metrics-bind-address=0", "--health-probe-bind-address=0"}, args...)); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- run(ctx, cfg) }()
			<-requests
			cancel()
			controllertest.ExpectStopped(t, done, "run()")
		})
	}
}

func TestHelp(t *testing.T) {
	fs := flagSet()
	var out strings.Builder
	fs.SetOutput(&out)
	cfg := newCommandLine(fs)
	if err := fs.Parse([]string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("Parse(--help) = %v, want flag.ErrHelp", err)
	}
	help := out.String()
	if first, _, _ := strings.Cut(help, "\n"); !strings.Contains(first, "gputask-controller") || !strings.Contains(first, "README") {
		t.Errorf("--help opens with %q, want what the program is and where the README is", first)
	}
	own, logging := strings.Index(help, "-workers"), strings.Index(help, "Logging flags (klog)")
	if own < 0 || logging < 0 || own > logging || !strings.Contains(help[logging:], "-v value") {
		t.Errorf("--help lists the project's flags, then klog's; got:\n%s", help)
	}
	// Both sets of flags parse.
	if err := fs.Parse([]string{"--workers=3", "-v=0"}); err != nil || cfg.workers != 3 {
		t.Errorf("Parse = %v, workers %d", err, cfg.workers)
	}

	// The README's flag table says what --help says.
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	usage := fs.Lookup("workers").Usage
	if !strings.Contains(string(readme), "| `--workers` | 2 | "+usage+" |") {
		t.Errorf("README.md's --workers row does not say %q", usage)
	}
}
