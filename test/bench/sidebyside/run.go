package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

// runKind names what drives the pods of a run.
type runKind string

const (
	kindTaskSet    runKind = "GPUTaskSet"
	kindReplicaSet runKind = "ReplicaSet"
	kindCeiling    runKind = "ceiling"
)

const (
	gpuModel  = "A100"
	namespace = "bench"
	setName   = "bench"
	// gpusPerNode is also each node's pod capacity (plus a margin), so N
	// pods of one GPU fit on N/gpusPerNode+1 nodes with room to spare.
	gpusPerNode = 500
	// schedulerQPS keeps kube-scheduler's client far above both runs' limits,
	// so the scheduler is never what a run waits for.
	schedulerQPS = 10000
	// ceilingWorkers is how many creates the ceiling keeps in flight.
	ceilingWorkers = 32
	// quietInterval is how long the workload's writes must stand still after
	// convergence before the run's writes are counted and the steady-state
	// window starts.
	quietInterval = 2 * time.Second
)

// result is what one run measured.
type result struct {
	kind   runKind
	limits limits // zero for the ceiling
	round  int
	n      int
	at     time.Time // when the workload was created

	// From the create; zero means not applicable.
	podsCreated, podsRunning, tasksRunning time.Duration
	// writes are the API writes from the create until they stand still after
	// convergence, without the benchmark's own create of the set; steady
	// those of the window after.
	writes, steady framework.APIWrites
	steadyWindow   time.Duration
	// usage is the controller's CPU from the create to convergence and its
	// peak RSS since it started; hasUsage is false for the ceiling.
	usage    framework.Usage
	hasUsage bool
	// serverCPU is kube-apiserver's and etcd's utime+stime over the same
	// span: what the run cost the API server, which every run shares.
	serverCPU time.Duration
	// reaction is timed after the steady window, GPUTaskSet runs only.
	reaction reaction
}

// runTimeout bounds one run, generous for a busy two-core machine.
func runTimeout(n int) time.Duration {
	return 5*time.Minute + time.Duration(n)*300*time.Millisecond
}

// startCluster starts a fresh control plane with kube-scheduler's client
// limits raised, enough large GPU nodes for n pods, and the namespace.
func startCluster(ctx context.Context, s settings) (*framework.ControlPlane, error) {
	cp, err := framework.Start(ctx, framework.Options{
		Scheduler: true, ControllerManager: true, Kwok: true,
		ExtraArgs: map[string][]string{framework.BinScheduler: {
			"--kube-api-qps=" + strconv.Itoa(schedulerQPS),
			"--kube-api-burst=" + strconv.Itoa(schedulerQPS),
		}},
	})
	if err != nil {
		return nil, err
	}
	nodes := s.n/gpusPerNode + 1
	for i := range nodes {
		if _, err := cp.CreateLargeGPUNode(ctx, fmt.Sprintf("gpu-%d", i), gpuModel, gpusPerNode, gpusPerNode+10); err != nil {
			cp.Cleanup(s.keep)
			return nil, err
		}
	}
	if err := cp.CreateNamespace(ctx, namespace); err != nil {
		cp.Cleanup(s.keep)
		return nil, err
	}
	return cp, nil
}

func cleanup(cp *framework.ControlPlane, keep bool) {
	if dir := cp.Cleanup(keep); dir != "" {
		logf("control plane logs kept in %s", dir)
	}
}

