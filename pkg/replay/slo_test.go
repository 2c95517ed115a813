package replay

import (
	"testing"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// The SLO pool (the default set, and --variant slo), fed the modelled
// pool's rates, requests and wait percentile fresh or through a scrape,
// keeps a bursty trace's p95 wait within its SLO, loses no request, and
// spends less than hpa at target 0.7. A role read wrongly (no
// completions, say, or the load index in its place) sizes the pool on the
// wrong load and breaks one of these.
func TestSLOPoolMeetsItsSLO(t *testing.T) {
	tr := generatedTrace(t, ShapeBursty, 6*time.Hour)
	v, err := ParseVariant("slo")
	if err != nil {
		t.Fatal(err)
	}
	if v.Set.Spec.Autoscaling.Policy.Type != gputaskv1.SLOPolicy {
		t.Fatalf("the slo variant's policy is %s", v.Set.Spec.Autoscaling.Policy.Type)
	}
	for _, scrape := range []time.Duration{0, 15 * time.Second} {
		rep, err := Run(tr, Config{Concurrency: 8, Startup: 2 * time.Minute, Grace: 30 * time.Second, Scrape: scrape,
			Policies: []string{PolicyOurs, PolicyHPA}, Variants: []Variant{v}})
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]Result{}
		for _, p := range rep.Policies {
			byName[p.Name] = p
		}
		hpa := byName[PolicyHPA]
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
