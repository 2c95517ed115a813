package replay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gputask/gputask-controller/pkg/replay/baseline"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
	"github.com/gputask/gputask-controller/pkg/scaling"
)

// Config.Decisions gets every evaluation of ours and of its variants, one
// a tick of the interval and none left out, each as the autoscaler leaves
// the set's status: one evaluation's count is the next one's start, and
// the changes are the run's scale events.
func TestDecisionsRecordEveryEvaluation(t *testing.T) {
	var tr workload.Trace
	// Two requests a second for five minutes, then one every other second
	// for ten.
	for i := range 900 {
		at := time.Duration(i) * 500 * time.Millisecond
		if i >= 600 {
			at = 5*time.Minute + time.Duration(i-600)*2*time.Second
		}
		tr.Requests = append(tr.Requests, workload.Served{Arrival: at, Service: 20 * time.Second})
	}
	burst, err := ParseVariant("burst")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	rep, err := Run(tr, Config{Concurrency: 4, Startup: time.Minute, StartupSeed: 7, Name: "steady", Policies: []string{PolicyOurs}, Variants: []Variant{burst}, Decisions: &buf})
	if err != nil {
		t.Fatal(err)
	}
	period := scaling.IntervalOf(DefaultSet().Spec.Autoscaling).Seconds()
	byPolicy := map[string][]DecisionRecord{}
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r DecisionRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		byPolicy[r.Policy] = append(byPolicy[r.Policy], r)
	}
	if len(byPolicy) != 2 {
		t.Fatalf("decisions of %d policies, want ours and ours+burst", len(byPolicy))
	}
	for _, res := range rep.Policies {
		recs := byPolicy[res.Name]
		last := tr.Requests[len(tr.Requests)-1].Arrival.Seconds()
		if float64(len(recs))*period < last {
			t.Errorf("%s: %d decisions, fewer than the %v s of arrivals take at one each %v s", res.Name, len(recs), last, period)
		}
		changes := 0
		for i, r := range recs {
			if r.Trace != "steady" || r.Seed != 7 || r.LastDecision == nil || r.LastDecision.Reason == "" || len(r.Metrics) == 0 {
				t.Fatalf("%s: decision %d is %+v", res.Name, i, r)
			}
			if want := float64(i) * period; r.At != want {
				t.Fatalf("%s: decision %d at %v s, want %v s: one a tick", res.Name, i, r.At, want)
			}
			if i > 0 && r.LastDecision.From != recs[i-1].LastDecision.To {
				t.Errorf("%s: decision %d from %d, the one before went to %d", res.Name, i, r.LastDecision.From, recs[i-1].LastDecision.To)
			}
			if r.LastDecision.To != r.LastDecision.From {
				changes++
			}
		}
		if changes == 0 || changes != res.ScaleEvents {
			t.Errorf("%s: %d changes in the decisions, %d scale events", res.Name, changes, res.ScaleEvents)
		}
	}
}

// A log that cannot be written ends the run with the reason, rather than
// a report whose decisions are missing.
func TestDecisionsWriteError(t *testing.T) {
	var tr workload.Trace
	for i := range 60 {
		tr.Requests = append(tr.Requests, workload.Served{Arrival: time.Duration(i) * time.Second, Service: 5 * time.Second})
	}
	burst, err := ParseVariant("burst")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []Config{
		{Concurrency: 2, Policies: []string{PolicyOurs}, Decisions: failingWriter{}},
		{Concurrency: 2, Policies: []string{baseline.PolicyStatic}, Variants: []Variant{burst}, Decisions: failingWriter{}},
	} {
		_, err := Run(tr, c)
		if err == nil || !strings.Contains(err.Error(), "writing the decisions: disk full") {
			t.Errorf("policies %v, variants %d: error %v, want the write's", c.Policies, len(c.Variants), err)
		}
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }
