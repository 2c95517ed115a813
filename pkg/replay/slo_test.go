package replay

import (
	"fmt"
	"testing"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/replay/baseline"
	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// The SLO pool (the default set, and --variant slo), fed the modelled
// pool's rates, requests and wait percentile fresh or through a scrape,
// keeps a bursty trace's p95 wait within its SLO, loses no request, and
// spends less than hpa at target 0.7. A role read wrongly (no
// completions, say, or the load index in its place) sizes the pool on the
// wrong load and breaks one of these.
func TestSLOPoolMeetsItsSLO(t *testing.T) {
	tr := generatedTrace(t, workload.ShapeBursty, 6*time.Hour)
	v, err := ParseVariant("slo")
	if err != nil {
		t.Fatal(err)
	}
	if v.Set.Spec.Autoscaling.Policy.Type != gputaskv1.SLOPolicy {
		t.Fatalf("the slo variant's policy is %s", v.Set.Spec.Autoscaling.Policy.Type)
	}
	for _, scrape := range []time.Duration{0, 15 * time.Second} {
		rep, err := Run(tr, Config{Concurrency: 8, Startup: 2 * time.Minute, Grace: 30 * time.Second, Scrape: scrape,
			Policies: []string{PolicyOurs, baseline.PolicyHPA}, Variants: []Variant{v}})
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]sim.Result{}
		for _, p := range rep.Policies {
			byName[p.Name] = p
		}
		hpa := byName[baseline.PolicyHPA]
		for _, name := range []string{PolicyOurs, "ours+slo"} {
			r := byName[name]
			t.Logf("scrape %v: %s %.1f GPU-h, p95 %.2fs, %d failed; hpa %.1f GPU-h, p95 %.2fs", scrape, name, r.GPUHours, r.WaitP95, r.FailedRequests, hpa.GPUHours, hpa.WaitP95)
			if r.WaitP95 > 10 {
				t.Errorf("scrape %v: %s p95 wait %.2fs, above the SLO of 10s", scrape, name, r.WaitP95)
			}
			if r.FailedRequests != 0 {
				t.Errorf("scrape %v: %s lost %d requests", scrape, name, r.FailedRequests)
			}
			if r.GPUHours >= hpa.GPUHours {
				t.Errorf("scrape %v: %s spent %.1f GPU-h, hpa %.1f", scrape, name, r.GPUHours, hpa.GPUHours)
			}
		}
		if byName[PolicyOurs].GPUHours != byName["ours+slo"].GPUHours {
			t.Errorf("scrape %v: the default set and the slo variant differ: %.2f and %.2f GPU-h", scrape, byName[PolicyOurs].GPUHours, byName["ours+slo"].GPUHours)
		}
	}
}

// The roles read what vLLM's metrics would show of the modelled pool:
// rates over the last minute, the requests running and waiting, and the
// wait percentile of the requests that got a slot; through a scrape, as
// they were at the last one.
func TestRoleValues(t *testing.T) {
	t0 := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	s := func(n int) time.Duration { return time.Duration(n) * time.Second }
	// One slot: the first request runs 5-35 s, the second waits 20 s and
	// runs 35-65 s, the third waits from 25 s.
	tr := workload.Trace{Requests: []workload.Served{{Arrival: s(5), Service: s(30)}, {Arrival: s(15), Service: s(30)}, {Arrival: s(25), Service: s(30)}}}
	check := func(name string, obs sim.Observation, want map[gputaskv1.MetricRole]float64) {
		t.Helper()
		for role, w := range want {
			got, ok := RoleValue(role, 0.5, obs, 95)
			if !ok || got < w-1e-9 || got > w+1e-9 {
				t.Errorf("%s: %s = %v (ok %v), want %v", name, role, got, ok, w)
			}
		}
	}
	p := sim.NewPool(tr, t0, 1, 0)
	p.AddReady(1)
	p.Advance(t0.Add(s(60)))
	check("fresh", p.Metrics(), map[gputaskv1.MetricRole]float64{
		"": 0.5, gputaskv1.RoleArrivals: 3.0 / 60, gputaskv1.RoleCompletions: 1.0 / 60,
		// The waits 0 and 20 s in vLLM's buckets: the rank 1.9 falls in
		// (15, 20], 0.9 of the way, as histogram_quantile interpolates.
		gputaskv1.RoleRunning: 1, gputaskv1.RoleWaiting: 1, gputaskv1.RoleWaitPercentile: 19.5,
	})
	if _, ok := RoleValue(gputaskv1.RoleWaitPercentile, 0, sim.Observation{}, 95); ok {
		t.Error("a wait percentile with no request started reads as a value")
	}

	// Scrapes at 0, 7.5, 22.5, 37.5 and 52.5 s: the last one's window
	// holds them all (arrivals 0 to 3, completions 0 to 1 over 52.5 s).
	p = sim.NewPool(tr, t0, 1, 0)
	p.SetScrape(s(15))
	p.AddReady(1)
	p.Advance(t0.Add(s(60)))
	check("scraped", p.Metrics(), map[gputaskv1.MetricRole]float64{
		gputaskv1.RoleArrivals: 3 / 52.5, gputaskv1.RoleCompletions: 1 / 52.5,
		gputaskv1.RoleRunning: 1, gputaskv1.RoleWaiting: 1, gputaskv1.RoleWaitPercentile: 19.5,
	})
}

// Sim.Advance plays the trace without an evaluation: the SLO policy, whose
// state learns from every evaluation, decides at the next step as if the
// pool had not been looked at in between.
func TestSimAdvanceDoesNotEvaluate(t *testing.T) {
	v, err := ParseVariant("slo")
	if err != nil {
		t.Fatal(err)
	}
	s := func(n int) time.Duration { return time.Duration(n) * time.Second }
	var reqs []workload.Served
	for i := range 40 {
		reqs = append(reqs, workload.Served{Arrival: s(i * 3), Service: s(20)})
	}
	tr := workload.Trace{Requests: reqs}
	run := func(advance bool) (string, []int32) {
		ours, err := NewOurs(v.Set, sim.LoadDemand)
		if err != nil {
			t.Fatal(err)
		}
		sm := NewSim(sim.NewPool(tr, t0, 2, s(30)), ours)
		var counts []int32
		for k := 1; k <= 8; k++ {
			if advance {
				sm.Advance(t0.Add(s(15*k - 7)))
			}
			counts = append(counts, sm.Step(t0.Add(s(15*k))))
		}
		return ours.Last.Inputs, counts
	}
	plain, plainCounts := run(false)
	advanced, advancedCounts := run(true)
	if plain != advanced || fmt.Sprint(plainCounts) != fmt.Sprint(advancedCounts) {
		t.Errorf("with Advance between the steps: %v, %s; without: %v, %s", advancedCounts, advanced, plainCounts, plain)
	}
}
