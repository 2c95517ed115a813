package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/autoscaler"
	informers "github.com/gputask/gputask-controller/pkg/generated/informers/externalversions"
	"github.com/gputask/gputask-controller/pkg/loadindex"
	"github.com/gputask/gputask-controller/pkg/metrics"
	"github.com/gputask/gputask-controller/pkg/replay"
	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/scaling"
	"github.com/gputask/gputask-controller/pkg/taskindex"
	"github.com/gputask/gputask-controller/test/framework/fakevllm"
)

// The vLLM run: the slo-engine variant's set, evaluated every 15 s of a
// fake clock for 16 minutes, on a fake vLLM pool whose traffic is a
// trickle, a burst that climbs in two steps, and the trickle again.
const (
	vllmSteps                = 64
	vllmTaskStartup          = 2 * time.Minute
	vllmModelName            = "llm"
	vllmTrickle              = 0.5 // requests/s
	vllmServiceTime          = 3 * time.Second
	vllmMaxNumSeqs           = 256
	vllmQueriesPerEvaluation = 10
)

// vllmRate is the pool's arrival rate: 3 minutes of trickle, 2 minutes
// at 30 requests/s, 3 at 90, then the trickle.
func vllmRate(elapsed time.Duration) float64 {
	switch {
	case elapsed < 3*time.Minute:
		return vllmTrickle
	case elapsed < 5*time.Minute:
		return 30
	case elapsed < 8*time.Minute:
		return 90
	}
	return vllmTrickle
}

