package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/replay"
	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
	"github.com/gputask/gputask-controller/test/framework"
)

// The SLO fidelity runs: workers of two slots that kwok starts at once,
// scaled by the SLO policy every 3 s between 1 and 4 tasks. Every request
// takes two intervals, arrives 2 s after an evaluation, and a new worker
// serves from 1 s after the evaluation that asked for it, so that nothing
// the backend counts changes within a second of an evaluation: an
// evaluation that comes a few milliseconds later in the cluster than in
// the model reads the same values. Behind Prometheus the model takes its
// scrapes when Prometheus scrapes the backend, and the evaluations fall
// midway between them (see alignToScrapes), so that the query's window
// and the model's hold the same samples.
const (
	sloInterval     = 3 * time.Second
	sloSlots        = 2
	sloService      = 2 * sloInterval
	sloArrivalPhase = 2 * time.Second
	// sloReady is the model's start-up: below the interval, as kwok's
	// start is, so that both runs look ahead by the interval (the SLO
	// policy looks ahead by the longer of the two).
	sloReady = time.Second
)

// sloStepCounts is a step: one request every other interval, a surge of
// two an interval, and a quiet end long enough for the minute of the
// rates to forget the surge.
func sloStepCounts() []int {
	var c []int
	for i := range 6 {
		c = append(c, i%2)
	}
	for range 8 {
		c = append(c, 2)
	}
	return append(c, make([]int, 20)...)
}

// sloBurstyCounts are bursts of four to seven requests between quiet
// stretches.
func sloBurstyCounts() []int {
	return []int{0, 1, 0, 0, 5, 0, 0, 1, 0, 0, 6, 0, 1, 0, 0, 0, 4, 0, 0, 1, 0, 7, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}
}

// sloTrace turns arrivals per interval into requests, starting lead
// intervals after the pool.
func sloTrace(counts []int, lead int) workload.Trace {
	var reqs []workload.Served
	for k, n := range counts {
		at := time.Duration(lead+k)*sloInterval + sloArrivalPhase
		for range n {
			reqs = append(reqs, workload.Served{Arrival: at, Service: sloService})
		}
	}
	return workload.Trace{Requests: reqs}
}

// sloSet is the SLO pool both runs scale, its metrics made by metric for
// each role.
func sloSet(model string, roles []gputaskv1.MetricRole, metric func(gputaskv1.MetricRole) gputaskv1.MetricSpec) *gputaskv1.GPUTaskSet {
	amount := intstr.FromInt32(1)
	var metrics []gputaskv1.MetricSpec
	for _, role := range roles {
		m := metric(role)
		m.Name, m.Role = strings.ToLower(string(role)), role
		metrics = append(metrics, m)
	}
	return &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: poolName},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To[int32](1),
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{GPU: model, GPUAmount: &amount}},
			Autoscaling: &gputaskv1.AutoscalingSpec{
				MinReplicas: ptr.To[int32](1),
				MaxReplicas: 4,
				Interval:    &gputaskv1.Duration{Duration: sloInterval},
				Metrics:     metrics,
				Policy: gputaskv1.ScalingPolicy{Type: gputaskv1.SLOPolicy, SLO: &gputaskv1.SLOSpec{
					Wait: &gputaskv1.Duration{Duration: 3 * time.Second}, Percentile: ptr.To(resource.MustParse("95")), SlotsPerTask: sloSlots,
				}},
				ScaleDownStabilizationWindow: &gputaskv1.Duration{},
			},
		},
	}
}

// jsonPaths are where sim.LoadIndexServer's document holds each role.
var jsonPaths = map[gputaskv1.MetricRole]string{
	gputaskv1.RoleArrivals:       "data.arrivals",
	gputaskv1.RoleCompletions:    "data.completions",
	gputaskv1.RoleRunning:        "data.running",
	gputaskv1.RoleWaiting:        "data.waiting",
	gputaskv1.RoleWaitPercentile: "data.wait_p95",
}

// promQueries are each role's query over sim.LoadIndexServer's
// /metrics, with the [1m] of the model's rates (sim.RateWindow).
var promQueries = map[gputaskv1.MetricRole]string{
	gputaskv1.RoleArrivals:    "rate(" + sim.MetricArrived + "[1m])",
	gputaskv1.RoleCompletions: "rate(" + sim.MetricCompleted + "[1m])",
	gputaskv1.RoleRunning:     sim.MetricRunning,
	gputaskv1.RoleWaiting:     sim.MetricWaiting,
}

