// Command gputask-controller runs GPUTasks as pods and keeps GPUTaskSets at
// their replica count. This file holds flags and wiring only; the controllers
// live in controller.go and pkg/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	// Registers leader_election_master_status next to the other metrics.
	_ "k8s.io/component-base/metrics/prometheus/clientgo/leaderelection"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/autoscaler"
	gputaskinformers "github.com/gputask/gputask-controller/pkg/generated/informers/externalversions"
	"github.com/gputask/gputask-controller/pkg/loadindex"
	"github.com/gputask/gputask-controller/pkg/metrics"
	"github.com/gputask/gputask-controller/pkg/podspec"
	"github.com/gputask/gputask-controller/pkg/taskset"
	"github.com/gputask/gputask-controller/signals"
)

// inClusterNamespaceFile holds the pod's namespace when running in a cluster.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// config is every flag's value.
type config struct {
	kubeconfig   string
	master       string
	workers      int
	taskWorkers  int
	kubeAPIQPS   float64
	kubeAPIBurst int
	// kubeAPIContentType is the encoding of Kubernetes' own kinds; the
	// gputask.io kinds are custom resources, always JSON.
	kubeAPIContentType string

	gpuResourceName          string
	gpuLabelKey              string
	defaultImage             string
	gpuTaintToleration       bool
	rescheduleInterval       time.Duration
	pendingTimeout           time.Duration
	nodeNotReadyTimeout      time.Duration
	maxConcurrentReschedules int

	leaderElect            bool
	leaseDuration          time.Duration
	renewDeadline          time.Duration
	retryPeriod            time.Duration
	leaderElectNamespace   string
	leaderElectID          string
	metricsBindAddress     string
	healthProbeBindAddress string
	profiling              bool
	informerResync         time.Duration
	shutdownGracePeriod    time.Duration

	loadIndexAllowedCIDRs  []string
	loadIndexAllowLoopback bool
}