// TestReplayIsTheAutoscalerForVLLMRoles: the replay's decision is the
// autoscaler's, for vLLM's roles too. The autoscaler runs in-process on a
// fake clock against the package's kube-apiserver and scales the
// slo-engine variant's set (TTFT 2 s and ITL 50 ms at p95, each task's
// capacity from the h100-llama-3.1-8b profile) from its metrics' PromQL,
// which a Prometheus API on 127.0.0.1 answers from the scrapes of a fake
// vLLM pool (test/framework/fakevllm) serving with as many workers as the
// set has tasks. Beside it the replay's ours decides at the same times
// (replay.Ours.EvaluateRoles, what each interval of a replay runs) from
// what the replay's pool would tell of the same scrapes (sim.Observation,
// over the replay's own windows), for the same tasks. The test plays the
// set controller and the kubelet: after each decision it creates or
// deletes tasks to spec.replicas, each Ready and showing a start of two
// minutes.
//
// At every one of the 64 evaluations both must come to the same count,
// with the same reason, message and model inputs, and the status must
// show the readings the replay read; the counts must rise from the floor
// through the burst and come back to it. A role the autoscaler or the
// replay leaves out or reads otherwise (another window, another unit, a
// rounding), or a decision that is not the same function of the same
// state, makes them differ.
//
//	go test -count=1 -run TestReplayIsTheAutoscalerForVLLMRoles -v ./test/integration/
func TestReplayIsTheAutoscalerForVLLMRoles(t *testing.T) {
	withoutController(t)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ns := cp.NamespaceT(t)
	// The autoscaler's reconcile counter tells when each of its syncs
	// ended; it counts only once registered.
	metrics.Register()

	if !slices.Equal(fakevllm.TTFTBuckets, sim.VLLMTTFTBuckets) {
		t.Fatalf("the fake vLLM's TTFT buckets %v are not the replay's %v", fakevllm.TTFTBuckets, sim.VLLMTTFTBuckets)
	}
	if !slices.Equal(fakevllm.TokenBuckets, sim.VLLMTokenBuckets) {
		t.Fatalf("the fake vLLM's token buckets %v are not the replay's %v", fakevllm.TokenBuckets, sim.VLLMTokenBuckets)
	}
	v, err := replay.ParseVariant("slo-engine")
	if err != nil {
		t.Fatal(err)
	}
	set := v.Set.DeepCopy()
	set.Name = "vllm"
	// The TTFT, not the wait, corrects the model: WaitPercentile wins
	// where both are read.
	set.Spec.Autoscaling.Metrics = slices.DeleteFunc(set.Spec.Autoscaling.Metrics, func(m gputaskv1.MetricSpec) bool {
		return m.Role == gputaskv1.RoleWaitPercentile
	})
	if n := len(set.Spec.Autoscaling.Metrics); n != vllmQueriesPerEvaluation {
		t.Fatalf("the slo-engine variant has %d metrics besides the wait percentile, want %d", n, vllmQueriesPerEvaluation)
	}
	interval := scaling.IntervalOf(set.Spec.Autoscaling)

	// The pool and its Prometheus run on the fake clock, which starts when
	// the set is created.
	clk := testingclock.NewFakeClock(time.Now())
	var workers atomic.Int32
	prom := &vllmPrometheus{clock: clk}
	backend := httptest.NewServer(prom)
	defer backend.Close()
	for i := range set.Spec.Autoscaling.Metrics {
		set.Spec.Autoscaling.Metrics[i].Prometheus.ServerAddress = backend.URL
	}

	sets := cp.GPUTask.GputaskV1().GPUTaskSets(ns)
	created, err := sets.Create(ctx, set, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the set: %v", err)
	}
	t0 := created.CreationTimestamp.Time
	clk.SetTime(t0)
	prom.pool = fakevllm.New(fakevllm.Config{
		ModelName: vllmModelName, Rate: vllmRate, ServiceTime: vllmServiceTime, SlotsPerWorker: vllmMaxNumSeqs,
		Workers: func() int { return int(workers.Load()) }, Seed: 1, Clock: clk,
	}.WithH100Tokens())
	ours, err := replay.NewOurs(created, sim.LoadDemand)
	if err != nil {
		t.Fatal(err)
	}

	inf := informers.NewSharedInformerFactoryWithOptions(cp.GPUTask, 0, informers.WithNamespace(ns))
	setLister := inf.Gputask().V1().GPUTaskSets().Lister()
	taskIndexer := inf.Gputask().V1().GPUTasks().Informer().GetIndexer()
	tasks := &vllmTasks{t: t, ns: ns, owner: created, indexer: taskIndexer}
	// The first task is Ready before the autoscaler first looks.
	tasks.scaleTo(ctx, 1)
	workers.Store(1)

	// syncs counts the autoscaler's syncs that ended, and those that
	// failed: a failed one would be retried after a backoff on the fake
	// clock, and evaluate again when the clock next moves.
	syncs := func() (all, failed float64) {
		for _, result := range []string{"success", "error"} {
			v, err := testutil.GetCounterMetricValue(metrics.ReconcileTotal.WithLabelValues(autoscaler.ControllerName, result))
			if err != nil {
				t.Fatal(err)
			}
			all += v
			if result == "error" {
				failed = v
			}
		}
		return all, failed
	}
	syncsBefore, failedBefore := syncs()
	runAutoscaler(ctx, t, inf, autoscaler.Options{
		Clock:     clk,
		NewSource: loadindex.Factory{Destinations: &loadindex.DestinationPolicy{AllowLoopback: true}}.New,
	})
	tasks.waitCached(ctx)

	var controller, model []int32
	var last *gputaskv1.GPUTaskSet
	var peak *gputaskv1.ScalingDecision
	var peakSLO *scaling.SLOOutcome
	mismatches := 0
	for k := range vllmSteps {
		now := t0.Add(time.Duration(k) * interval)
		clk.SetTime(now)
		// An evaluation is two syncs: one starts the read, the read's end
		// queues the one that decides.
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			all, _ := syncs()
			return all-syncsBefore >= float64(2*(k+1)), nil
		}); err != nil {
			all, _ := syncs()
			t.Fatalf("evaluation %d at +%v: %v; %v syncs", k, now.Sub(t0), err, all-syncsBefore)
		}
		if _, failed := syncs(); failed > failedBefore {
			t.Fatalf("evaluation %d at +%v: a sync of the autoscaler failed (its log above says why)", k, now.Sub(t0))
		}
		got, err := sets.Get(ctx, set.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		last = got
		d := got.Status.LastDecision
		if d == nil {
			t.Fatalf("evaluation %d: no lastDecision", k)
		}

		// The replay, at the same time, from the same scrapes and tasks.
		listed, err := taskindex.OfSet(taskIndexer, got)
		if err != nil {
			t.Fatal(err)
		}
		obs, err := prom.observation()
		if err != nil {
			t.Fatal(err)
		}
		want := ours.EvaluateRoles(now, 0, obs, listed)
		controller = append(controller, ptr.Deref(got.Spec.Replicas, 0))
		model = append(model, ours.Replicas())
		t.Logf("%2d +%-6v controller %d %s, replay %d %s: %s", k, now.Sub(t0), controller[k], d.Reason, model[k], want.Reason, want.Message)
		if problems := sameDecision(got, want, ours.Replicas()); len(problems) > 0 && mismatches < 3 {
			mismatches++
			t.Errorf("evaluation %d at +%v: the controller and the replay differ:\n  %s\n  replay inputs %s", k, now.Sub(t0), strings.Join(problems, "\n  "), want.Inputs)
		}
		if k > 0 && controller[k] > controller[k-1] && (peak == nil || controller[k] > peak.To) {
			peak, peakSLO = d.DeepCopy(), want.SLO
		}

		// The set controller and the kubelet: tasks to spec.replicas,
		// Ready, and the pool serving with them.
		tasks.scaleTo(ctx, controller[k])
		workers.Store(controller[k])
		tasks.waitCached(ctx)
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			s, err := setLister.GPUTaskSets(ns).Get(set.Name)
			return err == nil && s.ResourceVersion == got.ResourceVersion, nil
		}); err != nil {
			t.Fatalf("the informer never showed the set at resourceVersion %s: %v", got.ResourceVersion, err)
		}
	}

	t.Logf("spec.replicas at each evaluation, controller: %v", controller)
	t.Logf("                                  replay:     %v", model)
	if !slices.Equal(controller, model) {
		t.Errorf("the controller's counts %v differ from the replay's %v", controller, model)
	}
	if q := prom.answered(); q != vllmSteps*vllmQueriesPerEvaluation {
		t.Errorf("the Prometheus answered %d queries, want %d: one read of each metric per evaluation", q, vllmSteps*vllmQueriesPerEvaluation)
	}
	minReplicas := ptr.Deref(set.Spec.Autoscaling.MinReplicas, 1)
	top := slices.Max(controller)
	if controller[0] != minReplicas || top < minReplicas+2 || controller[len(controller)-1] != minReplicas {
		t.Errorf("counts %v: want them from minReplicas %d up by at least 2 through the burst and back to it", controller, minReplicas)
	}
	if peak == nil || peakSLO == nil {
		t.Fatal("no scale-up to explain")
	}
	// The scale-up to the peak, as status explains it: the capacity the
	// profile gives, and the TTFT and ITL predicted at the count.
	if peak.Capacity == nil {
		t.Fatalf("the scale-up to %d shows no capacity", peak.To)
	}
	if c := peak.Capacity; c.Source != gputaskv1.CapacityProfile || c.SlotsPerTask != peakSLO.Slots {
		t.Errorf("the scale-up to %d shows %d slots a task from the %s, want %d from the Profile", peak.To, c.SlotsPerTask, c.Source, peakSLO.Slots)
	}
	if !closeSeconds(peak.PredictedTTFT, peakSLO.PredictedTTFT) || !closeSeconds(peak.PredictedITL, peakSLO.PredictedITL.Seconds()) {
		t.Errorf("the scale-up to %d predicts TTFT %q and ITL %q, the replay %gs and %v", peak.To, peak.PredictedTTFT, peak.PredictedITL,
			peakSLO.PredictedTTFT, peakSLO.PredictedITL)
	}
	t.Logf("the scale-up to %d: %s; %d slots a task from the %s at a context of %s tokens, predicted TTFT %s, ITL %s",
		peak.To, peak.Message, peak.Capacity.SlotsPerTask, peak.Capacity.Source, peak.Capacity.Context, peak.PredictedTTFT, peak.PredictedITL)
	if cond := meta.FindStatusCondition(last.Status.Conditions, gputaskv1.ConditionScalingActive); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("ScalingActive = %+v, want True", cond)
	}
}