// TestReplayIsTheControllerForSLO: the SLO pool's figures in the replay
// are the product's. The controller scales an SLO set from its role
// metrics, read by JSON path from sim.LoadIndexServer or by PromQL from
// a real Prometheus scraping the same server's /metrics, while the
// replay's model of the same set (replay.Sim) is stepped at the
// controller's own evaluations: each evaluation's first read steps the
// model, whose pool is what the server serves. Both must come to the same
// count at every evaluation, on a step and on a bursty trace.
//
// What the model must get right to pass: the roles it reads and how (the
// completions case derives arrivals from completions and the pool's
// growth, the bursty one corrects by the observed wait percentile), the
// state the SLO policy carries between evaluations, the tasks it counts
// as starting and the start-up it measures from them, and, behind
// Prometheus, the scrape: gauges as of the last scrape, rates over the
// scrapes of the last minute (Pool.SetScrape), the scrapes being those
// Prometheus takes (Pool.FollowScrapes). The cluster's evaluations
// come a few milliseconds later each interval than exact multiples of it;
// the model is stepped when they read (at least an interval apart, as the
// controller dates them), so that the model's elapsed time between
// evaluations, which the SLO policy's smoothing and derived arrivals
// divide by, differs from the controller's by milliseconds only.
//
// The Prometheus runs start the counters at a base and scrape for a
// minute before the first request. Prometheus's rate() extrapolates
// towards the window's ends, but not below a counter's zero and by half a
// scrape only where the series is younger than the window; the model's
// rates are the increase over the scrapes in the window, which is what
// rate() gives over a full window of a counter above zero.
func TestReplayIsTheControllerForSLO(t *testing.T) {
	// Beside the others: each run has a namespace and GPU model of its
	// own, and compares that namespace's decisions alone.
	t.Parallel()
	step := []gputaskv1.MetricRole{gputaskv1.RoleArrivals, gputaskv1.RoleRunning, gputaskv1.RoleWaiting}
	bursty := []gputaskv1.MetricRole{gputaskv1.RoleCompletions, gputaskv1.RoleRunning, gputaskv1.RoleWaiting}
	tests := []struct {
		name       string
		counts     []int
		roles      []gputaskv1.MetricRole
		prometheus bool
	}{
		{name: "http-step", counts: sloStepCounts(), roles: step},
		{name: "http-bursty", counts: sloBurstyCounts(), roles: append(bursty, gputaskv1.RoleWaitPercentile)},
		{name: "prometheus-step", counts: sloStepCounts(), roles: step, prometheus: true},
		{name: "prometheus-bursty", counts: sloBurstyCounts(), roles: bursty, prometheus: true},
	}
	for _, tc := range tests {
		run := func(t *testing.T) sloRun {
			ns := cp.NamespaceT(t)
			model := createGPUNodes(t, ns, 2, 2)
			rec := recordPool(t, ns)
			// Two quiet intervals before the trace; behind Prometheus, a
			// minute of scrapes.
			lead := 2
			if tc.prometheus {
				lead = int(sim.RateWindow/sloInterval) + 1
			}
			steps := lead + len(tc.counts) + 3
			d := &sloDriver{trace: sloTrace(tc.counts, lead), steps: steps, index: sim.NewLoadIndexServer(sim.LoadDemand)}
			d.index.CounterBase = 1000
			backend := httptest.NewServer(http.HandlerFunc(d.serveBackend))
			t.Cleanup(backend.Close)

			var metric func(gputaskv1.MetricRole) gputaskv1.MetricSpec
			if tc.prometheus {
				d.scrape = framework.PrometheusScrapeInterval
				prom := cp.StartPrometheusT(t, backend.Listener.Addr().String())
				target, err := url.Parse(prom.URL)
				if err != nil {
					t.Fatal(err)
				}
				proxy := httputil.NewSingleHostReverseProxy(target)
				front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					d.evaluation()
					proxy.ServeHTTP(w, r)
				}))
				t.Cleanup(front.Close)
				metric = func(role gputaskv1.MetricRole) gputaskv1.MetricSpec {
					return gputaskv1.MetricSpec{Prometheus: &gputaskv1.PrometheusSource{ServerAddress: front.URL, Query: promQueries[role]}}
				}
				d.alignToScrapes(t)
			} else {
				metric = func(role gputaskv1.MetricRole) gputaskv1.MetricSpec {
					return gputaskv1.MetricSpec{HTTP: &gputaskv1.HTTPSource{URL: backend.URL, ValueLocation: jsonPaths[role]}}
				}
			}
			set := sloSet(model, tc.roles, metric)
			d.set = set
			seen := watchDecisions(t, ns)
			if _, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Create(context.Background(), set, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			framework.Poll(t, time.Duration(steps+20)*sloInterval, "the model stepped at every evaluation of the trace", func(context.Context) (bool, string) {
				return d.done(), d.progress()
			})

			// The last evaluation's count lands within milliseconds.
			time.Sleep(sloInterval / 2)
			want, times := d.decisions()
			got := realDecisions(rec, times)
			if err := d.failure(); err != nil {
				t.Fatal(err)
			}
			if ups, downs := directions(want); ups < 2 || downs < 2 {
				t.Fatalf("the model made %v: the trace must drive at least two scale-ups and two scale-downs", want)
			}
			m := sloRun{log: fmt.Sprintf("decisions (replicas@evaluation), model: %v; controller: %v\n%s", want, got, d.summary()), late: d.late()}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				m.err = fmt.Errorf("the controller made %v, the model %v (replicas@evaluation); want the same counts at the same evaluations", got, want)
				m.side = d.sideBySide(seen.byEvaluation(times))
			}
			return m
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// A read that reaches the backend a tenth of a second or more
			// after the controller began its evaluation (on a machine
			// loaded by the tests beside) steps the model that much
			// later: that evaluation's rates divide by a longer interval
			// than the controller's, and the counts may part from there.
			// So may an evaluation that comes within a tenth of a second
			// of a scrape, where the query and the model may take the
			// window's samples on either side of it. A run whose counts
			// part where an evaluation came so late or so near a scrape
			// runs once more, in a namespace of its own, after the first
			// one's set, servers and nodes are gone; one whose counts
			// part with every evaluation on time and clear of the
			// scrapes fails at once.
			for attempt := 1; attempt <= sloAttempts; attempt++ {
				var m sloRun
				t.Run(fmt.Sprint("attempt-", attempt), func(t *testing.T) { m = run(t) })
				if t.Failed() {
					return
				}
				t.Log(m.log)
				if m.err == nil {
					return
				}
				if attempt == sloAttempts || len(m.late) == 0 {
					t.Error(m.err)
					t.Logf("each evaluation, model then controller:\n%s", m.side)
					return
				}
				t.Logf("attempt %d: %v, with evaluations off their interval or within 100ms of a scrape (%v); once more", attempt, m.err, m.late)
			}
		})
	}
}