func bindFlags(fs *flag.FlagSet) *config {
	c := &config{}
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "Path to a kubeconfig. Only required if out-of-cluster.")
	fs.StringVar(&c.master, "master", "", "The address of the Kubernetes API server. Overrides any value in kubeconfig. Only required if out-of-cluster.")
	fs.IntVar(&c.workers, "workers", 2, "Objects synced concurrently by the GPUTaskSet controller and by the autoscaler (at least 1).")
	fs.IntVar(&c.taskWorkers, "task-workers", DefaultTaskWorkers, "GPUTasks synced concurrently by the GPUTask controller, which creates one pod per task (at least 1).")
	fs.Float64Var(&c.kubeAPIQPS, "kube-api-qps", 50, "QPS to use while talking with the Kubernetes API server.")
	fs.IntVar(&c.kubeAPIBurst, "kube-api-burst", 100, "Burst to use while talking with the Kubernetes API server.")
	fs.StringVar(&c.kubeAPIContentType, "kube-api-content-type", runtime.ContentTypeProtobuf, "Content type of requests for Kubernetes' own kinds (pods, nodes, events, leases): application/vnd.kubernetes.protobuf or application/json. GPUTasks and GPUTaskSets are always JSON.")

	fs.StringVar(&c.gpuResourceName, "gpu-resource-name", string(podspec.DefaultGPUResourceName), "Extended resource a task's pod asks for, as its limit.")
	fs.StringVar(&c.gpuLabelKey, "gpu-label-key", podspec.DefaultGPULabelKey, "Node label whose value is the GPU model; spec.gpu becomes a node selector on it.")
	fs.StringVar(&c.defaultImage, "default-image", DefaultImage, "Container image of a task that names none.")
	fs.BoolVar(&c.gpuTaintToleration, "gpu-taint-toleration", true, "Give a task's pod a toleration for the taint GPU node pools carry (key --gpu-resource-name, effect NoSchedule), as the ExtendedResourceToleration admission plugin does. The template's own tolerations are always kept.")
	fs.DurationVar(&c.rescheduleInterval, "reschedule-interval", 10*time.Minute, "Turns rescheduling on when > 0 (failed, evicted, lost-node and long-unschedulable pods are placed again), and is the pod age after which a Periodic task's pod is placed again. 0 turns rescheduling off; restarts asked for with gputask.io/restartedAt still happen.")
	fs.DurationVar(&c.pendingTimeout, "pending-timeout", 5*time.Minute, "How long a pod may stay unschedulable before it is placed again. 0 turns that case off.")
	fs.DurationVar(&c.nodeNotReadyTimeout, "node-not-ready-timeout", time.Minute, "How long a pod's node may be NotReady before the pod is placed again, so a short kubelet or network blip does not churn GPU work. 0 acts at once.")
	fs.IntVar(&c.maxConcurrentReschedules, "max-concurrent-reschedules", DefaultMaxConcurrentReschedules, "Most tasks whose pod is being replaced at once (at least 1).")

	fs.BoolVar(&c.leaderElect, "leader-elect", false, "Elect a leader through a coordination.k8s.io Lease before running the controllers, so several replicas can run.")
	fs.DurationVar(&c.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long a non-leader waits after the last renewal it saw before taking the lease.")
	fs.DurationVar(&c.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader keeps trying to renew before it gives up leadership. Less than the lease duration.")
	fs.DurationVar(&c.retryPeriod, "leader-elect-retry-period", 2*time.Second, "How long to wait between attempts to acquire or renew the lease.")
	fs.StringVar(&c.leaderElectNamespace, "leader-elect-namespace", "", "Namespace of the Lease. Empty means the pod's own namespace in a cluster, else kube-system.")
	fs.StringVar(&c.leaderElectID, "leader-elect-id", "gputask-controller", "Name of the Lease.")
	fs.StringVar(&c.metricsBindAddress, "metrics-bind-address", ":8080", "Address the /metrics endpoint binds to; port 0 picks a free port, \"0\" turns it off.")
	fs.StringVar(&c.healthProbeBindAddress, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz endpoints bind to; port 0 picks a free port, \"0\" turns it off.")
	fs.BoolVar(&c.profiling, "profiling", false, "Serve Go's pprof profiles under /debug/pprof/ on the metrics address, as kube-controller-manager's --profiling does. Off by default: the metrics address has no authentication.")
	fs.DurationVar(&c.informerResync, "informer-resync", 0, "Informer resync period; 0 turns resyncs off (time-based rescheduling has its own timers).")
	fs.DurationVar(&c.shutdownGracePeriod, "shutdown-grace-period", 10*time.Second, "How long the HTTP servers get to finish requests on shutdown.")
	fs.Func("load-index-allowed-cidrs", "Comma-separated CIDRs that load-index sources may connect to; when set, no other address, and an address listed here is allowed even if loopback or link-local. Empty means every address but loopback, link-local (cloud metadata), the API server's and the controller's own.", func(v string) error {
		c.loadIndexAllowedCIDRs = append(c.loadIndexAllowedCIDRs, strings.Split(v, ",")...)
		return nil
	})
	fs.BoolVar(&c.loadIndexAllowLoopback, "load-index-allow-loopback", false, "Let load-index sources connect to loopback addresses (127.0.0.0/8, ::1), for tests or a load index served next to the controller.")
	return c
}

// validate rejects values that would only fail later, with a message that
// names the flag.
func (c *config) validate() error {
	var errs []error
	check := func(bad bool, format string, args ...any) {
		if bad {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.workers < 1, "--workers must be at least 1, got %d", c.workers)
	check(c.taskWorkers < 1, "--task-workers must be at least 1, got %d", c.taskWorkers)
	check(c.kubeAPIQPS <= 0, "--kube-api-qps must be greater than 0, got %v", c.kubeAPIQPS)
	check(c.kubeAPIBurst < 1, "--kube-api-burst must be at least 1, got %d", c.kubeAPIBurst)
	check(c.kubeAPIContentType != runtime.ContentTypeProtobuf && c.kubeAPIContentType != runtime.ContentTypeJSON,
		"--kube-api-content-type must be %s or %s, got %q", runtime.ContentTypeProtobuf, runtime.ContentTypeJSON, c.kubeAPIContentType)
	for _, msg := range validation.IsQualifiedName(c.gpuResourceName) {
		errs = append(errs, fmt.Errorf("--gpu-resource-name %q: %s", c.gpuResourceName, msg))
	}
	for _, msg := range validation.IsQualifiedName(c.gpuLabelKey) {
		errs = append(errs, fmt.Errorf("--gpu-label-key %q: %s", c.gpuLabelKey, msg))
	}
	check(strings.TrimSpace(c.defaultImage) == "", "--default-image must not be empty")
	check(c.rescheduleInterval < 0, "--reschedule-interval must not be negative, got %v", c.rescheduleInterval)
	check(c.pendingTimeout < 0, "--pending-timeout must not be negative, got %v", c.pendingTimeout)
	check(c.nodeNotReadyTimeout < 0, "--node-not-ready-timeout must not be negative, got %v", c.nodeNotReadyTimeout)
	check(c.maxConcurrentReschedules < 1, "--max-concurrent-reschedules must be at least 1, got %d", c.maxConcurrentReschedules)
	check(c.informerResync < 0, "--informer-resync must not be negative, got %v", c.informerResync)
	check(c.shutdownGracePeriod < 0, "--shutdown-grace-period must not be negative, got %v", c.shutdownGracePeriod)
	if _, err := loadindex.ParseCIDRs(c.loadIndexAllowedCIDRs); err != nil {
		errs = append(errs, fmt.Errorf("--load-index-allowed-cidrs: %w", err))
	}
	if c.leaderElect {
		check(c.retryPeriod <= 0, "--leader-elect-retry-period must be greater than 0, got %v", c.retryPeriod)
		check(c.renewDeadline <= time.Duration(leaderelection.JitterFactor*float64(c.retryPeriod)),
			"--leader-elect-renew-deadline (%v) must be greater than %v times --leader-elect-retry-period (%v)", c.renewDeadline, leaderelection.JitterFactor, c.retryPeriod)
		check(c.leaseDuration <= c.renewDeadline,
			"--leader-elect-lease-duration (%v) must be greater than --leader-elect-renew-deadline (%v)", c.leaseDuration, c.renewDeadline)
		check(c.leaderElectID == "", "--leader-elect-id must not be empty")
		for _, msg := range validation.IsDNS1123Subdomain(c.leaderElectID) {
			errs = append(errs, fmt.Errorf("--leader-elect-id %q: %s", c.leaderElectID, msg))
		}
	}
	for _, bind := range []struct{ flagName, addr string }{
		{"--metrics-bind-address", c.metricsBindAddress},
		{"--health-probe-bind-address", c.healthProbeBindAddress},
	} {
		flagName, addr := bind.flagName, bind.addr
		if addr == "0" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: want host:port or \"0\": %w", flagName, addr, err))
		}
	}
	return errors.Join(errs...)
}

