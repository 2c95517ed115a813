package app

import (
	"context"
	"slices"
	"sync"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	gputaskinformers "github.com/gputask/gputask-controller/pkg/generated/informers/externalversions"
	"github.com/gputask/gputask-controller/pkg/intern"
	"github.com/gputask/gputask-controller/pkg/kueue"
	"github.com/gputask/gputask-controller/pkg/lazycache"
	"github.com/gputask/gputask-controller/pkg/podspec"
	"github.com/gputask/gputask-controller/pkg/served"
)

// Informers holds the informer factories; controllers register their
// informers in them before they start.
type Informers struct {
	// TaskPods holds the pods of GPUTasks only.
	TaskPods kubeinformers.SharedInformerFactory
	// Cluster holds cluster-wide kinds, unfiltered (nodes).
	Cluster kubeinformers.SharedInformerFactory
	GPUTask gputaskinformers.SharedInformerFactory
	// EngineProfiles holds the ConfigMaps labelled
	// gputask.io/engine-profile=true only: the engine profiles that SLO
	// sets read, not every ConfigMap of the cluster.
	EngineProfiles kubeinformers.SharedInformerFactory
	// ActivePods is every non-terminal pod of the cluster, for
	// capacity-aware sets only: it runs while some set reads it.
	ActivePods *lazycache.Pods
	// Workloads is Kueue's Workloads, nil where Kueue is not installed
	// (DiscoverKueue).
	Workloads *kueue.Workloads
	// DRA is true where the API server serves Dynamic Resource
	// Allocation's ResourceClaimTemplates (DiscoverDRA): the GPUTask
	// controller then caches, from TaskPods, the templates and claims that
	// carry a task's label.
	DRA bool
	// Devices is the cache of DeviceClasses, ResourceSlices and
	// ResourceClaims for capacity-aware DRA sets, nil without DRA: it runs
	// while such a set reads it.
	Devices *lazycache.DRA
	// Quotas is Kueue's LocalQueues and ClusterQueues, nil where Kueue is
	// not installed, for capacity-aware sets whose tasks name a queue.
	Quotas *kueue.Quotas

	kueueStarted sync.Once
	kueueDone    sync.WaitGroup
}

// DiscoverKueue sets Workloads and Quotas when the API server serves
// Kueue's Workloads. Kueue installed later is seen after a restart.
func (s *Informers) DiscoverKueue(ctx context.Context, cl Clients, resync time.Duration) {
	rc := cl.Kube.Discovery().RESTClient()
	if rc == nil {
		return
	}
	gvr, ok, err := kueue.Resource(ctx, rc)
	logger := klog.FromContext(ctx)
	switch {
	case ctx.Err() != nil:
		return
	case err != nil:
		logger.Error(err, "Kueue's Workloads not read: discovery failed; tasks waiting in a Kueue queue show the pod's reason only")
		return
	case !ok:
		logger.V(2).Info("Kueue is not installed")
		return
	}
	w, err := kueue.NewWorkloads(cl.Dynamic, gvr, resync)
	if err != nil {
		logger.Error(err, "Kueue's Workloads not read")
		return
	}
	q, err := kueue.NewQuotas(cl.Dynamic, gvr.GroupVersion(), resync, w)
	if err != nil {
		logger.Error(err, "Kueue's queues not read")
		return
	}
	logger.Info("Reading Kueue's Workloads and queues", "groupVersion", gvr.GroupVersion().String())
	s.Workloads, s.Quotas = w, q
}

// kueueInformers are the Kueue informers DiscoverKueue found.
func (s *Informers) kueueInformers() []cache.SharedIndexInformer {
	if s.Workloads == nil {
		return nil
	}
	return append([]cache.SharedIndexInformer{s.Workloads.Informer()}, s.Quotas.Informers()...)
}

// DiscoverDRA sets DRA when the API server serves resource.k8s.io/v1's
// ResourceClaimTemplates.
func (s *Informers) DiscoverDRA(ctx context.Context, cl Clients, resync time.Duration) {
	rc := cl.Kube.Discovery().RESTClient()
	if rc == nil {
		return
	}
	ok, err := served.Resource(ctx, rc, resourcev1.SchemeGroupVersion, "resourceclaimtemplates")
	switch {
	case ctx.Err() != nil:
		return
	case err != nil:
		klog.FromContext(ctx).Error(err, "Dynamic Resource Allocation not found: discovery failed; DRA tasks report their pods' create errors")
		return
	}
	s.DRA = ok
	if ok {
		s.Devices = lazycache.NewDRA(cl.Kube, resync, clock.RealClock{})
	}
}