// runOne runs the GPUTaskSet or the ReplicaSet of n at the given limits on a
// fresh control plane.
func runOne(ctx context.Context, s settings, kind runKind, l limits, round int) (res result, err error) {
	ctx, cancel := context.WithTimeout(ctx, runTimeout(s.n))
	defer cancel()
	logf("%s %s round %d: starting the control plane", kind, l, round)
	cp, err := startCluster(ctx, s)
	if err != nil {
		return res, err
	}
	defer func() { cleanup(cp, s.keep || err != nil) }()

	limitArgs := []string{"--kube-api-qps=" + strconv.Itoa(l.qps), "--kube-api-burst=" + strconv.Itoa(l.burst)}
	var proc *framework.Process
	if kind == kindTaskSet {
		proc, err = startController(ctx, cp, s.env, append(limitArgs, s.args...))
	} else {
		proc, err = cp.StartControllerManager(ctx, []string{"replicaset"}, limitArgs...)
	}
	if err != nil {
		return res, err
	}
	if err := warmUp(ctx, cp, kind); err != nil {
		return res, err
	}
	obs, err := watchNamespace(ctx, cp, namespace, s.n)
	if err != nil {
		return res, err
	}
	before, err := cp.ScrapeAPIWrites(ctx)
	if err != nil {
		return res, err
	}
	usageBefore, err := proc.Usage()
	if err != nil {
		return res, err
	}
	serverBefore, err := serverCPU(cp)
	if err != nil {
		return res, err
	}

	res = result{kind: kind, limits: l, round: round, n: s.n, at: time.Now(), hasUsage: true}
	logf("%s %s round %d: creating %d", kind, l, round, s.n)
	obs.begin()
	own, err := createWorkload(ctx, cp, kind, s.n)
	if err != nil {
		return res, err
	}
	if err := waitConverged(ctx, cp, kind, obs, s.n); err != nil {
		return res, err
	}
	res.podsCreated, res.podsRunning, res.tasksRunning = obs.timings()
	after, err := cp.WaitWritesQuiet(ctx, framework.WorkloadWrite, quietInterval)
	if err != nil {
		return res, err
	}
	res.writes = after.Sub(before)
	res.writes.Discount(own, 1)
	usage, err := proc.Usage()
	if err != nil {
		return res, err
	}
	res.usage = framework.Usage{CPU: usage.CPU - usageBefore.CPU, PeakRSS: usage.PeakRSS}
	serverAfter, err := serverCPU(cp)
	if err != nil {
		return res, err
	}
	res.serverCPU = serverAfter - serverBefore
	logf("%s %s round %d: converged: pods created %s, Running %s, tasks Running %s; %d workload writes",
		kind, l, round, sec(res.podsCreated), sec(res.podsRunning), sec(res.tasksRunning), res.writes.Filter(framework.WorkloadWrite).Total())

	res.steady, res.steadyWindow, err = steadyWrites(ctx, cp, s.steady)
	if err != nil {
		return res, err
	}
	if kind == kindTaskSet && s.reactions > 0 {
		logf("%s %s round %d: timing %d load changes", kind, l, round, s.reactions)
		if res.reaction, err = measureReaction(ctx, cp, s.reactions); err != nil {
			return res, err
		}
		logf("%s %s round %d: reaction median %s s, max %s s", kind, l, round, sec(res.reaction.median()), sec(res.reaction.max()))
	}
	if proc.Exited() {
		return res, fmt.Errorf("%w; see %s", proc.ExitError(), proc.LogPath)
	}
	return res, nil
}

// startController runs bin/gputask-controller at the run's limits, with
// klog at -v=1 as kube-controller-manager runs, and waits until its caches
// have synced.
func startController(ctx context.Context, cp *framework.ControlPlane, env, limitArgs []string) (*framework.Process, error) {
	args := append([]string{"-v=1", "--health-probe-bind-address=127.0.0.1:0"}, limitArgs...)
	proc, err := cp.StartControllerWithEnv(ctx, env, args...)
	if err != nil {
		return nil, err
	}
	addr, err := framework.ServingAddr(ctx, proc, "health probes", time.Minute)
	if err != nil {
		return nil, err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for the controller to be ready (see %s): %w", proc.LogPath, err)
	}
	return proc, nil
}

// warmUp sends a server-side dry run of the run's objects, so that the first
// timed create does not pay for what the API server builds on the first
// request for a kind: for a custom resource, its serving storage, schema
// and validation rules, a second or two on this machine. A long-running
// cluster has it ready; a fresh control plane does not.
func warmUp(ctx context.Context, cp *framework.ControlPlane, kind runKind) error {
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	var errs []error
	switch kind {
	case kindTaskSet:
		_, err := cp.GPUTask.GputaskV1().GPUTaskSets(namespace).Create(ctx, newTaskSet(1), dryRun)
		errs = append(errs, err)
		task := &gputaskv1.GPUTask{ObjectMeta: metav1.ObjectMeta{Name: "warm-up"}, Spec: newTaskSet(1).Spec.Template.Spec}
		_, err = cp.GPUTask.GputaskV1().GPUTasks(namespace).Create(ctx, task, dryRun)
		errs = append(errs, err)
	case kindReplicaSet:
		_, err := cp.Kube.AppsV1().ReplicaSets(namespace).Create(ctx, newReplicaSet(1), dryRun)
		errs = append(errs, err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "warm-up"}, Spec: gpuPodSpec(corev1.RestartPolicyNever)}
	_, err := cp.Kube.CoreV1().Pods(namespace).Create(ctx, pod, dryRun)
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("warming up the API server: %w", err)
	}
	return nil
}