func (c *config) controllerOptions() Options {
	return Options{
		GPUResourceName:          corev1.ResourceName(c.gpuResourceName),
		GPULabelKey:              c.gpuLabelKey,
		DefaultImage:             c.defaultImage,
		GPUTaintToleration:       c.gpuTaintToleration,
		RescheduleInterval:       c.rescheduleInterval,
		PendingTimeout:           c.pendingTimeout,
		NodeNotReadyTimeout:      c.nodeNotReadyTimeout,
		MaxConcurrentReschedules: c.maxConcurrentReschedules,
		// The task controller's status writes go through a client of its
		// own with these limits; see Options.StatusQPS.
		StatusQPS:   c.kubeAPIQPS,
		StatusBurst: c.kubeAPIBurst,
	}
}

// helpHeader opens --help: what the program is and where its README is.
const helpHeader = "gputask-controller runs GPUTasks as pods and keeps GPUTaskSets at their replica count, scaled from a load index. Documentation: README.md, https://github.com/gputask/gputask-controller#readme"

// newCommandLine binds the project's flags and klog's to fs, and makes
// fs.Usage list the project's flags first.
func newCommandLine(fs *flag.FlagSet) *config {
	own := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	cfg := bindFlags(own)
	logging := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(logging)
	for _, set := range []*flag.FlagSet{own, logging} {
		set.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
	}
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "%s\n\nUsage: %s [flags]\n\nFlags:\n", helpHeader, fs.Name())
		own.SetOutput(w)
		own.PrintDefaults()
		fmt.Fprintf(w, "\nLogging flags (klog):\n")
		logging.SetOutput(w)
		logging.PrintDefaults()
	}
	return cfg
}