// sloAttempts is how many times in all a fidelity run whose counts part
// after an evaluation came late or near a scrape runs.
const sloAttempts = 2

// sloRun is what a fidelity run found: its decisions and timing, the
// evaluations whose interval was off by more than 100ms or that came
// within 100ms of a scrape, and,
// where the counts parted, the error and the decisions side by side.
type sloRun struct {
	log  string
	late []string
	err  error
	side string
}

// sloDriver plays the model in step with the controller: the first read
// of each evaluation steps it, and the backend serves its pool.
type sloDriver struct {
	trace  workload.Trace
	set    *gputaskv1.GPUTaskSet
	steps  int
	scrape time.Duration
	index  *sim.LoadIndexServer

	mu sync.Mutex
	// scrapes are the times Prometheus scraped the backend.
	scrapes []time.Time
	sim     *replay.Sim
	// at and replicas are the model's evaluations and the count after
	// each.
	at       []time.Time
	replicas []int32
	// reads are when each evaluation's first read came, which at may
	// be a few milliseconds after.
	reads []time.Time
	// inputs are what the model decided at each evaluation and why;
	// extra the reads that came apart from an evaluation's first.
	inputs []string
	err    error
	extra  []string
}

// serveBackend serves the model's pool: to a scrape as it is now, to a
// JSON read as the evaluation it steps read it.
func (d *sloDriver) serveBackend(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/metrics" {
		d.mu.Lock()
		d.scrapes = append(d.scrapes, time.Now())
		if d.sim != nil && !d.finished() {
			d.sim.Advance(time.Now())
			d.sim.Pool.Scrape()
			d.index.Publish(d.sim.Pool.Observe())
		}
		d.mu.Unlock()
	} else {
		d.evaluation()
	}
	d.index.ServeHTTP(w, r)
}

