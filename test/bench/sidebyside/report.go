package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gputask/gputask-controller/test/framework"
)

// report collects the results and renders them as markdown.
type report struct {
	settings
	host              string
	started, finished time.Time
	results           []result
}

func (r *report) add(res result) { r.results = append(r.results, res) }

// save writes the report so far, so that an interrupted benchmark keeps the
// runs it finished.
func (r *report) save() error {
	if err := os.MkdirAll(filepath.Dir(r.out), 0o755); err != nil {
		return fmt.Errorf("creating the report's directory: %w", err)
	}
	if err := os.WriteFile(r.out, []byte(r.markdown()), 0o644); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	return nil
}

func (r *report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Side by side: GPUTaskSet (gputask-controller) and ReplicaSet (kube-controller-manager)\n\n")
	fmt.Fprintf(&b, "N = %d one-GPU tasks or pods per run. Machine: %s, %d CPUs, %s. Started %s",
		r.n, r.host, runtime.NumCPU(), memTotal(), r.started.UTC().Format("2006-01-02 15:04 MST"))
	if !r.finished.IsZero() {
		fmt.Fprintf(&b, ", finished %s", r.finished.UTC().Format("15:04 MST"))
	} else {
		b.WriteString(", still running")
	}
	b.WriteString(".\n\n")
	fmt.Fprintf(&b, "Each run has a fresh control plane, %d kwok nodes of %d GPUs and kube-scheduler at --kube-api-qps=%d. ",
		r.n/gpusPerNode+1, gpusPerNode, schedulerQPS)
	flags := "default flags"
	if len(r.args) > 0 {
		flags = strings.Join(r.args, " ")
	}
	if len(r.env) > 0 {
		flags += ", environment " + strings.Join(r.env, " ")
	}
	fmt.Fprintf(&b, "A is bin/gputask-controller (%s) with a GPUTaskSet; B is kube-controller-manager --controllers=replicaset with a ReplicaSet; both get the qps/burst shown and -v=1. ", flags)
	b.WriteString("Before the clock starts, a server-side dry run of each kind warms the API server up, as in a cluster that has served them before. Times count from the create of the set. Writes are the workload's writes (gputask.io objects, replicasets, pods, core/v1 events) ")
	b.WriteString("from apiserver_request_total deltas, from the create until they stand still for 2 s after convergence, without the benchmark's own create; other writes are kube-scheduler's bindings and events and kwok's pod status. ")
	b.WriteString("CPU is the controller's utime+stime from the create to convergence; RSS its VmHWM. For B both are kube-controller-manager's. ")
	b.WriteString("Server CPU is kube-apiserver's and etcd's utime+stime over the same span: the machine's two cores also run them, the scheduler and kwok. ")
	fmt.Fprintf(&b, "Reaction: after each A run's steady window, a second, autoscaled set (Step, interval %s) beside the large one has its load index raised %d times, each at a random point of the interval once its tasks are Ready; the figure is the time from the change to the scale write.\n\n",
		reactionInterval, r.reactions)

	r.writeRuns(&b)
	r.writeRatios(&b)
	r.writeSeries(&b)
	return b.String()
}

func (r *report) writeRuns(b *strings.Builder) {
	b.WriteString("## Runs\n\n")
	b.WriteString("| run | time | qps/burst | pods created s | pods Running s | tasks Running s | writes | writes/N | 409s | other writes | CPU s | server CPU s | peak RSS MB | steady writes | reaction median / max s |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, res := range r.results {
		work := res.writes.Filter(framework.WorkloadWrite)
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %d | %.2f | %d | %d | %s | %.1f | %s | %s | %s |\n",
			res.name(), res.at.UTC().Format("15:04"), res.limitsText(),
			sec(res.podsCreated), sec(res.podsRunning), sec(res.tasksRunning),
			work.Total(), float64(work.Total())/float64(res.n), conflicts(work),
			res.writes.Total()-work.Total(), res.cpuText(), res.serverCPU.Seconds(), res.rssText(), res.steadyText(), res.reactionText())
	}
	b.WriteString("\n")
}

