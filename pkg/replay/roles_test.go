package replay

import (
	"bytes"
	"math"
	"os"
	"regexp"
	"testing"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/gpuprofile"
	enginemodel "github.com/gputask/gputask-controller/pkg/replay/engine"
	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
	"github.com/gputask/gputask-controller/pkg/scaling"
)

// Each role reads its own value of the observation, in the unit the
// autoscaler reads its query's: seconds for the percentiles and the ITL,
// tokens per second, a share for the KV cache; and no value where the
// query gives NaN or no series.
func TestRoleValueOfVLLMRoles(t *testing.T) {
	var ttft sim.TTFTBuckets
	ttft[11], ttft[12] = 1, 1 // one TTFT in (0.75, 1], one in (1, 2.5]
	obs := sim.Observation{TTFT: ttft, ITLSum: 0.3, ITLCount: 10, PromptTokens: 2500, GenerationTokens: 400,
		KVCacheUsage: 0.42, KVCacheKnown: true}
	for _, tc := range []struct {
		role gputaskv1.MetricRole
		obs  sim.Observation
		want float64
		ok   bool
	}{
		// histogram_quantile(0.5): rank 1 of 2, the top of (0.75, 1].
		{gputaskv1.RoleTTFTPercentile, obs, 1, true},
		{gputaskv1.RoleTTFTPercentile, sim.Observation{}, 0, false},
		{gputaskv1.RoleInterTokenLatency, obs, 0.03, true},
		{gputaskv1.RoleInterTokenLatency, sim.Observation{ITLSum: 1}, 0, false},
		{gputaskv1.RolePromptTokens, obs, 2500, true},
		{gputaskv1.RoleGenerationTokens, obs, 400, true},
		{gputaskv1.RoleKVCacheUsage, obs, 0.42, true},
		{gputaskv1.RoleKVCacheUsage, sim.Observation{}, 0, false},
	} {
		got, ok := RoleValue(tc.role, 7, tc.obs, 50)
		if ok != tc.ok || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("RoleValue(%s) = %v, %v; want %v, %v", tc.role, got, ok, tc.want, tc.ok)
		}
	}
}

// The pool's windows are those of the queries docs/autoscaling.md and
// the slo-engine set give each role: [5m] for the TTFT histogram and the
// wait's, [1m] for the counters' rates, none for the KV cache gauge.
func TestRoleWindowsAreTheQueries(t *testing.T) {
	want := map[gputaskv1.MetricRole]time.Duration{
		gputaskv1.RoleCompletions:       sim.RateWindow,
		gputaskv1.RoleWaitPercentile:    sim.WaitWindow,
		gputaskv1.RoleTTFTPercentile:    sim.WaitWindow,
		gputaskv1.RoleInterTokenLatency: sim.RateWindow,
		gputaskv1.RolePromptTokens:      sim.RateWindow,
		gputaskv1.RoleGenerationTokens:  sim.RateWindow,
		gputaskv1.RoleKVCacheUsage:      0,
		gputaskv1.RoleRunning:           0,
		gputaskv1.RoleWaiting:           0,
	}
	window := regexp.MustCompile(`\[(\d+m)\]`)
	check := func(where, query string, role gputaskv1.MetricRole) {
		w, known := want[role]
		if !known {
			return
		}
		for _, m := range window.FindAllStringSubmatch(query, -1) {
			d, err := time.ParseDuration(m[1])
			if err != nil || d != w {
				t.Errorf("%s: the %s query's window is %s, the replay's %v", where, role, m[1], w)
			}
		}
		if w > 0 && !window.MatchString(query) {
			t.Errorf("%s: the %s query has no window; the replay's is %v", where, role, w)
		}
	}
	doc, err := os.ReadFile("../../docs/autoscaling.md")
	if err != nil {
		t.Fatal(err)
	}
	// The example's metrics: "role: X ... query: Q", on one line or two.
	seen := map[gputaskv1.MetricRole]int{}
	for _, m := range regexp.MustCompile(`(?s)role: (\w+)[^\n]*?(?:\n[^\n]*?){0,3}query: '?([^'\n]+)`).FindAllStringSubmatch(string(doc), -1) {
		role := gputaskv1.MetricRole(m[1])
		seen[role]++
		check("docs/autoscaling.md", m[2], role)
	}
	for role := range want {
		if seen[role] == 0 {
			t.Errorf("docs/autoscaling.md shows no query of role %s", role)
		}
	}
	v, err := ParseVariant("slo-engine")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range v.Set.Spec.Autoscaling.Metrics {
		check("variants/slo-engine.yaml", m.Prometheus.Query, m.Role)
	}
}

