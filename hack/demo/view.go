package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

// clearScreen moves the cursor home and clears the terminal.
const clearScreen = "\x1b[H\x1b[2J"

// section is one block of the live view. To show something new, write a
// render function and add it to sections in newView.
type section struct {
	title  string
	render func(ctx context.Context, w io.Writer) error
}

type view struct {
	cp       *framework.ControlPlane
	opts     options
	started  time.Time
	load     *loadServer
	vllm     *vllmDemo
	sections []section

	// history holds the autoscaled set over time, one sample per
	// sampleEvery, for the Autoscaling section.
	history    []sample
	lastSample time.Time

	// allRunningAfter is how long after the start every task first ran.
	allRunningAfter time.Duration
}

func newView(cp *framework.ControlPlane, opts options, started time.Time, load *loadServer, vllm *vllmDemo) *view {
	v := &view{cp: cp, opts: opts, started: started, load: load, vllm: vllm}
	v.sections = []section{
		{"GPUTasks", v.renderTasks},
		{"GPUTaskSets", v.renderTaskSets},
		{"Autoscaling " + autoscaledSetName + " (load index " + load.URL + ")", v.renderAutoscaling},
		{"SLO pool " + vllmSetName + " (vLLM metrics " + vllm.URL + ", Prometheus " + vllm.prom.URL + ")", v.renderVLLM},
		{"Pods", v.renderPods},
		{"Nodes", v.renderNodes},
	}
	return v
}

