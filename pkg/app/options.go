// Package app runs the controllers, as kube-controller-manager's app package
// does. It holds the options that the flags fill, the clients and informers
// the controllers share, leader election, and the HTTP servers. The
// controllers themselves are built by the caller (main.go), and this
// package imports none of them (imports_test.go checks).
package app

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	componentbaseconfig "k8s.io/component-base/config"
	componentbaseoptions "k8s.io/component-base/config/options"
	componentbasevalidation "k8s.io/component-base/config/validation"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/loadindex"
	"github.com/gputask/gputask-controller/pkg/podspec"
	"github.com/gputask/gputask-controller/pkg/reschedule"
)

const (
	// DefaultTaskWorkers is how many tasks are synced at once. A task's sync
	// is mostly one API call, so the pod creates of a large set go as fast
	// as the client's rate limit allows only with many calls in flight, as
	// the ReplicaSet controller's parallel creates have.
	DefaultTaskWorkers = 64
	// DefaultLeaseName names the leader-election Lease.
	DefaultLeaseName = "gputask-controller"

	// inClusterNamespaceFile holds the pod's namespace when running in a cluster.
	inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
)

// Options are every flag's value.
type Options struct {
	Kubeconfig   string
	Master       string
	Workers      int
	TaskWorkers  int
	KubeAPIQPS   float64
	KubeAPIBurst int
	// KubeAPIContentType is the encoding of Kubernetes' own kinds; the
	// gputask.io kinds are custom resources, always JSON.
	KubeAPIContentType string

	GPUResourceName          string
	GPULabelKey              string
	DefaultImage             string
	GPUTaintToleration       bool
	GPUAllocation            string
	DRADeviceClass           string
	DRAModelAttribute        string
	RescheduleInterval       time.Duration
	PendingTimeout           time.Duration
	NodeNotReadyTimeout      time.Duration
	MaxConcurrentReschedules int

	// LeaderElection is bound to kube-controller-manager's --leader-elect*
	// flags by component-base.
	LeaderElection     componentbaseconfig.LeaderElectionConfiguration
	MetricsBindAddress string
	// MetricsSecure serves /metrics over HTTPS to authenticated, authorized
	// callers only; MetricsCertFile and MetricsKeyFile are its certificate,
	// self-signed when empty.
	MetricsSecure          bool
	MetricsCertFile        string
	MetricsKeyFile         string
	HealthProbeBindAddress string
	Profiling              bool
	InformerResync         time.Duration
	ShutdownGracePeriod    time.Duration

	LoadIndexAllowedCIDRs  []string
	LoadIndexAllowLoopback bool
	LoadIndexAllowPOST     bool
}

// NewOptions returns the options with their defaults.
func NewOptions() *Options {
	return &Options{
		Workers:                  2,
		TaskWorkers:              DefaultTaskWorkers,
		KubeAPIQPS:               50,
		KubeAPIBurst:             100,
		KubeAPIContentType:       runtime.ContentTypeProtobuf,
		GPUResourceName:          string(podspec.DefaultGPUResourceName),
		GPULabelKey:              podspec.DefaultGPULabelKey,
		DefaultImage:             podspec.DefaultImage,
		GPUTaintToleration:       true,
		GPUAllocation:            string(gputaskv1.GPUAllocationExtendedResource),
		DRADeviceClass:           podspec.DefaultDeviceClass,
		DRAModelAttribute:        podspec.DefaultModelAttribute,
		RescheduleInterval:       10 * time.Minute,
		PendingTimeout:           5 * time.Minute,
		NodeNotReadyTimeout:      time.Minute,
		MaxConcurrentReschedules: reschedule.DefaultMaxConcurrent,
		LeaderElection: componentbaseconfig.LeaderElectionConfiguration{
			LeaseDuration: metav1.Duration{Duration: 15 * time.Second},
			RenewDeadline: metav1.Duration{Duration: 10 * time.Second},
			RetryPeriod:   metav1.Duration{Duration: 2 * time.Second},
			ResourceLock:  resourcelock.LeasesResourceLock,
			ResourceName:  DefaultLeaseName,
		},
		MetricsBindAddress:     ":8080",
		MetricsSecure:          true,
		HealthProbeBindAddress: ":8081",
		ShutdownGracePeriod:    10 * time.Second,
	}
}