// evaluation steps the model on the first read of an evaluation: the
// reads of one evaluation's metrics come together, those of the next one
// an interval later.
func (d *sloDriver) evaluation() {
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.finished() {
		return
	}
	if len(d.at) > 0 && now.Sub(d.at[len(d.at)-1]) < sloInterval/2 {
		if gap := now.Sub(d.at[len(d.at)-1]); gap > 50*time.Millisecond {
			d.extra = append(d.extra, fmt.Sprintf("%d+%v", len(d.at)-1, gap.Round(time.Millisecond)))
		}
		return
	}
	// The controller dates its evaluations by the start of their reads,
	// an interval or more apart; this request arrived after that start,
	// by a time that varies by a millisecond or so. So the model's
	// evaluations keep at least the interval between them, as the
	// controller's do, lest one be held for a step a millisecond short.
	d.reads = append(d.reads, now)
	if len(d.at) > 0 {
		now = maxTime(now, d.at[len(d.at)-1].Add(sloInterval))
	}
	if d.sim == nil {
		ours, err := replay.NewOurs(d.set, sim.LoadDemand)
		if err != nil {
			d.err = err
			return
		}
		p := sim.NewPool(d.trace, now, sloSlots, sloReady)
		if d.scrape > 0 {
			p.SetScrape(d.scrape)
			p.FollowScrapes()
		}
		d.sim = replay.NewSim(p, ours)
	} else if d.scrape > 0 {
		// Between scrapes the model's pool goes on too, as the backend does.
		d.sim.Advance(now)
	}
	if d.scrape == 0 {
		d.sim.Advance(now)
		d.index.Publish(d.sim.Pool.Metrics())
	}
	d.replicas = append(d.replicas, d.sim.Step(now))
	d.at = append(d.at, now)
	last := d.sim.Ours.Last
	d.inputs = append(d.inputs, fmt.Sprintf("%d %s [%s] %s", d.replicas[len(d.replicas)-1], last.Reason, last.Inputs, last.Message))
}

func (d *sloDriver) finished() bool { return len(d.at) >= d.steps || d.err != nil }

func (d *sloDriver) done() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.finished()
}

func (d *sloDriver) failure() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

func (d *sloDriver) progress() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return fmt.Sprintf("%d of %d evaluations", len(d.at), d.steps)
}

// decisions are the model's changes of the count, by evaluation (the
// first is 0), and when the evaluations' first reads came.
func (d *sloDriver) decisions() ([]decision, []time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []decision
	last := int32(1)
	for k, r := range d.replicas {
		if r != last {
			out = append(out, decision{k: k, replicas: r})
			last = r
		}
	}
	return out, append([]time.Time(nil), d.reads...)
}

// late lists the evaluations whose interval from the one before was off
// by more than 100ms and, behind Prometheus, those whose first read came
// within 100ms of a scrape: the query's window, back from when it
// reaches Prometheus, and the model's, back from the read, may then hold
// different samples.
func (d *sloDriver) late() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lateLocked()
}

func (d *sloDriver) lateLocked() []string {
	var late []string
	offBy := func(gap, want time.Duration) bool {
		return gap < want-100*time.Millisecond || gap > want+100*time.Millisecond
	}
	for k := 1; k < len(d.at); k++ {
		if gap := d.at[k].Sub(d.at[k-1]); offBy(gap, sloInterval) {
			late = append(late, fmt.Sprintf("%d after %v", k, gap.Round(time.Millisecond)))
		}
	}
	for k, read := range d.reads {
		i, _ := slices.BinarySearchFunc(d.scrapes, read, time.Time.Compare)
		for _, j := range []int{i - 1, i} {
			if j >= 0 && j < len(d.scrapes) && d.scrapes[j].Sub(read).Abs() < 100*time.Millisecond {
				late = append(late, fmt.Sprintf("%d %v from a scrape", k, d.scrapes[j].Sub(read).Round(time.Millisecond)))
			}
		}
	}
	return late
}