// writeRatios compares each GPUTaskSet run with the ReplicaSet run of the
// same round and limits; the targets of issue 11 follow in the header.
func (r *report) writeRatios(b *strings.Builder) {
	b.WriteString("## Ratios to the ReplicaSet run of the same round\n\n")
	fmt.Fprintf(b, "Targets: created ≤ 1.0, tasks Running / RS pods Running ≤ 1.3, writes/N ≤ 3.2, CPU ≤ 2, steady writes 0; reaction median ≤ %s s (interval + 1 s).\n\n",
		sec(reactionInterval+time.Second))
	b.WriteString("| qps/burst | round | pods created | tasks Running / RS pods Running | writes | CPU | peak RSS | server CPU |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, a := range r.results {
		if a.kind != kindTaskSet {
			continue
		}
		rs, ok := r.find(kindReplicaSet, a.limits, a.round)
		if !ok {
			continue
		}
		fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s | %s | %s |\n", a.limits, a.round,
			ratio(a.podsCreated.Seconds(), rs.podsCreated.Seconds()),
			ratio(a.tasksRunning.Seconds(), rs.podsRunning.Seconds()),
			ratio(float64(a.writes.Filter(framework.WorkloadWrite).Total()), float64(rs.writes.Filter(framework.WorkloadWrite).Total())),
			ratio(a.usage.CPU.Seconds(), rs.usage.CPU.Seconds()),
			ratio(float64(a.usage.PeakRSS), float64(rs.usage.PeakRSS)),
			ratio(a.serverCPU.Seconds(), rs.serverCPU.Seconds()))
	}
	b.WriteString("\n")
}

// writeSeries breaks the workload writes down by verb, resource,
// subresource and code, one column per run.
func (r *report) writeSeries(b *strings.Builder) {
	b.WriteString("## Workload writes by series, create to convergence (plus 2 s quiet)\n\n")
	all := framework.APIWrites{}
	for _, res := range r.results {
		for k, n := range res.writes.Filter(framework.WorkloadWrite) {
			all[k] += n
		}
	}
	b.WriteString("| series |")
	for _, res := range r.results {
		fmt.Fprintf(b, " %s %s |", res.name(), res.limitsText())
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(r.results)) + "\n")
	for _, k := range all.Keys() {
		fmt.Fprintf(b, "| %s |", k)
		for _, res := range r.results {
			fmt.Fprintf(b, " %d |", res.writes[k])
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")

	var steady []string
	for _, res := range r.results {
		if w := res.steady.Filter(framework.WorkloadWrite); len(w) > 0 {
			steady = append(steady, fmt.Sprintf("%s %s:\n%s", res.name(), res.limitsText(), w))
		}
	}
	if len(steady) > 0 {
		b.WriteString("## Workload writes at steady state\n\n```\n" + strings.Join(steady, "\n") + "```\n")
	}
}

func (r *report) find(kind runKind, l limits, round int) (result, bool) {
	for _, res := range r.results {
		if res.kind == kind && res.limits == l && res.round == round {
			return res, true
		}
	}
	return result{}, false
}

func (res result) name() string {
	switch res.kind {
	case kindTaskSet:
		return "A" + strconv.Itoa(res.round) + " GPUTaskSet"
	case kindReplicaSet:
		return "B" + strconv.Itoa(res.round) + " ReplicaSet"
	}
	return "ceiling"
}

func (res result) limitsText() string {
	if res.kind == kindCeiling {
		return "none"
	}
	return res.limits.String()
}

func (res result) cpuText() string {
	if !res.hasUsage {
		return "–"
	}
	return strconv.FormatFloat(res.usage.CPU.Seconds(), 'f', 1, 64)
}

func (res result) rssText() string {
	if !res.hasUsage {
		return "–"
	}
	return strconv.FormatInt(res.usage.PeakRSS>>20, 10)
}

func (res result) reactionText() string {
	if len(res.reaction.samples) == 0 {
		return "–"
	}
	return fmt.Sprintf("%s / %s (%d)", sec(res.reaction.median()), sec(res.reaction.max()), len(res.reaction.samples))
}

func (res result) steadyText() string {
	return fmt.Sprintf("%d in %.0f s", res.steady.Filter(framework.WorkloadWrite).Total(), res.steadyWindow.Seconds())
}

// conflicts counts the writes answered 409 Conflict.
func conflicts(w framework.APIWrites) int {
	n := 0
	for k, c := range w {
		if k.Code == "409" {
			n += c
		}
	}
	return n
}

func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "–"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64)
}

// memTotal reads the machine's memory from /proc/meminfo.
func memTotal() string {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "memory unknown"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err == nil {
				return fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
			}
		}
	}
	return "memory unknown"
}