func main() {
	cfg := newCommandLine(flag.CommandLine)
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "error: unexpected arguments: %q\n", flag.Args())
		os.Exit(2)
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintf(os.Stderr, "error: invalid flags:\n%v\n", err)
		os.Exit(2)
	}

	ctx := signals.SetupSignalContext()
	logger := klog.FromContext(ctx)
	if err := run(ctx, cfg); err != nil {
		logger.Error(err, "Controller failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	logger.Info("Controller stopped")
	klog.Flush()
}

// informerSet holds the informer factories; controllers register their
// informers in them before they start.
type informerSet struct {
	taskPods kubeinformers.SharedInformerFactory
	cluster  kubeinformers.SharedInformerFactory
	gputask  gputaskinformers.SharedInformerFactory
	// activePods is every non-terminal pod of the cluster, for
	// capacity-aware sets only: it runs while some set reads it.
	activePods *autoscaler.LazyPods
}

func run(ctx context.Context, cfg *config) error {
	logger := klog.FromContext(ctx)
	restConfig, err := clientcmd.BuildConfigFromFlags(cfg.master, cfg.kubeconfig)
	if err != nil {
		return fmt.Errorf("building kubeconfig: %w", err)
	}
	restConfig.QPS = float32(cfg.kubeAPIQPS)
	restConfig.Burst = cfg.kubeAPIBurst
	builder := clientBuilder{config: restConfig, kubeContentType: cfg.kubeAPIContentType}

	informerClients, err := builder.clientsFor("shared-informers")
	if err != nil {
		return err
	}
	destinations, err := loadindex.NewDestinationPolicy(ctx, loadindex.PolicyOptions{
		AllowedCIDRs: cfg.loadIndexAllowedCIDRs, AllowLoopback: cfg.loadIndexAllowLoopback,
		APIServerHost: restConfig.Host, Kube: informerClients.kube,
	})
	if err != nil {
		return fmt.Errorf("building the load-index destination policy: %w", err)
	}
	inf := newInformerSet(informerClients, cfg.informerResync)

	// Controllers are built before the factories start, so that their
	// informers are part of what starts and syncs.
	taskClients, err := builder.clientsFor("gputask")
	if err != nil {
		return err
	}
	gputaskController := NewController(ctx, taskClients.kube, taskClients.gputask,
		inf.gputask.Gputask().V1().GPUTasks(),
		inf.taskPods.Core().V1().Pods(),
		inf.cluster.Core().V1().Nodes(),
		cfg.controllerOptions())

	setControllers, err := newSetControllers(ctx, cfg, builder, inf, destinations)
	if err != nil {
		return err
	}
	electionClients, err := builder.clientsFor("leader-election")
	if err != nil {
		return err
	}

	var servers serverGroup
	defer servers.shutdown(logger, cfg.shutdownGracePeriod)

	metrics.Register()
	if err := servers.serve(ctx, "metrics", cfg.metricsBindAddress, metricsMux(cfg.profiling)); err != nil {
		return err
	}

	var ready atomic.Bool
	var watchdog *leaderelection.HealthzAdaptor
	if cfg.leaderElect {
		// The watchdog fails /healthz when this process holds the lease but
		// stopped renewing it, so the kubelet restarts a wedged leader.
		watchdog = leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
	}
	if err := servers.serve(ctx, "health probes", cfg.healthProbeBindAddress, healthMux(&ready, watchdog)); err != nil {
		return err
	}

	// Informers run on every replica, so a new leader starts with warm caches.
	// They stop, and run waits for them, when run returns for any reason.
	informerCtx, stopInformers := context.WithCancel(ctx)
	defer inf.shutdown(stopInformers)
	inf.start(informerCtx)
	go func() {
		if inf.waitForSync(informerCtx) {
			ready.Store(true)
			logger.Info("Informer caches synced; ready")
		}
	}()

	start := func(ctx context.Context) error {
		return startControllers(ctx, cfg, inf, gputaskController, setControllers)
	}
	if !cfg.leaderElect {
		return start(ctx)
	}
	return runWithLeaderElection(ctx, cfg, electionClients, watchdog, start)
}

func newInformerSet(cl clients, resync time.Duration) *informerSet {
	return &informerSet{
		// Only task pods: the controller need not cache every pod of the
		// cluster. A label key alone selects every pod that has it.
		taskPods: kubeinformers.NewSharedInformerFactoryWithOptions(cl.kube, resync,
			kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.LabelSelector = gputaskv1.LabelTask
			}),
			kubeinformers.WithTransform(stripManagedFields)),
		// Nodes, unfiltered, to notice lost and NotReady nodes (and, for the
		// autoscaler, GPU capacity).
		cluster: kubeinformers.NewSharedInformerFactoryWithOptions(cl.kube, resync,
			kubeinformers.WithTransform(stripManagedFields)),
		gputask: gputaskinformers.NewSharedInformerFactoryWithOptions(cl.gputask, resync,
			gputaskinformers.WithTransform(stripManagedFields)),
		// Every pod that still holds resources, whoever owns it: the
		// autoscaler subtracts their GPUs from the nodes' allocatable ones.
		// It keeps only what that count reads, and runs only while a
		// capacity-aware set reads it.
		activePods: autoscaler.NewLazyPods(cl.kube, resync, clock.RealClock{}),
	}
}

