package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	gputaskinformers "github.com/gputask/gputask-controller/pkg/generated/informers/externalversions"
	"github.com/gputask/gputask-controller/test/framework"
)

// observer watches the benchmark namespace and notes when N pods exist, when
// N pods are Running and when N tasks are Running, measured from start. A
// watch sees each change once, where polling lists of thousands of objects
// would load the API server it measures.
type observer struct {
	n     int
	start time.Time

	mu           sync.Mutex
	podRunning   map[string]bool
	taskRunning  map[string]bool
	runningPods  int
	runningTasks int
	// Durations since start; zero until reached.
	podsCreated, podsRunning, tasksRunning time.Duration
}

// watchNamespace starts the informers and waits for their first, empty, list.
func watchNamespace(ctx context.Context, cp *framework.ControlPlane, ns string, n int) (*observer, error) {
	o := &observer{n: n, podRunning: map[string]bool{}, taskRunning: map[string]bool{}}
	kube := informers.NewSharedInformerFactoryWithOptions(cp.Kube, 0, informers.WithNamespace(ns))
	tasks := gputaskinformers.NewSharedInformerFactoryWithOptions(cp.GPUTask, 0, gputaskinformers.WithNamespace(ns))
	_, err := kube.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { o.pod(obj) },
		UpdateFunc: func(_, obj any) { o.pod(obj) },
	})
	if err != nil {
		return nil, fmt.Errorf("watching pods: %w", err)
	}
	_, err = tasks.Gputask().V1().GPUTasks().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { o.task(obj) },
		UpdateFunc: func(_, obj any) { o.task(obj) },
	})
	if err != nil {
		return nil, fmt.Errorf("watching gputasks: %w", err)
	}
	kube.Start(ctx.Done())
	tasks.Start(ctx.Done())
	for typ, ok := range kube.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("the %v cache did not sync", typ)
		}
	}
	for typ, ok := range tasks.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("the %v cache did not sync", typ)
		}
	}
	return o, nil
}

// begin sets the moment the durations count from: just before the create.
func (o *observer) begin() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.start = time.Now()
}

func (o *observer) pod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	running := pod.Status.Phase == corev1.PodRunning
	o.runningPods += countChange(o.podRunning, pod.Name, running)
	if o.podsCreated == 0 && len(o.podRunning) >= o.n {
		o.podsCreated = time.Since(o.start)
	}
	if o.podsRunning == 0 && o.runningPods >= o.n {
		o.podsRunning = time.Since(o.start)
	}
}

func (o *observer) task(obj any) {
	task, ok := obj.(*gputaskv1.GPUTask)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	running := task.Status.Phase == gputaskv1.GPUTaskRunning
	o.runningTasks += countChange(o.taskRunning, task.Name, running)
	if o.tasksRunning == 0 && o.runningTasks >= o.n {
		o.tasksRunning = time.Since(o.start)
	}
}

// countChange records name's state and returns how the count of running
// objects moves: +1, -1 or 0.
func countChange(states map[string]bool, name string, running bool) int {
	was := states[name]
	states[name] = running
	switch {
	case running && !was:
		return 1
	case !running && was:
		return -1
	}
	return 0
}

// timings returns the three durations; zero means not reached.
func (o *observer) timings() (podsCreated, podsRunning, tasksRunning time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.podsCreated, o.podsRunning, o.tasksRunning
}

// progress describes the counts for a timeout message.
func (o *observer) progress() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return fmt.Sprintf("%d pods, %d Running; %d tasks Running; want %d", len(o.podRunning), o.runningPods, o.runningTasks, o.n)
}