func (d *sloDriver) summary() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sim == nil {
		return "the model never ran"
	}
	late := d.lateLocked()
	drift := d.at[len(d.at)-1].Sub(d.at[0]) - time.Duration(len(d.at)-1)*sloInterval
	var ahead time.Duration
	for k := range d.at {
		ahead = max(ahead, d.at[k].Sub(d.reads[k]))
	}
	p := d.sim.Pool
	return fmt.Sprintf("reads apart from the evaluations': %v; %d evaluations, %v later in all than exact intervals, evaluations off their interval or within 100ms of a scrape: %v, the model at most %v after the read; %d scrapes; the model's pool: %d workers, %.4f GPU-hours, last decision %q",
		d.extra, len(d.at), drift.Round(time.Millisecond), late, ahead, len(d.scrapes), len(p.AllWorkers()), p.GPUHours(p.Now()), d.sim.Ours.Last.Message)
}

// alignToScrapes waits until Prometheus has scraped the backend twice and
// then until midway between two scrapes, where the set is created: its
// evaluations, a whole number of seconds apart, then fall midway between
// the scrapes too.
func (d *sloDriver) alignToScrapes(t *testing.T) {
	t.Helper()
	framework.Poll(t, 30*time.Second, "two scrapes of the backend", func(context.Context) (bool, string) {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.scrapes) >= 2, fmt.Sprintf("%d scrapes", len(d.scrapes))
	})
	d.mu.Lock()
	last := d.scrapes[len(d.scrapes)-1]
	d.mu.Unlock()
	since := time.Since(last) % d.scrape
	time.Sleep((d.scrape/2 - since + d.scrape) % d.scrape)
}

// realDecisions are the controller's changes of the count, each by the
// last evaluation whose first read came before it, up to the evaluation
// after the model's last.
func realDecisions(rec *poolRecorder, at []time.Time) []decision {
	var out []decision
	steps, _ := rec.snapshot()
	for _, s := range steps[1:] {
		if s.at.After(at[len(at)-1].Add(sloInterval / 2)) {
			break
		}
		k := -1
		for k+1 < len(at) && !at[k+1].After(s.at) {
			k++
		}
		out = append(out, decision{k: k, replicas: s.replicas})
	}
	return out
}

// directions counts the scale-ups and scale-downs in decisions from 1.
func directions(ds []decision) (ups, downs int) {
	last := int32(1)
	for _, d := range ds {
		switch {
		case d.replicas > last:
			ups++
		case d.replicas < last:
			downs++
		}
		last = d.replicas
	}
	return ups, downs
}

// sideBySide shows what the model and the controller decided at each
// evaluation.
func (d *sloDriver) sideBySide(real []string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var b strings.Builder
	for k, in := range d.inputs {
		fmt.Fprintf(&b, "%2d model      %s\n", k, in)
		if k < len(real) {
			fmt.Fprintf(&b, "   controller %s\n", real[k])
		}
	}
	return b.String()
}

// decisionWatch records the set's status.lastDecision as it changes.
type decisionWatch struct {
	mu        sync.Mutex
	at        []time.Time
	decisions []string
}

func watchDecisions(t *testing.T, ns string) *decisionWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dw := &decisionWatch{}
	go func() {
		defer w.Stop()
		last := ""
		for ev := range w.ResultChan() {
			set, ok := ev.Object.(*gputaskv1.GPUTaskSet)
			if !ok || set.Status.LastDecision == nil {
				continue
			}
			ld := set.Status.LastDecision
			s := fmt.Sprintf("%d %s [%s] %s", ld.To, ld.Reason, ld.Inputs, ld.Message)
			if s == last {
				continue
			}
			last = s
			dw.mu.Lock()
			dw.at, dw.decisions = append(dw.at, time.Now()), append(dw.decisions, s)
			dw.mu.Unlock()
		}
	}()
	return dw
}

// byEvaluation is the last decision seen before each next evaluation.
func (dw *decisionWatch) byEvaluation(at []time.Time) []string {
	dw.mu.Lock()
	defer dw.mu.Unlock()
	out := make([]string, len(at))
	j := 0
	for k := range at {
		next := time.Now()
		if k+1 < len(at) {
			next = at[k+1]
		}
		for j < len(dw.at) && dw.at[j].Before(next) {
			out[k] = dw.decisions[j]
			j++
		}
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