// stripManagedFields is a cache.TransformFunc that drops
// metadata.managedFields: no controller here reads them, and they are often
// the largest part of a cached object.
func stripManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// namedController is a controller that startControllers runs.
type namedController struct {
	name string
	run  func(context.Context) error
}

// newSetControllers builds the GPUTaskSet controller and the autoscaler.
func newSetControllers(ctx context.Context, cfg *config, builder clientBuilder, inf *informerSet, destinations *loadindex.DestinationPolicy) ([]namedController, error) {
	sets := inf.gputask.Gputask().V1().GPUTaskSets()
	tasks := inf.gputask.Gputask().V1().GPUTasks()
	setClients, err := builder.clientsFor("gputaskset")
	if err != nil {
		return nil, err
	}
	setStatusClients, err := builder.clientsFor("gputaskset-status")
	if err != nil {
		return nil, err
	}
	scalerClients, err := builder.clientsFor("autoscaler")
	if err != nil {
		return nil, err
	}
	setController := taskset.NewController(ctx, setClients.kube, setClients.gputask, sets, tasks,
		taskset.Options{PodInformer: inf.taskPods.Core().V1().Pods(), StatusClient: setStatusClients.gputask})
	scaler := autoscaler.NewController(ctx, scalerClients.kube, scalerClients.gputask, sets, tasks,
		inf.cluster.Core().V1().Nodes(), inf.activePods,
		autoscaler.Options{
			GPUResourceName: corev1.ResourceName(cfg.gpuResourceName),
			GPULabelKey:     cfg.gpuLabelKey,
			NewSource:       loadindex.Factory{Secrets: loadindex.KubeSecrets{Client: scalerClients.kube}, Destinations: destinations}.New,
		})
	return []namedController{
		{name: "gputaskset", run: func(ctx context.Context) error { return setController.Run(ctx, cfg.workers) }},
		{name: "autoscaler", run: func(ctx context.Context) error { return scaler.Run(ctx, cfg.workers) }},
	}, nil
}