// traceOf is the synthetic trace of o, with its token columns.
func traceOf(t *testing.T, o workload.GenerateOptions) workload.Trace {
	t.Helper()
	reqs, err := workload.Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := workload.WriteCSV(&buf, reqs); err != nil {
		t.Fatal(err)
	}
	tr, err := workload.ReadTrace(&buf, workload.TraceOptions{TimeColumn: workload.ColumnTimestamp, Service: workload.ServiceModel{
		InputTokensColumn: workload.ColumnInputTokens, OutputTokensColumn: workload.ColumnOutputTokens,
		PrefillPerSecond: 4000, DecodePerSecond: 40,
	}})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// roleRecorder is ours, noting after each evaluation which roles the
// decision read a value of, and what it sized by.
type roleRecorder struct {
	*Ours
	// read counts the evaluations that read a value of each role,
	// positive those where it was above 0.
	read, positive map[gputaskv1.MetricRole]int
	slotsFrom      map[string]int
	withITL        int
}

func (r *roleRecorder) Step(p *sim.Pool) {
	r.Ours.Step(p)
	d := r.Last
	for i, m := range r.set.Spec.Autoscaling.Metrics {
		if d.Metrics[i].Err == nil {
			r.read[m.Role]++
			if d.Metrics[i].Value > 0 {
				r.positive[m.Role]++
			}
		}
	}
	if d.SLO != nil {
		r.slotsFrom[d.SLO.SlotsFrom]++
		if d.SLO.PredictedITL > 0 {
			r.withITL++
		}
	}
}

// The slo-engine set, TTFT 2 s and ITL 50 ms at p95 with the H100
// profile, on an engine-model pool of that profile, fresh and behind a
// 15 s scrape: every one of its eleven roles reaches the decision with a
// value, the policy sizes each worker by the profile (as the autoscaler
// does from slo.engine), and the pool meets both objectives with no
// request lost.
func TestSLOEngineSetSeesEveryRole(t *testing.T) {
	// Two hours of bursty traffic at up to 40 requests/s: a pool of one to
	// about a dozen H100s.
	o := workload.DefaultGenerateOptions(workload.ShapeBursty)
	o.Duration, o.PeakRate = 2*time.Hour, 40
	tr := traceOf(t, o)
	v, err := ParseVariant("slo-engine")
	if err != nil {
		t.Fatal(err)
	}
	profile, err := gpuprofile.Lookup("h100-llama-3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	slo := sim.SLOTargets{TTFT: 2 * time.Second, ITL: 50 * time.Millisecond, Percentile: 95}
	for _, scrape := range []time.Duration{0, 15 * time.Second} {
		pool := sim.NewPool(tr, time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC), 8, 2*time.Minute)
		pool.SetGrace(30 * time.Second)
		pool.SetScrape(scrape)
		if err := pool.SetEngine(sim.EngineServing{Engine: enginemodel.Config{Profile: profile}}); err != nil {
			t.Fatal(err)
		}
		ours, err := NewOurs(v.Set, sim.LoadDemand)
		if err != nil {
			t.Fatal(err)
		}
		ours.Initial = InitialWorkers(tr, 8)
		rec := &roleRecorder{Ours: ours, read: map[gputaskv1.MetricRole]int{}, positive: map[gputaskv1.MetricRole]int{}, slotsFrom: map[string]int{}}
		res := sim.Play(pool, rec, sim.PlayOptions{SampleEvery: time.Minute, Limit: time.Hour, SLO: slo})
		t.Logf("scrape %v: %d requests, %.1f GPU-h, peak %d, TTFT p95 %.2fs, ITL p95 %.1fms, %d failed; roles read %v, above 0 %v; slots from %v",
			scrape, len(tr.Requests), res.GPUHours, res.PeakReplicas, res.TTFTP95, res.ITLP95*1e3, res.FailedRequests, rec.read, rec.positive, rec.slotsFrom)
		for _, m := range v.Set.Spec.Autoscaling.Metrics {
			// A queue need not form in a pool that meets its SLO: Waiting
			// may read 0 throughout; every other role reads above 0 once
			// the traffic runs.
			if rec.read[m.Role] == 0 || rec.positive[m.Role] == 0 && m.Role != gputaskv1.RoleWaiting {
				t.Errorf("scrape %v: the decision read %d values of %s, %d above 0", scrape, rec.read[m.Role], m.Role, rec.positive[m.Role])
			}
		}
		if len(rec.read) != 11 || len(v.Set.Spec.Autoscaling.Metrics) != 11 {
			t.Errorf("scrape %v: the decision read %d roles, want the eleven of vLLM", scrape, len(rec.read))
		}
		if rec.slotsFrom[scaling.SlotsFromProfile] == 0 || rec.slotsFrom[scaling.SlotsFromFit]+rec.slotsFrom[scaling.SlotsFromDefault] > 0 {
			t.Errorf("scrape %v: slots from %v; want the profile's every time", scrape, rec.slotsFrom)
		}
		if rec.withITL == 0 {
			t.Errorf("scrape %v: no decision predicted an ITL", scrape)
		}
		if !res.MeetsSLO || res.TTFTP95 > 2 || res.ITLP95 > 0.05 {
			t.Errorf("scrape %v: TTFT p95 %.2fs, ITL p95 %.1fms: want within 2s and 50ms", scrape, res.TTFTP95, res.ITLP95*1e3)
		}
		if res.FailedRequests != 0 {
			t.Errorf("scrape %v: %d requests lost", scrape, res.FailedRequests)
		}
	}
}
