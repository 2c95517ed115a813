package replay

import (
	"slices"
	"strings"
	"testing"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/replay/baseline"
	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
	"github.com/gputask/gputask-controller/pkg/scaling"
)

// Ours learns the start-up from the tasks it sees, as the controller
// does: the pool's first workers show the starts they drew, and the
// look-ahead is their median, not the model's.
func TestOursLearnsStartupFromTasks(t *testing.T) {
	p := sim.NewPool(workload.Trace{}, t0, 8, 0)
	p.SetStartup(sim.StartupModel{Median: 2 * time.Minute, Sigma: 0.8, Floor: 10 * time.Second}, 7)
	ours, err := NewOurs(withSlots(DefaultSet(), 8), sim.LoadDemand)
	if err != nil {
		t.Fatal(err)
	}
	ours.Initial = 3
	ours.Start(p)
	var took []time.Duration
	for _, w := range p.Workers() {
		took = append(took, w.StartedBefore)
	}
	slices.Sort(took)
	got := scaling.StartupOf(ours.startedTasks(p), 10*time.Minute)
	// Whole seconds as the API shows them do not matter here: the
	// modelled tasks carry exact times.
	if got != took[1] || got == p.Startup() {
		t.Errorf("ours looks ahead by %v; the first workers took %v (median %v), the model's median is %v", got, took, took[1], p.Startup())
	}
}

// A set sized for other workers than the replay's is an error that says
// so; the embedded sets follow the workers.
func TestCapacityMismatch(t *testing.T) {
	tr := workload.Trace{Requests: []workload.Served{{Arrival: 0, Service: time.Second}}}
	set := DefaultSet() // slotsPerTask 8
	_, err := Run(tr, Config{Concurrency: 4, Set: set, Policies: []string{PolicyOurs}})
	if err == nil || !strings.Contains(err.Error(), "slotsPerTask 8") || !strings.Contains(err.Error(), "serves 4") {
		t.Errorf("slotsPerTask 8 against 4 slots: %v, want an error naming both", err)
	}
	file := Variant{Name: "mine", Set: set}
	if _, err := Run(tr, Config{Concurrency: 4, Policies: []string{baseline.PolicyStatic}, Variants: []Variant{file}}); err == nil || !strings.Contains(err.Error(), "variant mine") {
		t.Errorf("a variant's file at 8 slots against 4: %v, want an error naming the variant", err)
	}
	builtin, err := ParseVariant("slo")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(tr, Config{Concurrency: 4, Policies: []string{PolicyOurs}, Variants: []Variant{builtin}}); err != nil {
		t.Errorf("the embedded sets on 4 slots: %v", err)
	}
	if _, err := Run(tr, Config{Concurrency: 8, Set: set, Policies: []string{PolicyOurs}}); err != nil {
		t.Errorf("slotsPerTask 8 on 8 slots: %v", err)
	}
	if set.Spec.Autoscaling.Policy.Type != gputaskv1.SLOPolicy {
		t.Fatal("the default set is no longer an SLO set: this test checks nothing")
	}
}