// createWorkload creates the set or the ReplicaSet and returns the series
// its own create lands in, to leave out of the controller's writes.
func createWorkload(ctx context.Context, cp *framework.ControlPlane, kind runKind, n int) (framework.WriteKey, error) {
	switch kind {
	case kindTaskSet:
		_, err := cp.GPUTask.GputaskV1().GPUTaskSets(namespace).Create(ctx, newTaskSet(n), metav1.CreateOptions{})
		if err != nil {
			return framework.WriteKey{}, fmt.Errorf("creating the gputaskset: %w", err)
		}
		return framework.WriteKey{Verb: "POST", Group: "gputask.io", Resource: "gputasksets", Code: "201"}, nil
	case kindReplicaSet:
		_, err := cp.Kube.AppsV1().ReplicaSets(namespace).Create(ctx, newReplicaSet(n), metav1.CreateOptions{})
		if err != nil {
			return framework.WriteKey{}, fmt.Errorf("creating the replicaset: %w", err)
		}
		return framework.WriteKey{Verb: "POST", Group: "apps", Resource: "replicasets", Code: "201"}, nil
	}
	return framework.WriteKey{}, fmt.Errorf("unknown run kind %q", kind)
}

func newTaskSet(n int) *gputaskv1.GPUTaskSet {
	one := intstr.FromInt32(1)
	return &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: setName},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To(int32(n)),
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{GPU: gpuModel, GPUAmount: &one}},
		},
	}
}

// newReplicaSet returns the ReplicaSet whose pods match a task's pod: the
// controller's default image, one GPU as a limit, the GPU model as node
// selector. Only the restart policy differs, since a ReplicaSet requires Always.
func newReplicaSet(n int) *appsv1.ReplicaSet {
	labels := map[string]string{"app": setName}
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: setName},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To(int32(n)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       gpuPodSpec(corev1.RestartPolicyAlways),
			},
		},
	}
}

func gpuPodSpec(restart corev1.RestartPolicy) corev1.PodSpec {
	return corev1.PodSpec{
		RestartPolicy: restart,
		NodeSelector:  map[string]string{framework.GPUProductLabel: gpuModel},
		Containers: []corev1.Container{{
			Name:  "task",
			Image: "busybox:1.36",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				framework.GPUResourceName: resource.MustParse("1"),
			}},
		}},
	}
}

// waitConverged waits until the run is done and its owner's status says so:
// for a set, N tasks Running and a status that counts them; for a
// ReplicaSet, N pods Running and N ready replicas.
func waitConverged(ctx context.Context, cp *framework.ControlPlane, kind runKind, obs *observer, n int) error {
	var last string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		created, podsRunning, tasksRunning := obs.timings()
		last = obs.progress()
		switch kind {
		case kindTaskSet:
			if tasksRunning == 0 || podsRunning == 0 {
				return false, nil
			}
			set, err := cp.GPUTask.GputaskV1().GPUTaskSets(namespace).Get(ctx, setName, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			st := set.Status
			last += fmt.Sprintf("; set status %d replicas, %d running, generation %d observed %d", st.Replicas, st.RunningReplicas, set.Generation, st.ObservedGeneration)
			return st.Replicas == int32(n) && st.RunningReplicas == int32(n) && st.ObservedGeneration == set.Generation, nil
		case kindReplicaSet:
			if podsRunning == 0 {
				return false, nil
			}
			rs, err := cp.Kube.AppsV1().ReplicaSets(namespace).Get(ctx, setName, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			st := rs.Status
			last += fmt.Sprintf("; replicaset status %d replicas, %d ready", st.Replicas, st.ReadyReplicas)
			return st.Replicas == int32(n) && st.ReadyReplicas == int32(n) && st.AvailableReplicas == int32(n) && st.ObservedGeneration == rs.Generation, nil
		default:
			return created != 0 && podsRunning != 0, nil
		}
	})
	if err != nil {
		return fmt.Errorf("not converged: %s: %w", last, err)
	}
	return nil
}