func (s *informerSet) start(ctx context.Context) {
	s.taskPods.Start(ctx.Done())
	s.cluster.Start(ctx.Done())
	s.gputask.Start(ctx.Done())
}

// shutdown stops the informers and waits for their goroutines.
func (s *informerSet) shutdown(stop context.CancelFunc) {
	stop()
	s.taskPods.Shutdown()
	s.cluster.Shutdown()
	s.gputask.Shutdown()
	s.activePods.Stop()
}

// waitForSync reports whether every started informer has synced.
func (s *informerSet) waitForSync(ctx context.Context) bool {
	synced := true
	for _, ok := range s.taskPods.WaitForCacheSync(ctx.Done()) {
		synced = synced && ok
	}
	for _, ok := range s.cluster.WaitForCacheSync(ctx.Done()) {
		synced = synced && ok
	}
	for _, ok := range s.gputask.WaitForCacheSync(ctx.Done()) {
		synced = synced && ok
	}
	return synced
}

// startControllers runs every controller until ctx is cancelled and returns
// once all of them have stopped. Only the leader runs it.
func startControllers(ctx context.Context, cfg *config, inf *informerSet, gputaskController *Controller, ctrls []namedController) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	runController := func(name string, run func(context.Context) error) {
		wg.Go(func() {
			if err := run(ctx); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s controller: %w", name, err))
				mu.Unlock()
			}
		})
	}

	runController("gputask", func(ctx context.Context) error { return gputaskController.Run(ctx, cfg.taskWorkers) })

	for _, c := range ctrls {
		runController(c.name, c.run)
	}

	// Factories started after new informers were requested start just those.
	inf.start(ctx)
	wg.Wait()
	return errors.Join(errs...)
}

// runWithLeaderElection runs start while this process holds the Lease. Losing
// the lease ends the process, as with every Kubernetes component: the
// controllers' state cannot be trusted to be stopped cleanly mid-sync.
//
// On shutdown (ctx ends) the controllers stop first and the Lease is released
// after: client-go's ReleaseOnCancel requires that the context given to the
// elector outlives the work it guards, or a new leader could start while this
// one still writes.
func runWithLeaderElection(ctx context.Context, cfg *config, cl clients, watchdog *leaderelection.HealthzAdaptor, start func(context.Context) error) error {
	logger := klog.FromContext(ctx)
	hostname, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("getting hostname for the leader election identity: %w", err)
	}
	identity := hostname + "_" + string(uuid.NewUUID())
	namespace := leaderElectionNamespace(cfg.leaderElectNamespace)

	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, namespace, cfg.leaderElectID,
		cl.kube.CoreV1(), cl.kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: identity})
	if err != nil {
		return fmt.Errorf("creating the leader election lock: %w", err)
	}

	// The elector's context keeps ctx's values but not its cancellation: it
	// ends when the controllers have stopped, or at once when ctx ends
	// before this process leads.
	electionCtx, cancelElection := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelElection()
	var leading leadership
	stopWaiting := context.AfterFunc(ctx, func() {
		if !leading.shutDown() {
			cancelElection()
		}
	})
	defer stopWaiting()

	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   cfg.leaseDuration,
		RenewDeadline:   cfg.renewDeadline,
		RetryPeriod:     cfg.retryPeriod,
		ReleaseOnCancel: true,
		WatchDog:        watchdog,
		Name:            cfg.leaderElectID,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leaderCtx context.Context) {
				if !leading.begin() {
					// ctx ended while the lease was being acquired.
					return
				}
				defer leading.done()
				logger.Info("Became leader; starting controllers", "identity", identity)
				// The controllers stop when ctx ends or leadership is lost;
				// only then is the election ended and the Lease released.
				runCtx, cancel := context.WithCancel(leaderCtx)
				defer cancel()
				stop := context.AfterFunc(ctx, cancel)
				defer stop()
				leading.finish(start(runCtx))
				cancelElection()
			},
			OnStoppedLeading: func() {
				if ctx.Err() != nil || leading.finished() {
					// A shutdown, or the controllers stopped on their own
					// and their error is what Run returns.
					return
				}
				logger.Info("Leader election lost; exiting", "identity", identity)
				klog.FlushAndExit(klog.ExitFlushTimeout, 1)
			},
			OnNewLeader: func(current string) {
				if current != identity {
					logger.Info("New leader elected", "leader", current)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("creating the leader elector: %w", err)
	}
	if watchdog != nil {
		watchdog.SetLeaderElection(elector)
	}
	logger.Info("Waiting for leadership", "lease", klog.KRef(namespace, cfg.leaderElectID), "identity", identity)
	elector.Run(electionCtx)
	return leading.wait()
}