// sameDecision lists how the set's count and last decision differ from
// the replay's decision want and its count replicas.
func sameDecision(got *gputaskv1.GPUTaskSet, want scaling.Decision, replicas int32) []string {
	var out []string
	d := got.Status.LastDecision
	if r := ptr.Deref(got.Spec.Replicas, 0); r != replicas || d.To != want.Desired {
		out = append(out, fmt.Sprintf("spec.replicas %d (lastDecision.to %d), replay %d", r, d.To, replicas))
	}
	if d.Reason != want.Reason || d.Message != want.Message {
		out = append(out, fmt.Sprintf("%s %q, replay %s %q", d.Reason, d.Message, want.Reason, want.Message))
	}
	if !strings.HasPrefix(d.Inputs, want.Inputs) {
		out = append(out, fmt.Sprintf("inputs %q, replay %q", d.Inputs, want.Inputs))
	}
	if len(got.Status.Metrics) != len(want.Metrics) {
		return append(out, fmt.Sprintf("%d metrics in status, the replay read %d", len(got.Status.Metrics), len(want.Metrics)))
	}
	for i, m := range want.Metrics {
		s := got.Status.Metrics[i]
		switch {
		case s.Name != m.Name:
			out = append(out, fmt.Sprintf("metric %d is %s, the replay's %s", i, s.Name, m.Name))
		case (s.Error != "") != (m.Err != nil):
			out = append(out, fmt.Sprintf("metric %s: error %q, the replay's %v", m.Name, s.Error, m.Err))
		case m.Err == nil && s.Value != scaling.FormatValue(m.Value):
			out = append(out, fmt.Sprintf("metric %s reads %s, the replay %s", m.Name, s.Value, scaling.FormatValue(m.Value)))
		}
	}
	return out
}