// AddFlags binds the options to fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig. Only required if out-of-cluster.")
	fs.StringVar(&o.Master, "master", o.Master, "The address of the Kubernetes API server. Overrides any value in kubeconfig. Only required if out-of-cluster.")
	fs.IntVar(&o.Workers, "workers", o.Workers, "Objects synced concurrently by the GPUTaskSet controller and by the autoscaler (at least 1).")
	fs.IntVar(&o.TaskWorkers, "task-workers", o.TaskWorkers, "GPUTasks synced concurrently by the GPUTask controller, which creates one pod per task (at least 1).")
	fs.Float64Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "QPS to use while talking with the Kubernetes API server.")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Burst to use while talking with the Kubernetes API server.")
	fs.StringVar(&o.KubeAPIContentType, "kube-api-content-type", o.KubeAPIContentType, "Content type of requests for Kubernetes' own kinds (pods, nodes, events, leases): application/vnd.kubernetes.protobuf or application/json. GPUTasks and GPUTaskSets are always JSON.")

	fs.StringVar(&o.GPUResourceName, "gpu-resource-name", o.GPUResourceName, "Extended resource a task's pod asks for, as its limit.")
	fs.StringVar(&o.GPULabelKey, "gpu-label-key", o.GPULabelKey, "Node label whose value is the GPU model; spec.gpu becomes a node selector on it.")
	fs.StringVar(&o.DefaultImage, "default-image", o.DefaultImage, "Container image of a task that names none.")
	fs.StringVar(&o.GPUAllocation, "gpu-allocation", o.GPUAllocation, "How a task's pod asks for GPUs when its spec.gpuAllocation does not say: ExtendedResource (a limit on --gpu-resource-name, placed by --gpu-label-key) or DRA (a ResourceClaim of devices of --dra-device-class, selected by --dra-model-attribute).")
	fs.StringVar(&o.DRADeviceClass, "dra-device-class", o.DRADeviceClass, "The DeviceClass of a DRA task's GPUs.")
	fs.StringVar(&o.DRAModelAttribute, "dra-model-attribute", o.DRAModelAttribute, "The device attribute, domain/name, that holds the GPU model: spec.gpu and spec.gpuAlternatives become CEL selectors on it in DRA mode.")
	fs.BoolVar(&o.GPUTaintToleration, "gpu-taint-toleration", o.GPUTaintToleration, "Give a task's pod a toleration for the taint GPU node pools carry (key --gpu-resource-name, effect NoSchedule), as the ExtendedResourceToleration admission plugin does. The template's own tolerations are always kept.")
	fs.DurationVar(&o.RescheduleInterval, "reschedule-interval", o.RescheduleInterval, "Turns rescheduling on when > 0 (failed, evicted, lost-node and long-unschedulable pods are placed again), and is the pod age after which a Periodic task's pod is placed again. 0 turns rescheduling off; restarts asked for with gputask.io/restartedAt still happen.")
	fs.DurationVar(&o.PendingTimeout, "pending-timeout", o.PendingTimeout, "How long a pod may stay unschedulable before it is placed again. 0 turns that case off.")
	fs.DurationVar(&o.NodeNotReadyTimeout, "node-not-ready-timeout", o.NodeNotReadyTimeout, "How long a pod's node may be NotReady before the pod is placed again, so a short kubelet or network blip does not churn GPU work. 0 acts at once.")
	fs.IntVar(&o.MaxConcurrentReschedules, "max-concurrent-reschedules", o.MaxConcurrentReschedules, "Most tasks whose pod is being replaced at once (at least 1).")

	o.addLeaderElectionFlags(fs)
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "Address the /metrics endpoint binds to; port 0 picks a free port, \"0\" turns it off.")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", o.MetricsSecure, "Serve /metrics over HTTPS, to callers the API server authenticates (TokenReview) and authorizes to get the non-resource URL /metrics (SubjectAccessReview), as kube-controller-manager's secure port does. false serves plain HTTP to anyone who reaches the address.")
	fs.StringVar(&o.MetricsCertFile, "metrics-cert-file", o.MetricsCertFile, "Certificate of the HTTPS /metrics endpoint. Empty, with --metrics-key-file empty, serves a self-signed certificate made at start.")
	fs.StringVar(&o.MetricsKeyFile, "metrics-key-file", o.MetricsKeyFile, "Private key of --metrics-cert-file.")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, "Address the /healthz and /readyz endpoints bind to; port 0 picks a free port, \"0\" turns it off.")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "Serve Go's pprof profiles under /debug/pprof/ on the metrics address, as kube-controller-manager's --profiling does; with --metrics-secure, to callers authorized for those paths only.")
	fs.DurationVar(&o.InformerResync, "informer-resync", o.InformerResync, "Informer resync period; 0 turns resyncs off (time-based rescheduling has its own timers).")
	fs.DurationVar(&o.ShutdownGracePeriod, "shutdown-grace-period", o.ShutdownGracePeriod, "How long the HTTP servers get to finish requests on shutdown.")
	fs.Func("load-index-allowed-cidrs", "Comma-separated CIDRs that load-index sources may connect to; when set, no other address. An always-refused address (loopback, link-local, cloud metadata services) is reopened only by a range that lies inside its own refused range, such as 127.0.0.1/32; a broad range such as 0.0.0.0/0 never reopens it. The API server's addresses are never reachable. Empty means every address but those.", func(v string) error {
		o.LoadIndexAllowedCIDRs = append(o.LoadIndexAllowedCIDRs, strings.Split(v, ",")...)
		return nil
	})
	fs.BoolVar(&o.LoadIndexAllowLoopback, "load-index-allow-loopback", o.LoadIndexAllowLoopback, "Let load-index sources connect to loopback addresses (127.0.0.0/8, ::1), for tests or a load index served next to the controller.")
	fs.BoolVar(&o.LoadIndexAllowPOST, "load-index-allow-post", o.LoadIndexAllowPOST, "Let HTTP load-index sources use method POST. Off, a set that asks for POST gets InvalidMetricSpec and sends nothing: a POST can change state on the endpoint.")
}

