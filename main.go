// Command gputask-controller runs GPUTasks as pods and keeps GPUTaskSets at
// their replica count, scaled from a load index. This file turns flags into
// options and builds the three controllers; pkg/app runs them. The GPUTask
// controller is in controller.go.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/app"
	"github.com/gputask/gputask-controller/pkg/autoscaler"
	"github.com/gputask/gputask-controller/pkg/loadindex"
	"github.com/gputask/gputask-controller/pkg/taskset"
	"github.com/gputask/gputask-controller/signals"
)

// helpHeader opens --help: what the program is and where its documentation is.
const helpHeader = "gputask-controller runs GPUTasks as pods and keeps GPUTaskSets at their replica count, scaled from a load index. Documentation: README.md and docs/, https://github.com/gputask/gputask-controller#readme"

// newCommandLine binds the project's flags and klog's to fs, and makes
// fs.Usage list the project's flags first.
func newCommandLine(fs *flag.FlagSet) *app.Options {
	opts := app.NewOptions()
	own := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	opts.AddFlags(own)
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
	return opts
}

func main() {
	opts := newCommandLine(flag.CommandLine)
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "error: unexpected arguments: %q\n", flag.Args())
		os.Exit(2)
	}
	opts.Complete()
	if err := opts.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "error: invalid flags:\n%v\n", err)
		os.Exit(2)
	}

	ctx := signals.SetupSignalContext()
	logger := klog.FromContext(ctx)
	if err := app.Run(ctx, opts, newControllers); err != nil {
		logger.Error(err, "Controller failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	logger.Info("Controller stopped")
	klog.Flush()
}

// taskOptions are the GPUTask controller's settings from the flags.
func taskOptions(o *app.Options) Options {
	return Options{
		GPUResourceName:          corev1.ResourceName(o.GPUResourceName),
		GPULabelKey:              o.GPULabelKey,
		DefaultImage:             o.DefaultImage,
		GPUTaintToleration:       o.GPUTaintToleration,
		GPUAllocation:            gputaskv1.GPUAllocationMode(o.GPUAllocation),
		DeviceClass:              o.DRADeviceClass,
		ModelAttribute:           o.DRAModelAttribute,
		RescheduleInterval:       o.RescheduleInterval,
		PendingTimeout:           o.PendingTimeout,
		NodeNotReadyTimeout:      o.NodeNotReadyTimeout,
		MaxConcurrentReschedules: o.MaxConcurrentReschedules,
		// The task controller's status writes go through a client of its
		// own with these limits; see Options.StatusQPS.
		StatusQPS:   o.KubeAPIQPS,
		StatusBurst: o.KubeAPIBurst,
	}
}

// newControllers builds the GPUTask controller, the GPUTaskSet controller
// and the autoscaler, each on clients named by its identity.
func newControllers(ctx context.Context, cc app.ControllerContext) ([]app.Controller, error) {
	o, inf := cc.Options, cc.Informers
	tasks := inf.GPUTask.Gputask().V1().GPUTasks()
	sets := inf.GPUTask.Gputask().V1().GPUTaskSets()

	taskClients, err := cc.Clients.ClientsFor(ControllerName)
	if err != nil {
		return nil, err
	}
	taskOpts := taskOptions(o)
	taskOpts.Workloads = inf.Workloads
	if inf.DRA {
		taskOpts.ClaimTemplates = inf.TaskPods.Resource().V1().ResourceClaimTemplates()
		taskOpts.Claims = inf.TaskPods.Resource().V1().ResourceClaims()
	}
	taskController := NewController(ctx, taskClients.Kube, taskClients.GPUTask, tasks,
		inf.TaskPods.Core().V1().Pods(), inf.Cluster.Core().V1().Nodes(), taskOpts)

	setClients, err := cc.Clients.ClientsFor(taskset.ControllerName)
	if err != nil {
		return nil, err
	}
	// Set status goes through a client of its own, so that those writes
	// never take from the rate limit of the task creates and deletes.
	setStatusClients, err := cc.Clients.ClientsFor(taskset.ControllerName + "-status")
	if err != nil {
		return nil, err
	}
	setController := taskset.NewController(ctx, setClients.Kube, setClients.GPUTask, sets, tasks,
		inf.Cluster.Core().V1().Nodes(), taskset.Options{StatusClient: setStatusClients.GPUTask})

	scalerClients, err := cc.Clients.ClientsFor(autoscaler.ControllerName)
	if err != nil {
		return nil, err
	}
	scalerOpts := autoscaler.Options{
		GPUResourceName: corev1.ResourceName(o.GPUResourceName),
		GPULabelKey:     o.GPULabelKey,
		GPUAllocation:   taskOpts.GPUAllocation,
		DeviceClass:     o.DRADeviceClass,
		ModelAttribute:  o.DRAModelAttribute,
		Quotas:          inf.Quotas,
		EngineProfiles:  inf.EngineProfiles.Core().V1().ConfigMaps(),
		NewSource: loadindex.Factory{Secrets: loadindex.KubeSecrets{Client: scalerClients.Kube}, Destinations: cc.Destinations,
			AllowPOST: o.LoadIndexAllowPOST}.New,
	}
	if inf.Devices != nil {
		scalerOpts.Devices = inf.Devices
	}
	scaler := autoscaler.NewController(ctx, scalerClients.Kube, scalerClients.GPUTask, sets, tasks,
		inf.Cluster.Core().V1().Nodes(), inf.ActivePods, scalerOpts)

	return []app.Controller{
		{Name: ControllerName, Run: func(ctx context.Context) error { return taskController.Run(ctx, o.TaskWorkers) }},
		{Name: taskset.ControllerName, Run: func(ctx context.Context) error { return setController.Run(ctx, o.Workers) }},
		{Name: autoscaler.ControllerName, Run: func(ctx context.Context) error { return scaler.Run(ctx, o.Workers) }},
	}, nil
}
