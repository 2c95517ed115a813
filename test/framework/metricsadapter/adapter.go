// Package metricsadapter is a small External metrics adapter
// (external.metrics.k8s.io/v1beta1) built on
// sigs.k8s.io/custom-metrics-apiserver, for tests that run a real
// HorizontalPodAutoscaler on the local control plane. It runs in the test's
// process and serves what the test's Sources answer.
//
// It serves as a deployed adapter does: TLS with a certificate the
// APIService trusts, delegated authentication (the API server's
// front-proxy client certificate and requestheader identity, checked
// against kube-system/extension-apiserver-authentication, and
// TokenReview) and delegated authorization (SubjectAccessReview, with
// system:masters always allowed: the library's defaults). Its identity at
// the API server is the kubeconfig it is given.
package metricsadapter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/metrics/pkg/apis/external_metrics"
	basecmd "sigs.k8s.io/custom-metrics-apiserver/pkg/cmd"
	"sigs.k8s.io/custom-metrics-apiserver/pkg/provider"
)

// Group and Version are the API the adapter serves; an APIService for
// them sends the HPA controller's requests here.
const (
	Group   = "external.metrics.k8s.io"
	Version = "v1beta1"
)

// Source answers one External metric for one request: the namespace of
// the HPA that asks and its metric selector. An error fails the request,
// and the HPA keeps its count.
type Source func(ctx context.Context, namespace string, selector labels.Selector) (resource.Quantity, error)

// Options configure an adapter.
type Options struct {
	// Address is where it listens; port 0 picks a free one.
	Address netip.AddrPort
	// CertFile and KeyFile are its serving certificate.
	CertFile, KeyFile string
	// Kubeconfig is its identity at the API server, for delegated
	// authentication and authorization; it needs what a deployed adapter's
	// ServiceAccount is bound to: system:auth-delegator, and
	// extension-apiserver-authentication-reader in kube-system.
	Kubeconfig string
	// Metrics are the metrics it serves, by name.
	Metrics map[string]Source
	// Args are more flags of the library (--requestheader-*, --v, ...),
	// after the adapter's own so they win.
	Args []string
}

// Adapter is a running adapter.
type Adapter struct {
	// Addr is where it listens.
	Addr   netip.AddrPort
	cancel context.CancelFunc
	done   chan error
}

// Start starts an adapter and returns once it accepts connections. It
// stops with ctx or Stop.
func Start(ctx context.Context, opts Options) (*Adapter, error) {
	if len(opts.Metrics) == 0 {
		return nil, errors.New("metrics adapter: no metric to serve")
	}
	l, err := net.Listen("tcp", opts.Address.String())
	if err != nil {
		return nil, fmt.Errorf("metrics adapter: %w", err)
	}
	addr := l.Addr().(*net.TCPAddr).AddrPort()
	base := &basecmd.AdapterBase{Name: "gputask-test-metrics-adapter", FlagSet: pflag.NewFlagSet("metrics-adapter", pflag.ContinueOnError)}
	args := append([]string{
		"--secure-port=" + strconv.Itoa(int(addr.Port())),
		"--tls-cert-file=" + opts.CertFile,
		"--tls-private-key-file=" + opts.KeyFile,
		"--authentication-kubeconfig=" + opts.Kubeconfig,
		"--authorization-kubeconfig=" + opts.Kubeconfig,
		"--lister-kubeconfig=" + opts.Kubeconfig,
	}, opts.Args...)
	if err := base.Flags().Parse(args); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("metrics adapter flags: %w", err)
	}
	// Our listener, already bound, so the port is known before the server
	// runs and no other process can take it meanwhile.
	base.SecureServing.Listener = l
	base.WithExternalMetrics(&externalMetrics{metrics: opts.Metrics})
	server, err := base.Server()
	if err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("metrics adapter: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	a := &Adapter{Addr: addr, cancel: cancel, done: make(chan error, 1)}
	go func() { a.done <- server.GenericAPIServer.PrepareRun().RunWithContext(ctx) }()
	if err := a.waitServing(ctx); err != nil {
		a.Stop()
		return nil, err
	}
	return a, nil
}

// waitServing waits until the adapter accepts a TCP connection, or ends.
func (a *Adapter) waitServing(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", a.Addr.String(), time.Second)
		if err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case err := <-a.done:
			a.done <- err
			return fmt.Errorf("metrics adapter stopped while starting: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("metrics adapter at %s not serving after 30s: %w", a.Addr, err)
		}
	}
}

// Stop stops the adapter and waits until it has.
func (a *Adapter) Stop() {
	a.cancel()
	err := <-a.done
	a.done <- err
}

// externalMetrics is the provider the library calls for each request.
type externalMetrics struct {
	metrics map[string]Source
}

var externalMetricsResource = schema.GroupResource{Group: Group, Resource: "externalmetrics"}

// GetExternalMetric answers with one value: one series, labelled with
// what the selector pins down.
func (p *externalMetrics) GetExternalMetric(ctx context.Context, namespace string, selector labels.Selector, info provider.ExternalMetricInfo) (*external_metrics.ExternalMetricValueList, error) {
	source, ok := p.metrics[info.Metric]
	if !ok {
		return nil, provider.NewMetricNotFoundError(externalMetricsResource, info.Metric)
	}
	value, err := source(ctx, namespace, selector)
	if err != nil {
		return nil, fmt.Errorf("metric %s in %s: %w", info.Metric, namespace, err)
	}
	return &external_metrics.ExternalMetricValueList{Items: []external_metrics.ExternalMetricValue{{
		MetricName:   info.Metric,
		MetricLabels: exactLabels(selector),
		Timestamp:    metav1.Now(),
		Value:        value,
	}}}, nil
}

// exactLabels are the label values a selector pins down (key=value, or
// key in (value)): the labels of the one series that answers it.
func exactLabels(selector labels.Selector) map[string]string {
	out := map[string]string{}
	reqs, _ := selector.Requirements()
	for _, r := range reqs {
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			if values := r.Values(); values.Len() == 1 {
				out[r.Key()] = values.UnsortedList()[0]
			}
		}
	}
	return out
}

// ListAllExternalMetrics lists the metric names, sorted.
func (p *externalMetrics) ListAllExternalMetrics() []provider.ExternalMetricInfo {
	names := make([]string, 0, len(p.metrics))
	for name := range p.metrics {
		names = append(names, name)
	}
	sort.Strings(names)
	infos := make([]provider.ExternalMetricInfo, len(names))
	for i, name := range names {
		infos[i] = provider.ExternalMetricInfo{Metric: name}
	}
	return infos
}