// addLeaderElectionFlags binds component-base's leader-election flags, the
// names every Kubernetes component uses, and keeps the earlier spellings
// --leader-elect-id and --leader-elect-namespace as deprecated aliases.
func (o *Options) addLeaderElectionFlags(fs *flag.FlagSet) {
	pfs := pflag.NewFlagSet("leader-election", pflag.ContinueOnError)
	componentbaseoptions.BindLeaderElectionFlags(&o.LeaderElection, pfs)
	pfs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "leader-elect-resource-namespace" {
			f.Usage = "Namespace of the Lease. Empty means the pod's own namespace in a cluster, else kube-system."
		}
		fs.Var(f.Value, f.Name, f.Usage)
	})
	fs.StringVar(&o.LeaderElection.ResourceName, "leader-elect-id", o.LeaderElection.ResourceName, "Deprecated: use --leader-elect-resource-name.")
	fs.StringVar(&o.LeaderElection.ResourceNamespace, "leader-elect-namespace", o.LeaderElection.ResourceNamespace, "Deprecated: use --leader-elect-resource-namespace.")
}

// leaderElectionFlags maps the fields component-base validates to the
// flags that set them, so an error names what the user typed.
var leaderElectionFlags = map[string]string{
	"leaderElection.leaseDuration":     "--leader-elect-lease-duration",
	"leaderElection.renewDeadline":     "--leader-elect-renew-deadline",
	"leaderElection.retryPeriod":       "--leader-elect-retry-period",
	"leaderElection.resourceLock":      "--leader-elect-resource-lock",
	"leaderElection.resourceName":      "--leader-elect-resource-name",
	"leaderElection.resourceNamespace": "--leader-elect-resource-namespace",
}

// Complete fills what the flags leave to the environment: the Lease's
// namespace is the pod's own in a cluster, else kube-system.
func (o *Options) Complete() {
	if o.LeaderElection.ResourceNamespace != "" {
		return
	}
	o.LeaderElection.ResourceNamespace = metav1.NamespaceSystem
	if b, err := os.ReadFile(inClusterNamespaceFile); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			o.LeaderElection.ResourceNamespace = ns
		}
	}
}