// leadership tracks the controllers started by OnStartedLeading, which the
// elector runs in a goroutine of its own that may start after the election
// ended.
type leadership struct {
	mu       sync.Mutex
	started  bool
	stopping bool
	ended    bool
	// err is what the controllers returned.
	err error
	wg  sync.WaitGroup
}

// begin reports whether the controllers may start, and counts them if so.
func (l *leadership) begin() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopping {
		return false
	}
	l.started = true
	l.wg.Add(1)
	return true
}

func (l *leadership) done() { l.wg.Done() }

// finish records that the controllers returned, and with what.
func (l *leadership) finish(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended, l.err = true, err
}

// finished reports whether the controllers have returned.
func (l *leadership) finished() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended
}

// shutDown forbids a later start, and reports whether the controllers had
// started (they then end the election themselves once they have stopped).
func (l *leadership) shutDown() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopping = true
	return l.started
}

// wait forbids a later start, waits for the controllers to stop, and returns
// their error.
func (l *leadership) wait() error {
	l.shutDown()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func leaderElectionNamespace(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if b, err := os.ReadFile(inClusterNamespaceFile); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return metav1.NamespaceSystem
}

// metricsMux serves /metrics and, with profiling on, Go's pprof profiles.
func metricsMux(profiling bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler())
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// healthMux serves /healthz (the process lives and, when leading, still
// renews its lease) and /readyz (the informer caches have synced).
func healthMux(ready *atomic.Bool, watchdog *leaderelection.HealthzAdaptor) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if watchdog != nil {
			if err := watchdog.Check(r); err != nil {
				http.Error(w, "leaderElection: "+err.Error(), http.StatusInternalServerError)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "informer caches not synced", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// serverGroup runs the HTTP servers and shuts them down together.
type serverGroup struct {
	servers []*http.Server
	wg      sync.WaitGroup
}

// serve listens on addr before returning, so the bound address (port 0 picks
// one) can be logged and a bad address fails start-up. "0" serves nothing.
func (g *serverGroup) serve(ctx context.Context, name, addr string, handler http.Handler) error {
	logger := klog.FromContext(ctx)
	if addr == "0" {
		logger.Info("Not serving "+name, "reason", "bind address is 0")
		return nil
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listening for %s on %s: %w", name, addr, err)
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

func (g *serverGroup) shutdown(logger klog.Logger, grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	for _, srv := range g.servers {
		if err := srv.Shutdown(ctx); err != nil {
			logger.Error(err, "Shutting down HTTP server")
		}
	}
	g.wg.Wait()
}