// closeSeconds is whether a duration status shows (three significant
// digits) is want seconds.
func closeSeconds(shown string, want float64) bool {
	d, err := time.ParseDuration(shown)
	return err == nil && want > 0 && math.Abs(d.Seconds()-want) <= 0.005*want
}

// vllmTasks plays the set controller and the kubelet for one set: its
// tasks are named by index, created Ready (their Ready condition two
// minutes after their creation, the start the autoscaler measures) and
// deleted from the newest.
type vllmTasks struct {
	t       *testing.T
	ns      string
	owner   *gputaskv1.GPUTaskSet
	indexer cache.Indexer
	n       int32
}

func (s *vllmTasks) name(i int32) string { return fmt.Sprintf("%s-%d", s.owner.Name, i) }

func (s *vllmTasks) scaleTo(ctx context.Context, n int32) {
	s.t.Helper()
	client := cp.GPUTask.GputaskV1().GPUTasks(s.ns)
	for ; s.n < n; s.n++ {
		task, err := client.Create(ctx, &gputaskv1.GPUTask{
			ObjectMeta: metav1.ObjectMeta{
				Name:            s.name(s.n),
				Labels:          map[string]string{gputaskv1.LabelTaskSet: s.owner.Name},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(s.owner, gputaskv1.SchemeGroupVersion.WithKind("GPUTaskSet"))},
			},
			Spec: s.owner.Spec.Template.Spec,
		}, metav1.CreateOptions{})
		if err != nil {
			s.t.Fatalf("creating task %s: %v", s.name(s.n), err)
		}
		task.Status.Phase = gputaskv1.GPUTaskRunning
		task.Status.Conditions = []metav1.Condition{{Type: gputaskv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "PodReady",
			LastTransitionTime: metav1.NewTime(task.CreationTimestamp.Add(vllmTaskStartup))}}
		if _, err := client.UpdateStatus(ctx, task, metav1.UpdateOptions{}); err != nil {
			s.t.Fatalf("marking task %s Ready: %v", task.Name, err)
		}
	}
	for ; s.n > n; s.n-- {
		if err := client.Delete(ctx, s.name(s.n-1), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			s.t.Fatalf("deleting task %s: %v", s.name(s.n-1), err)
		}
	}
}

// waitCached waits until the autoscaler's task informer holds the set's
// tasks as they are: all n of them, Ready.
func (s *vllmTasks) waitCached(ctx context.Context) {
	s.t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		var ready int32
		for _, obj := range s.indexer.List() {
			task := obj.(*gputaskv1.GPUTask)
			if !meta.IsStatusConditionTrue(task.Status.Conditions, gputaskv1.ConditionReady) {
				return false, nil
			}
			ready++
		}
		return ready == s.n, nil
	}); err != nil {
		s.t.Fatalf("the informer never showed the %d Ready tasks: %v", s.n, err)
	}
}