// NewInformers builds the factories on the informers' own clients.
func NewInformers(cl Clients, resync time.Duration) *Informers {
	return &Informers{
		// Only task pods: the controller need not cache every pod of the
		// cluster. A label key alone selects every pod that has it. Of
		// each it keeps what status and rescheduling read.
		TaskPods: kubeinformers.NewSharedInformerFactoryWithOptions(cl.Kube, resync,
			kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.LabelSelector = gputaskv1.LabelTask
			}),
			kubeinformers.WithTransform(podspec.Trim)),
		// Nodes, unfiltered, to notice lost and NotReady nodes (and, for the
		// autoscaler, GPU capacity).
		Cluster: kubeinformers.NewSharedInformerFactoryWithOptions(cl.Kube, resync,
			kubeinformers.WithTransform(StripManagedFields)),
		GPUTask: gputaskinformers.NewSharedInformerFactoryWithOptions(cl.GPUTask, resync,
			gputaskinformers.WithTransform(compactGPUTask)),
		EngineProfiles: kubeinformers.NewSharedInformerFactoryWithOptions(cl.Kube, resync,
			kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.LabelSelector = gputaskv1.LabelEngineProfile + "=true"
			}),
			kubeinformers.WithTransform(StripManagedFields)),
		// Every pod that still holds resources, whoever owns it: the
		// autoscaler subtracts their GPUs from the nodes' allocatable ones.
		// It keeps only what that count reads, and runs only while a
		// capacity-aware set reads it.
		ActivePods: lazycache.NewPods(cl.Kube, resync, clock.RealClock{}),
	}
}

// StripManagedFields is a cache.TransformFunc that drops
// metadata.managedFields: no controller here reads them, and they are often
// the largest part of a cached object.
func StripManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// compactGPUTask is StripManagedFields that also gives a GPUTask's
// conditions a list of their own length (the JSON decoder grows the list by
// doubling, and every cached task would keep the spare room) and interns
// the strings that the tasks of one set all repeat.
func compactGPUTask(obj any) (any, error) {
	switch o := obj.(type) {
	case *gputaskv1.GPUTask:
		if cap(o.Status.Conditions) > len(o.Status.Conditions) {
			o.Status.Conditions = slices.Clone(o.Status.Conditions)
		}
		intern.Meta(&o.ObjectMeta)
		internSpec(&o.Spec)
		st := &o.Status
		st.Phase = gputaskv1.GPUTaskPhase(intern.String(string(st.Phase)))
		st.NodeName, st.GPUModel = intern.String(st.NodeName), intern.String(st.GPUModel)
		intern.Conditions(st.Conditions)
	case *gputaskv1.GPUTaskSet:
		intern.Meta(&o.ObjectMeta)
	}
	return StripManagedFields(obj)
}

// internSpec interns what a set's tasks share: their whole spec comes from
// one template.
func internSpec(spec *gputaskv1.GPUTaskSpec) {
	spec.GPU, spec.Priority, spec.Image = intern.String(spec.GPU), intern.String(spec.Priority), intern.String(spec.Image)
	intern.Strings(spec.GPUAlternatives)
	intern.Strings(spec.Command)
	intern.Strings(spec.Args)
	for i := range spec.Env {
		spec.Env[i].Name, spec.Env[i].Value = intern.String(spec.Env[i].Name), intern.String(spec.Env[i].Value)
	}
	if t := spec.Template; t != nil {
		t.Metadata.Labels, t.Metadata.Annotations = intern.Map(t.Metadata.Labels), intern.Map(t.Metadata.Annotations)
		for i := range t.Spec.Containers {
			c := &t.Spec.Containers[i]
			c.Name, c.Image = intern.String(c.Name), intern.String(c.Image)
			intern.Strings(c.Command)
			intern.Strings(c.Args)
		}
	}
}

// Start starts every informer requested so far; a second call starts just
// those requested since.
func (s *Informers) Start(ctx context.Context) {
	s.TaskPods.Start(ctx.Done())
	s.Cluster.Start(ctx.Done())
	s.GPUTask.Start(ctx.Done())
	s.EngineProfiles.Start(ctx.Done())
	s.kueueStarted.Do(func() {
		for _, inf := range s.kueueInformers() {
			s.kueueDone.Go(func() { inf.RunWithContext(ctx) })
		}
	})
}

// Shutdown stops the informers and waits for their goroutines.
func (s *Informers) Shutdown(stop context.CancelFunc) {
	stop()
	s.TaskPods.Shutdown()
	s.Cluster.Shutdown()
	s.GPUTask.Shutdown()
	s.EngineProfiles.Shutdown()
	s.ActivePods.Stop()
	if s.Devices != nil {
		s.Devices.Stop()
	}
	s.kueueDone.Wait()
}

// WaitForSync reports whether every started informer has synced.
func (s *Informers) WaitForSync(ctx context.Context) bool {
	synced := true
	for _, ok := range s.TaskPods.WaitForCacheSync(ctx.Done()) {
		synced = synced && ok
	}
	for _, ok := range s.Cluster.WaitForCacheSync(ctx.Done()) {
		synced = synced && ok
	}
	for _, ok := range s.GPUTask.WaitForCacheSync(ctx.Done()) {
		synced = synced && ok
	}
	for _, ok := range s.EngineProfiles.WaitForCacheSync(ctx.Done()) {
		synced = synced && ok
	}
	for _, inf := range s.kueueInformers() {
		synced = synced && cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	}
	return synced
}
