package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"

	"github.com/gputask/gputask-controller/pkg/loadindex"
	"github.com/gputask/gputask-controller/pkg/metrics"
	"github.com/gputask/gputask-controller/pkg/server"
)

// Controller is a controller that Run starts while this process leads.
type Controller struct {
	// Name is the controller's identity name.
	Name string
	Run  func(context.Context) error
}

// ControllerContext is what the controllers are built from, as
// kube-controller-manager's ControllerContext is.
type ControllerContext struct {
	Options *Options
	// Clients gives each controller clients of its own, named by its
	// identity.
	Clients   ClientBuilder
	Informers *Informers
	// Destinations is the policy of where load-index sources may connect.
	Destinations *loadindex.DestinationPolicy
}

// NewControllersFunc builds the controllers. They register their informers
// in cc.Informers, which start after it returns.
type NewControllersFunc func(ctx context.Context, cc ControllerContext) ([]Controller, error)

// Run serves the endpoints, starts the informers on every replica (so a new
// leader starts with warm caches), and runs the controllers while this
// process leads. It returns when ctx ends, once everything has stopped.
func Run(ctx context.Context, o *Options, newControllers NewControllersFunc) error {
	logger := klog.FromContext(ctx)
	restConfig, err := clientcmd.BuildConfigFromFlags(o.Master, o.Kubeconfig)
	if err != nil {
		return fmt.Errorf("building kubeconfig: %w", err)
	}
	restConfig.QPS = float32(o.KubeAPIQPS)
	restConfig.Burst = o.KubeAPIBurst
	builder := ClientBuilder{Config: restConfig, KubeContentType: o.KubeAPIContentType}

	informerClients, err := builder.ClientsFor("shared-informers")
	if err != nil {
		return err
	}
	destinations, err := loadindex.NewDestinationPolicy(ctx, loadindex.PolicyOptions{
		AllowedCIDRs: o.LoadIndexAllowedCIDRs, AllowLoopback: o.LoadIndexAllowLoopback,
		APIServerHost: restConfig.Host, Kube: informerClients.Kube,
	})
	if err != nil {
		return fmt.Errorf("building the load-index destination policy: %w", err)
	}
	inf := NewInformers(informerClients, o.InformerResync)
	inf.DiscoverKueue(ctx, informerClients, o.InformerResync)
	inf.DiscoverDRA(ctx, informerClients, o.InformerResync)

	// Controllers are built before the factories start, so that their
	// informers are part of what starts and syncs.
	controllers, err := newControllers(ctx, ControllerContext{Options: o, Clients: builder, Informers: inf, Destinations: destinations})
	if err != nil {
		return err
	}
	electionClients, err := builder.ClientsFor("leader-election")
	if err != nil {
		return err
	}

	var servers server.Group
	defer servers.Shutdown(logger, o.ShutdownGracePeriod)
	metrics.Register()
	metricsHandler, metricsTLS, err := secureMetrics(o, builder)
	if err != nil {
		return err
	}
	if err := servers.Serve(ctx, "metrics", o.MetricsBindAddress, metricsHandler, metricsTLS); err != nil {
		return err
	}
	var ready atomic.Bool
	var watchdog *leaderelection.HealthzAdaptor
	var live []healthz.HealthChecker
	if o.LeaderElection.LeaderElect {
		// The watchdog fails /healthz when this process holds the lease but
		// stopped renewing it, so the kubelet restarts a wedged leader.
		watchdog = leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
		live = append(live, watchdog)
	}
	if err := servers.Serve(ctx, "health probes", o.HealthProbeBindAddress, server.HealthHandler(ready.Load, live...), nil); err != nil {
		return err
	}

	// The informers stop, and Run waits for them, when Run returns for any
	// reason.
	informerCtx, stopInformers := context.WithCancel(ctx)
	defer inf.Shutdown(stopInformers)
	inf.Start(informerCtx)
	go func() {
		if inf.WaitForSync(informerCtx) {
			ready.Store(true)
			logger.Info("Informer caches synced; ready")
		}
	}()

	start := func(ctx context.Context) error { return runControllers(ctx, inf, controllers) }
	if !o.LeaderElection.LeaderElect {
		return start(ctx)
	}
	return RunWithLeaderElection(ctx, o, electionClients, watchdog, start)
}

// runControllers runs every controller until ctx is cancelled and returns
// once all of them have stopped. Only the leader runs it.
func runControllers(ctx context.Context, inf *Informers, controllers []Controller) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, c := range controllers {
		wg.Go(func() {
			if err := c.Run(ctx); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", c.Name, err))
				mu.Unlock()
			}
		})
	}
	// Factories started after new informers were requested start just those.
	inf.Start(ctx)
	wg.Wait()
	return errors.Join(errs...)
}

// secureMetrics is the metrics endpoint's handler and TLS: with
// --metrics-secure, HTTPS to callers the API server authenticates and
// authorizes, on a client of its own; else plain HTTP.
func secureMetrics(o *Options, builder ClientBuilder) (http.Handler, *tls.Config, error) {
	handler := server.MetricsHandler(o.Profiling)
	if !o.MetricsSecure || o.MetricsBindAddress == "0" {
		return handler, nil, nil
	}
	reviews, err := builder.ClientsFor("metrics-auth")
	if err != nil {
		return nil, nil, err
	}
	if handler, err = server.Delegated(handler, reviews.Kube); err != nil {
		return nil, nil, err
	}
	tlsConfig, err := server.TLSConfig(o.MetricsCertFile, o.MetricsKeyFile)
	if err != nil {
		return nil, nil, err
	}
	return handler, tlsConfig, nil
}