// steadyWrites returns the writes the API server serves during window.
func steadyWrites(ctx context.Context, cp *framework.ControlPlane, window time.Duration) (framework.APIWrites, time.Duration, error) {
	before, err := cp.ScrapeAPIWrites(ctx)
	if err != nil {
		return nil, 0, err
	}
	start := time.Now()
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	after, err := cp.ScrapeAPIWrites(ctx)
	if err != nil {
		return nil, 0, err
	}
	return after.Sub(before), time.Since(start), nil
}

// runCeiling creates n pods with a parallel loop whose client has no rate
// limit: the pace of the API server, scheduler and kwok alone.
func runCeiling(ctx context.Context, s settings) (res result, err error) {
	ctx, cancel := context.WithTimeout(ctx, runTimeout(s.n))
	defer cancel()
	logf("ceiling: starting the control plane")
	cp, err := startCluster(ctx, s)
	if err != nil {
		return res, err
	}
	defer func() { cleanup(cp, s.keep || err != nil) }()

	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS = -1 // no client-side rate limiter
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return res, fmt.Errorf("building the unlimited client: %w", err)
	}
	obs, err := watchNamespace(ctx, cp, namespace, s.n)
	if err != nil {
		return res, err
	}
	before, err := cp.ScrapeAPIWrites(ctx)
	if err != nil {
		return res, err
	}
	serverBefore, err := serverCPU(cp)
	if err != nil {
		return res, err
	}
	res = result{kind: kindCeiling, n: s.n, at: time.Now()}
	logf("ceiling: creating %d pods with %d workers", s.n, ceilingWorkers)
	obs.begin()
	if err := createPods(ctx, client, s.n); err != nil {
		return res, err
	}
	if err := waitConverged(ctx, cp, kindCeiling, obs, s.n); err != nil {
		return res, err
	}
	res.podsCreated, res.podsRunning, _ = obs.timings()
	after, err := cp.WaitWritesQuiet(ctx, framework.WorkloadWrite, quietInterval)
	if err != nil {
		return res, err
	}
	res.writes = after.Sub(before)
	serverAfter, err := serverCPU(cp)
	if err != nil {
		return res, err
	}
	res.serverCPU = serverAfter - serverBefore
	logf("ceiling: pods created %s, Running %s", sec(res.podsCreated), sec(res.podsRunning))
	res.steady, res.steadyWindow, err = steadyWrites(ctx, cp, s.steady)
	return res, err
}

// serverCPU returns the CPU time kube-apiserver and etcd have used so far.
func serverCPU(cp *framework.ControlPlane) (time.Duration, error) {
	var total time.Duration
	for _, name := range []string{framework.BinAPIServer, framework.BinEtcd} {
		p := cp.Process(name)
		if p == nil {
			return 0, fmt.Errorf("no %s process in the control plane", name)
		}
		u, err := p.Usage()
		if err != nil {
			return 0, err
		}
		total += u.CPU
	}
	return total, nil
}

// createPods creates n pods from ceilingWorkers goroutines and returns the
// first error.
func createPods(ctx context.Context, client kubernetes.Interface, n int) error {
	next := make(chan int)
	errs := make(chan error, ceilingWorkers)
	var wg sync.WaitGroup
	for range ceilingWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i), Labels: map[string]string{"app": setName}},
					Spec:       gpuPodSpec(corev1.RestartPolicyNever),
				}
				if _, err := client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("creating pod %s: %w", pod.Name, err)
					return
				}
			}
		}()
	}
	var err error
feed:
	for i := range n {
		select {
		case next <- i:
		case err = <-errs:
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err == nil && len(errs) > 0 {
		err = <-errs
	}
	return err
}

// sec formats a duration in seconds with one decimal, or "–" when unset.
func sec(d time.Duration) string {
	if d == 0 {
		return "–"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 1, 64)
}