// Validate rejects values that would only fail later, with a message that
// names the flag. Call Complete first.
func (o *Options) Validate() error {
	var errs []error
	check := func(bad bool, format string, args ...any) {
		if bad {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(o.Workers < 1, "--workers must be at least 1, got %d", o.Workers)
	check(o.TaskWorkers < 1, "--task-workers must be at least 1, got %d", o.TaskWorkers)
	check(o.KubeAPIQPS <= 0, "--kube-api-qps must be greater than 0, got %v", o.KubeAPIQPS)
	check(o.KubeAPIBurst < 1, "--kube-api-burst must be at least 1, got %d", o.KubeAPIBurst)
	check(o.KubeAPIContentType != runtime.ContentTypeProtobuf && o.KubeAPIContentType != runtime.ContentTypeJSON,
		"--kube-api-content-type must be %s or %s, got %q", runtime.ContentTypeProtobuf, runtime.ContentTypeJSON, o.KubeAPIContentType)
	for _, msg := range validation.IsQualifiedName(o.GPUResourceName) {
		errs = append(errs, fmt.Errorf("--gpu-resource-name %q: %s", o.GPUResourceName, msg))
	}
	for _, msg := range validation.IsQualifiedName(o.GPULabelKey) {
		errs = append(errs, fmt.Errorf("--gpu-label-key %q: %s", o.GPULabelKey, msg))
	}
	check(o.GPUAllocation != string(gputaskv1.GPUAllocationExtendedResource) && o.GPUAllocation != string(gputaskv1.GPUAllocationDRA),
		"--gpu-allocation must be %s or %s, got %q", gputaskv1.GPUAllocationExtendedResource, gputaskv1.GPUAllocationDRA, o.GPUAllocation)
	for _, msg := range validation.IsDNS1123Subdomain(o.DRADeviceClass) {
		errs = append(errs, fmt.Errorf("--dra-device-class %q: %s", o.DRADeviceClass, msg))
	}
	for _, msg := range validation.IsQualifiedName(o.DRAModelAttribute) {
		errs = append(errs, fmt.Errorf("--dra-model-attribute %q: %s", o.DRAModelAttribute, msg))
	}
	check(!strings.Contains(o.DRAModelAttribute, "/"), "--dra-model-attribute %q: must be domain/name, such as %s", o.DRAModelAttribute, podspec.DefaultModelAttribute)
	check(strings.TrimSpace(o.DefaultImage) == "", "--default-image must not be empty")
	check(o.RescheduleInterval < 0, "--reschedule-interval must not be negative, got %v", o.RescheduleInterval)
	check(o.PendingTimeout < 0, "--pending-timeout must not be negative, got %v", o.PendingTimeout)
	check(o.NodeNotReadyTimeout < 0, "--node-not-ready-timeout must not be negative, got %v", o.NodeNotReadyTimeout)
	check(o.MaxConcurrentReschedules < 1, "--max-concurrent-reschedules must be at least 1, got %d", o.MaxConcurrentReschedules)
	check(o.InformerResync < 0, "--informer-resync must not be negative, got %v", o.InformerResync)
	check(o.ShutdownGracePeriod < 0, "--shutdown-grace-period must not be negative, got %v", o.ShutdownGracePeriod)
	check((o.MetricsCertFile == "") != (o.MetricsKeyFile == ""), "--metrics-cert-file and --metrics-key-file must be given together")
	if _, err := loadindex.ParseCIDRs(o.LoadIndexAllowedCIDRs); err != nil {
		errs = append(errs, fmt.Errorf("--load-index-allowed-cidrs: %w", err))
	}
	errs = append(errs, o.validateLeaderElection()...)
	for _, bind := range []struct{ flagName, addr string }{
		{"--metrics-bind-address", o.MetricsBindAddress},
		{"--health-probe-bind-address", o.HealthProbeBindAddress},
	} {
		if bind.addr == "0" {
			continue
		}
		if _, _, err := net.SplitHostPort(bind.addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: want host:port or \"0\": %w", bind.flagName, bind.addr, err))
		}
	}
	return errors.Join(errs...)
}

// validateLeaderElection is component-base's validation, with each error
// named by its flag, and the two rules it leaves out: client-go's elector
// refuses a renew deadline within the retry period's jitter, and only Leases
// are supported.
func (o *Options) validateLeaderElection() []error {
	le := &o.LeaderElection
	if !le.LeaderElect {
		return nil
	}
	var errs []error
	for _, e := range componentbasevalidation.ValidateLeaderElectionConfiguration(le, field.NewPath("leaderElection")) {
		name := leaderElectionFlags[e.Field]
		if name == "" {
			name = e.Field
		}
		errs = append(errs, fmt.Errorf("%s: %s", name, e.ErrorBody()))
	}
	if le.RenewDeadline.Duration <= time.Duration(leaderelection.JitterFactor*float64(le.RetryPeriod.Duration)) {
		errs = append(errs, fmt.Errorf("--leader-elect-renew-deadline (%v) must be greater than %v times --leader-elect-retry-period (%v)",
			le.RenewDeadline.Duration, leaderelection.JitterFactor, le.RetryPeriod.Duration))
	}
	if le.ResourceLock != resourcelock.LeasesResourceLock {
		errs = append(errs, fmt.Errorf("--leader-elect-resource-lock must be %q, got %q", resourcelock.LeasesResourceLock, le.ResourceLock))
	}
	for _, msg := range validation.IsDNS1123Subdomain(le.ResourceName) {
		errs = append(errs, fmt.Errorf("--leader-elect-resource-name %q: %s", le.ResourceName, msg))
	}
	return errs
}
