// Package server holds the controller's HTTP endpoints: /metrics (with the
// pprof profiles when asked for) and the kubelet's /healthz and /readyz. The
// health handlers are the API server's own (healthz), and the profiles are
// net/http/pprof's at the paths routes.Profiling gives them, so the endpoints
// answer as every Kubernetes component's do.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/apiserver/pkg/server/mux"
	"k8s.io/klog/v2"

	"github.com/gputask/gputask-controller/pkg/metrics"
)

// MetricsHandler serves /metrics and, with profiling on, Go's pprof profiles
// under /debug/pprof/, as kube-controller-manager's --profiling does.
func MetricsHandler(profiling bool) http.Handler {
	m := mux.NewPathRecorderMux("gputask-controller-metrics")
	m.Handle("/metrics", metrics.Handler())
	if profiling {
		installProfiling(m)
	}
	return m
}

// installProfiling registers Go's pprof handlers where the API server's
// routes.Profiling does. That package is not imported for them: with it
// comes most of an API server (gRPC, OpenTelemetry, CEL), about half the
// binary, which every replica would pay in memory.
func installProfiling(m *mux.PathRecorderMux) {
	m.UnlistedHandleFunc("/debug/pprof", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/debug/pprof/", http.StatusFound)
	})
	m.UnlistedHandlePrefix("/debug/pprof/", http.HandlerFunc(pprof.Index))
	m.UnlistedHandleFunc("/debug/pprof/profile", pprof.Profile)
	m.UnlistedHandleFunc("/debug/pprof/symbol", pprof.Symbol)
	m.UnlistedHandleFunc("/debug/pprof/trace", pprof.Trace)
}

// HealthHandler serves /healthz (the process lives and, when leading, still
// renews its lease: the checks given) and /readyz (ready reports that the
// informer caches have synced).
func HealthHandler(ready func() bool, live ...healthz.HealthChecker) http.Handler {
	m := mux.NewPathRecorderMux("gputask-controller-health")
	healthz.InstallHandler(m, append([]healthz.HealthChecker{healthz.PingHealthz}, live...)...)
	healthz.InstallReadyzHandler(m, healthz.NamedCheck("informer-sync", func(*http.Request) error {
		if !ready() {
			return errors.New("informer caches not synced")
		}
		return nil
	}))
	return m
}

// Group runs HTTP servers and shuts them down together.
type Group struct {
	servers []*http.Server
	wg      sync.WaitGroup
}

// Serve listens on addr before returning, so the bound address (port 0 picks
// one) can be logged and a bad address fails start-up. "0" serves nothing.
// With tlsConfig it serves HTTPS.
func (g *Group) Serve(ctx context.Context, name, addr string, handler http.Handler, tlsConfig *tls.Config) error {
	logger := klog.FromContext(ctx)
	if addr == "0" {
		logger.Info("Not serving "+name, "reason", "bind address is 0")
		return nil
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listening for %s on %s: %w", name, addr, err)
	}
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	g.servers = append(g.servers, srv)
	logger.Info("Serving "+name, "addr", ln.Addr().String())
	g.wg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "Server stopped", "server", name)
		}
	})
	return nil
}

// Shutdown gives the servers grace to finish their requests, then waits for
// them.
func (g *Group) Shutdown(logger klog.Logger, grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	for _, srv := range g.servers {
		if err := srv.Shutdown(ctx); err != nil {
			logger.Error(err, "Shutting down HTTP server")
		}
	}
	g.wg.Wait()
}