// loop redraws the view until ctx ends, or until the view cannot be
// written, which it returns.
func (v *view) loop(ctx context.Context) error {
	ticker := time.NewTicker(v.opts.refresh)
	defer ticker.Stop()
	for {
		if err := v.draw(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// draw renders the whole view into a buffer first, so the screen is cleared
// and rewritten in one write and does not flicker.
func (v *view) draw(ctx context.Context) error {
	var buf bytes.Buffer
	if !v.opts.plain {
		buf.WriteString(clearScreen)
	}
	v.header(ctx, &buf)
	for _, s := range v.sections {
		fmt.Fprintf(&buf, "\n== %s\n", s.title)
		tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
		if err := s.render(ctx, tw); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			fmt.Fprintf(tw, "error: %v\n", err)
		}
		tw.Flush()
	}
	_, err := os.Stdout.Write(buf.Bytes())
	return err
}

func (v *view) header(ctx context.Context, w io.Writer) {
	fmt.Fprintf(w, "gputask demo  up %s  apiserver %s\n", time.Since(v.started).Round(time.Second), v.cp.APIServerURL)
	fmt.Fprintf(w, "in another terminal:  export KUBECONFIG=%s; kubectl get gt,gts,pods\n", v.opts.kubeconfig)
	if v.allRunningAfter == 0 && v.allTasksRunning(ctx) {
		v.allRunningAfter = time.Since(v.started)
	}
	if v.allRunningAfter > 0 {
		fmt.Fprintf(w, "all tasks Running %.1fs after start.  ", v.allRunningAfter.Seconds())
	}
	fmt.Fprintf(w, "Ctrl-C stops everything.\n")
}

// allTasksRunning reports whether there are tasks and each one runs or has
// finished well.
func (v *view) allTasksRunning(ctx context.Context) bool {
	list, err := v.cp.GPUTask.GputaskV1().GPUTasks("").List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) == 0 {
		return false
	}
	for _, task := range list.Items {
		if task.Status.Phase != gputaskv1.GPUTaskRunning && task.Status.Phase != gputaskv1.GPUTaskSucceeded {
			return false
		}
	}
	return true
}

func (v *view) renderTasks(ctx context.Context, w io.Writer) error {
	list, err := v.cp.GPUTask.GputaskV1().GPUTasks("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	sort.Slice(list.Items, func(i, j int) bool { return key(&list.Items[i].ObjectMeta) < key(&list.Items[j].ObjectMeta) })
	pods, err := v.cp.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	podByKey := make(map[string]*corev1.Pod, len(pods.Items))
	for i := range pods.Items {
		podByKey[key(&pods.Items[i].ObjectMeta)] = &pods.Items[i]
	}
	fmt.Fprintln(w, "NAMESPACE\tNAME\tGPU\tAMOUNT\tPHASE\tNODE\tWORKER\tWHY")
	for _, task := range list.Items {
		amount := "1"
		if task.Spec.GPUAmount != nil {
			amount = task.Spec.GPUAmount.String()
		}
		var pod *corev1.Pod
		if task.Status.PodName != "" {
			pod = podByKey[task.Namespace+"/"+task.Status.PodName]
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", task.Namespace, task.Name, orDash(task.Spec.GPU), amount,
			orDash(string(task.Status.Phase)), orDash(task.Status.NodeName), workerOf(&task, pod).state(), why(&task))
	}
	return nil
}

func (v *view) renderTaskSets(ctx context.Context, w io.Writer) error {
	list, err := v.cp.GPUTask.GputaskV1().GPUTaskSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "NAMESPACE\tNAME\tDESIRED\tCURRENT\tRUNNING\tLOAD\tLAST DECISION")
	for _, set := range list.Items {
		desired := "-"
		if set.Spec.Replicas != nil {
			desired = fmt.Sprint(*set.Spec.Replicas)
		}
		decision := ""
		if d := set.Status.LastDecision; d != nil {
			decision = truncate(fmt.Sprintf("%d->%d %s", d.From, d.To, d.Reason), 50)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", set.Namespace, set.Name, desired,
			set.Status.Replicas, set.Status.RunningReplicas, orDash(set.Status.LoadIndex), decision)
	}
	return nil
}

// renderAutoscaling shows the autoscaled set over time: a table of the last
// samples, one per autoscaling interval, then the load and the desired
// count as sparklines over a whole round of the load curve, and the last
// decision in full.
func (v *view) renderAutoscaling(ctx context.Context, w io.Writer) error {
	set, err := v.cp.GPUTask.GputaskV1().GPUTaskSets(metav1.NamespaceDefault).Get(ctx, autoscaledSetName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	served, segment := v.load.Now()
	// Half a refresh of slack: the ticker's jitter must not skip a sample.
	if now := time.Now(); now.Sub(v.lastSample) >= sampleEvery-v.opts.refresh/2 {
		counts, err := v.setWorkers(ctx)
		if err != nil {
			return err
		}
		v.history = appendSample(v.history, newSample(now.Sub(v.started), served, segment, set, counts))
		v.lastSample = now
	}

	fmt.Fprintln(w, historyHeader)
	for _, s := range last(v.history, tableSamples) {
		fmt.Fprintln(w, historyRow(s))
	}

	spark := last(v.history, sparkSamples)
	loads := make([]float64, len(spark))
	desired := make([]float64, len(spark))
	for i, s := range spark {
		loads[i], desired[i] = s.served, float64(s.desired)
	}
	top := float64(8)
	if a := set.Spec.Autoscaling; a != nil {
		top = float64(a.MaxReplicas)
	}
	fmt.Fprintf(w, "load now %.2f (%s); last %v, one mark per %v:\n", served, segment, time.Duration(len(spark))*sampleEvery, sampleEvery)
	fmt.Fprintf(w, "  load     0 %s 1\n", sparkline(loads, 1))
	fmt.Fprintf(w, "  desired  0 %s %d\n", sparkline(desired, top), int(top))
	if d := set.Status.LastDecision; d != nil {
		// The autoscaler rewrites its status only when the decision changes, so
		// the time is when this decision was first made.
		fmt.Fprintf(w, "last decision (first made %s ago): %d->%d %s: %s\n", time.Since(d.Time.Time).Round(time.Second), d.From, d.To, d.Reason, truncate(d.Message, 110))
	}
	fmt.Fprintf(w, "%s\n", statusCounts(set))
	fmt.Fprintf(w, "%s\n", conditionSummary(set.Status.Conditions))
	return nil
}

// setWorkers counts the autoscaled set's workers by what they show now.
func (v *view) setWorkers(ctx context.Context) (workerCounts, error) {
	tasks, pods, err := setTasksAndPods(ctx, v.cp)
	if err != nil {
		return workerCounts{}, err
	}
	ws := make([]worker, 0, len(tasks))
	for i := range tasks {
		ws = append(ws, workerOf(&tasks[i], pods[tasks[i].Status.PodName]))
	}
	return countWorkers(ws), nil
}

func (v *view) renderPods(ctx context.Context, w io.Writer) error {
	list, err := v.cp.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	sort.Slice(list.Items, func(i, j int) bool { return key(&list.Items[i].ObjectMeta) < key(&list.Items[j].ObjectMeta) })
	fmt.Fprintln(w, "NAMESPACE\tNAME\tPHASE\tNODE\tGPUS\tIP")
	for _, pod := range list.Items {
		phase := string(pod.Status.Phase)
		if pod.DeletionTimestamp != nil {
			phase = "Terminating"
		}
		gpus := strconv.FormatInt(podGPUs(&pod), 10)
		if len(pod.Spec.ResourceClaims) > 0 {
			gpus = "claim"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", pod.Namespace, pod.Name, phase,
			orDash(pod.Spec.NodeName), gpus, orDash(pod.Status.PodIP))
	}
	return nil
}

func (v *view) renderNodes(ctx context.Context, w io.Writer) error {
	nodes, err := v.cp.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	pods, err := v.cp.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	used := map[string]int64{}
	for _, pod := range pods.Items {
		if pod.Spec.NodeName != "" && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			used[pod.Spec.NodeName] += podGPUs(&pod)
		}
	}
	devices, allocated, err := v.draDevices(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "NAME\tMODEL\tREADY\tGPUS\tUSED\tFREE\t")
	for _, node := range nodes.Items {
		allocatable := node.Status.Allocatable[framework.GPUResourceName]
		total, n, model := allocatable.Value(), used[node.Name], node.Labels[framework.GPUProductLabel]
		if d, ok := devices[node.Name]; ok {
			total, n, model = d.count, allocated[node.Name], "DRA: "+d.model
		}
		fmt.Fprintf(w, "%s\t%s\t%v\t%d\t%d\t%d\t%s\n", node.Name, model,
			framework.NodeReady(&node), total, n, total-n, bar(n, total))
	}
	return nil
}

// nodeDevices are the DRA devices a node's ResourceSlices publish.
type nodeDevices struct {
	count int64
	model string
}

// draDevices counts, per node, the devices of the ResourceSlices and those
// that ResourceClaims' allocations hold.
func (v *view) draDevices(ctx context.Context) (map[string]nodeDevices, map[string]int64, error) {
	slices, err := v.cp.Kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	devices, poolNode := map[string]nodeDevices{}, map[string]string{}
	for _, s := range slices.Items {
		if s.Spec.NodeName == nil {
			continue
		}
		node := *s.Spec.NodeName
		d := devices[node]
		d.count += int64(len(s.Spec.Devices))
		for _, dev := range s.Spec.Devices {
			if a, ok := dev.Attributes["productName"]; ok && a.StringValue != nil {
				d.model = *a.StringValue
			}
		}
		devices[node] = d
		poolNode[s.Spec.Driver+"/"+s.Spec.Pool.Name] = node
	}
	claims, err := v.cp.Kube.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	allocated := map[string]int64{}
	for _, c := range claims.Items {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			allocated[poolNode[r.Driver+"/"+r.Pool]]++
		}
	}
	return devices, allocated, nil
}

// podGPUs is what the scheduler counts for a pod: its containers' GPU limits.
func podGPUs(pod *corev1.Pod) int64 {
	var sum resource.Quantity
	for _, c := range pod.Spec.Containers {
		if q, ok := c.Resources.Limits[framework.GPUResourceName]; ok {
			sum.Add(q)
		}
	}
	return sum.Value()
}

// bar draws used GPUs as # and free ones as . so a full node stands out.
func bar(used, total int64) string {
	if total <= 0 || used < 0 || used > total {
		return ""
	}
	return "[" + strings.Repeat("#", int(used)) + strings.Repeat(".", int(total-used)) + "]"
}

func key(m *metav1.ObjectMeta) string { return m.Namespace + "/" + m.Name }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