// vllmPrometheus is a Prometheus for a fake vLLM pool on a fake clock: at
// each query it scrapes the pool's /metrics, once for each time the clock
// shows, and answers the instant queries of docs/autoscaling.md's vLLM
// shapes from its scrapes. A rate over [w] is the increase since the
// scrape w before, over w (the counters are 0 before the pool's first
// scrape); a histogram_quantile reads the buckets' increases over its
// window as Prometheus does (sim.HistogramQuantileCounts).
type vllmPrometheus struct {
	pool  *fakevllm.Pool
	clock clock.PassiveClock

	mu      sync.Mutex
	scrapes []vllmScrape
	queries int
}

// vllmScrape is one scrape: each sample by its metric name, a bucket's
// by its name and le label, name{le="…"}.
type vllmScrape struct {
	at      time.Time
	samples map[string]float64
}

var (
	metricName    = `([a-zA-Z_:][a-zA-Z0-9_:]*)`
	sampleLine    = regexp.MustCompile(`^` + metricName + `(?:\{(.*)\})? (\S+)$`)
	leLabel       = regexp.MustCompile(`le="([^"]+)"`)
	rateQuery     = regexp.MustCompile(`^sum\(rate\(` + metricName + `\{[^}]*\}\[(\w+)\]\)\)$`)
	gaugeQuery    = regexp.MustCompile(`^(?:sum|avg)\(` + metricName + `\{[^}]*\}\)$`)
	quantileQuery = regexp.MustCompile(`^histogram_quantile\(([0-9.]+), sum by \(le\) \(rate\(` + metricName + `_bucket\{[^}]*\}\[(\w+)\]\)\)\)$`)
)

// scrape returns the scrape at the clock's time, taking it first if there
// is none yet. p.mu is held.
func (p *vllmPrometheus) scrape() (vllmScrape, error) {
	now := p.clock.Now()
	if n := len(p.scrapes); n > 0 && p.scrapes[n-1].at.Equal(now) {
		return p.scrapes[n-1], nil
	}
	var text bytes.Buffer
	p.pool.WriteMetrics(&text)
	s := vllmScrape{at: now, samples: map[string]float64{}}
	lines := bufio.NewScanner(&text)
	for lines.Scan() {
		line := lines.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			return s, fmt.Errorf("%q is not a sample of the text format", line)
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			return s, fmt.Errorf("sample %q: %w", line, err)
		}
		key := m[1]
		if le := leLabel.FindStringSubmatch(m[2]); le != nil {
			key += `{le="` + le[1] + `"}`
		}
		s.samples[key] = v
	}
	p.scrapes = append(p.scrapes, s)
	return s, nil
}

// at is key's value at t: the last scrape's at or before t, 0 before the
// first.
func (p *vllmPrometheus) at(key string, t time.Time) float64 {
	i := sort.Search(len(p.scrapes), func(i int) bool { return p.scrapes[i].at.After(t) })
	if i == 0 {
		return 0
	}
	return p.scrapes[i-1].samples[key]
}

func (p *vllmPrometheus) rate(key string, now time.Time, w time.Duration) float64 {
	return (p.at(key, now) - p.at(key, now.Add(-w))) / w.Seconds()
}

