package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gputask/gputask-controller/pkg/controllertest"
)

// parse binds fresh options to a flag set, parses args and completes them.
func parse(t *testing.T, args ...string) *Options {
	t.Helper()
	o := NewOptions()
	fs := flag.NewFlagSet("gputask-controller", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("Parse(%v): %v", args, err)
	}
	o.Complete()
	return o
}

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
		{name: "lease name", args: []string{"--leader-elect", "--leader-elect-resource-name=bad_name"}, wantErr: "--leader-elect-resource-name"},
		{name: "lease lock", args: []string{"--leader-elect", "--leader-elect-resource-lock=endpoints"}, wantErr: "--leader-elect-resource-lock"},
		{name: "deprecated lease name", args: []string{"--leader-elect", "--leader-elect-id=Bad"}, wantErr: "--leader-elect-resource-name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := parse(t, tc.args...).Validate()
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

// TestLeaderElectionFlagAliases: the earlier spellings set the same Lease
// as kube-controller-manager's names.
func TestLeaderElectionFlagAliases(t *testing.T) {
	o := parse(t, "--leader-elect-id=old-name", "--leader-elect-namespace=old-ns")
	if o.LeaderElection.ResourceName != "old-name" || o.LeaderElection.ResourceNamespace != "old-ns" {
		t.Errorf("deprecated flags gave lease %s/%s, want old-ns/old-name", o.LeaderElection.ResourceNamespace, o.LeaderElection.ResourceName)
	}
	o = parse(t, "--leader-elect-resource-name=new-name", "--leader-elect-resource-namespace=new-ns")
	if o.LeaderElection.ResourceName != "new-name" || o.LeaderElection.ResourceNamespace != "new-ns" {
		t.Errorf("flags gave lease %s/%s, want new-ns/new-name", o.LeaderElection.ResourceNamespace, o.LeaderElection.ResourceName)
	}
	if o := parse(t); o.LeaderElection.ResourceName != DefaultLeaseName || o.LeaderElection.ResourceNamespace == "" {
		t.Errorf("default lease %s/%s, want a namespace and %s", o.LeaderElection.ResourceNamespace, o.LeaderElection.ResourceName, DefaultLeaseName)
	}
}

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
		if got := parse(t, tc.args...).GPUTaintToleration; got != tc.want {
			t.Errorf("%v: GPUTaintToleration = %v, want %v", tc.args, got, tc.want)
		}
	}
}

func TestTaskWorkersFlag(t *testing.T) {
	o := parse(t)
	if o.TaskWorkers != DefaultTaskWorkers || o.Workers != 2 {
		t.Errorf("defaults: task workers %d, workers %d; want %d and 2", o.TaskWorkers, o.Workers, DefaultTaskWorkers)
	}
	if err := parse(t, "--task-workers=0").Validate(); err == nil || !strings.Contains(err.Error(), "--task-workers must be at least 1") {
		t.Errorf("Validate() = %v, want the --task-workers error", err)
	}
}

// TestLeaderElection runs the controllers only once the Lease is held, and
// releases the Lease on shutdown so a successor need not wait it out.
func TestLeaderElection(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cfg := parse(t, "--leader-elect", "--leader-elect-resource-namespace=gputask-system",
		"--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=100ms")
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	kube := k8sfake.NewClientset()
	started := make(chan struct{})
	done := make(chan error, 1)
	var holderWhileStopping string
	go func() {
		done <- RunWithLeaderElection(ctx, cfg, Clients{Kube: kube}, nil, func(ctx context.Context) error {
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
	controllertest.ExpectStopped(t, done, "RunWithLeaderElection()")
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
		cfg := parse(t, "--leader-elect", "--leader-elect-resource-namespace=gputask-system",
			"--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=100ms")
		kube := k8sfake.NewClientset()
		kube.PrependReactor("create", "leases", func(core.Action) (bool, runtime.Object, error) {
			cancel()
			return false, nil, nil
		})
		var starts atomic.Int32
		err := RunWithLeaderElection(ctx, cfg, Clients{Kube: kube}, nil, func(ctx context.Context) error {
			starts.Add(1)
			<-ctx.Done()
			return errors.New("controllers stopped")
		})
		// Either the controllers never started, or they did and their
		// error is returned after they stopped.
		if n := starts.Load(); (n == 0) != (err == nil) || n > 1 {
			t.Errorf("controllers started %d times, RunWithLeaderElection() = %v", n, err)
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

	for _, args := range [][]string{nil, {"--leader-elect", "--leader-elect-resource-namespace=gputask-system"}} {
		t.Run(fmt.Sprintf("args=%v", args), func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			cfg := parse(t, append([]string{"--master=" + srv.URL, "--metrics-bind-address=0", "--health-probe-bind-address=0"}, args...)...)
			done := make(chan error, 1)
			go func() { done <- Run(ctx, cfg, noControllers) }()
			<-requests
			cancel()
			controllertest.ExpectStopped(t, done, "run()")
		})
	}
}

func noControllers(context.Context, ControllerContext) ([]Controller, error) { return nil, nil }