// buckets are the finite bounds of name's histogram and the increases of
// its buckets over w, not cumulative, +Inf last.
func (p *vllmPrometheus) buckets(name string, now time.Time, w time.Duration) (bounds, counts []float64) {
	type bucket struct {
		le  float64
		key string
	}
	var bs []bucket
	for key := range p.scrapes[len(p.scrapes)-1].samples {
		if m := leLabel.FindStringSubmatch(key); m != nil && strings.HasPrefix(key, name+"_bucket{") {
			le, err := strconv.ParseFloat(m[1], 64)
			if err != nil {
				continue
			}
			bs = append(bs, bucket{le, key})
		}
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	below := 0.0
	for _, b := range bs {
		cumulative := p.at(b.key, now) - p.at(b.key, now.Add(-w))
		counts = append(counts, cumulative-below)
		below = cumulative
		if !math.IsInf(b.le, 1) {
			bounds = append(bounds, b.le)
		}
	}
	return bounds, counts
}

// eval answers a query of the shapes docs/autoscaling.md gives vLLM's
// metrics at now; ok is false for any other query.
func (p *vllmPrometheus) eval(q string, now time.Time) (v float64, ok bool) {
	if num, den, found := strings.Cut(q, " / "); found {
		a, okA := p.eval(num, now)
		b, okB := p.eval(den, now)
		return a / b, okA && okB // 0/0 is NaN, as in PromQL
	}
	if m := rateQuery.FindStringSubmatch(q); m != nil {
		w, err := time.ParseDuration(m[2])
		return p.rate(m[1], now, w), err == nil
	}
	if m := gaugeQuery.FindStringSubmatch(q); m != nil {
		return p.at(m[1], now), true
	}
	if m := quantileQuery.FindStringSubmatch(q); m != nil {
		phi, err1 := strconv.ParseFloat(m[1], 64)
		w, err2 := time.ParseDuration(m[3])
		bounds, counts := p.buckets(m[2], now, w)
		v, _ := sim.HistogramQuantileCounts(phi, bounds, counts) // NaN without an observation
		return v, err1 == nil && err2 == nil
	}
	return 0, false
}

// ServeHTTP answers GET /api/v1/query with a vector of one sample, as
// Prometheus does; NaN where a division or a quantile has nothing to read.
func (p *vllmPrometheus) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	s, err := p.scrape()
	q := r.URL.Query().Get("query")
	v, ok := p.eval(q, s.at)
	if r.URL.Path != "/api/v1/query" || err != nil || !ok {
		w.WriteHeader(http.StatusBadRequest)
		msg, _ := json.Marshal(fmt.Sprintf("the fake Prometheus cannot answer %s?query=%s (scrape: %v)", r.URL.Path, q, err))
		fmt.Fprintf(w, `{"status":"error","errorType":"bad_data","error":%s}`, msg)
		return
	}
	p.queries++
	fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[%d,%q]}]}}`,
		s.at.Unix(), strconv.FormatFloat(v, 'g', -1, 64))
}

func (p *vllmPrometheus) answered() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.queries
}

// observation is what the replay's pool tells at the clock's time
// (sim.Observation) from the same scrapes: its rates over sim.RateWindow,
// its TTFT buckets over sim.WaitWindow, its gauges.
func (p *vllmPrometheus) observation() (sim.Observation, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, err := p.scrape()
	if err != nil {
		return sim.Observation{}, err
	}
	now := s.at
	o := sim.Observation{
		Running:          int(p.at(fakevllm.MetricRunning, now)),
		Waiting:          int(p.at(fakevllm.MetricWaiting, now)),
		Completions:      p.rate(fakevllm.MetricSuccess, now, sim.RateWindow),
		ITLSum:           p.rate(fakevllm.MetricITL+"_sum", now, sim.RateWindow),
		ITLCount:         p.rate(fakevllm.MetricITL+"_count", now, sim.RateWindow),
		PromptTokens:     p.rate(fakevllm.MetricPrompt, now, sim.RateWindow),
		GenerationTokens: p.rate(fakevllm.MetricGenerated, now, sim.RateWindow),
		KVCacheUsage:     p.at(fakevllm.MetricKVCache, now),
		KVCacheKnown:     true,
	}
	_, counts := p.buckets(fakevllm.MetricTTFT, now, sim.WaitWindow)
	if len(counts) != len(o.TTFT) {
		return o, fmt.Errorf("%d TTFT buckets, the replay has %d", len(counts), len(o.TTFT))
	}
	copy(o.TTFT[:], counts)
	for _, h := range []struct {
		name string
		to   *sim.TokenBuckets
	}{{fakevllm.MetricOutputs, &o.Outputs}, {fakevllm.MetricPrompts, &o.Prompts}} {
		_, counts = p.buckets(h.name, now, sim.WaitWindow)
		if len(counts) != len(h.to) {
			return o, fmt.Errorf("%d buckets of %s, the replay has %d", len(counts), h.name, len(h.to))
		}
		copy(h.to[:], counts)
	}
	return o, nil
}
