package replay

import (
	"encoding/json"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/scaling"
)

// DecisionRecord is one evaluation of ours, as the autoscaler leaves the
// set's status after it on a cluster: status.lastDecision and
// status.metrics (scaling.LastDecision and scaling.MetricStatuses, the
// functions the autoscaler writes them with), and the tasks still
// starting. Config.Decisions gets one a line.
type DecisionRecord struct {
	Trace string `json:"trace"`
	// Seed is the run's seed (Config.StartupSeed).
	Seed   uint64 `json:"seed"`
	Policy string `json:"policy"`
	// At is the time from the first arrival, in seconds, as the series'.
	At               float64                    `json:"t_s"`
	StartingReplicas int32                      `json:"startingReplicas"`
	LastDecision     *gputaskv1.ScalingDecision `json:"lastDecision"`
	Metrics          []gputaskv1.MetricStatus   `json:"metrics"`
}

// decisionLog writes the decisions of one run of ours to Config.Decisions,
// and keeps the first error, which ends the run's report (Run).
type decisionLog struct {
	enc   *json.Encoder
	trace string
	seed  uint64
	err   error
}

// decisionLog is the log of one run of ours on c's trace, or nil
// without Config.Decisions.
func (c Config) decisionLog() *decisionLog {
	if c.Decisions == nil {
		return nil
	}
	return &decisionLog{enc: json.NewEncoder(c.Decisions), trace: c.Name, seed: c.StartupSeed}
}

// write records decision d, taken at now on inputs in by policy, started
// at start.
func (l *decisionLog) write(policy string, start, now time.Time, in scaling.Inputs, d scaling.Decision) {
	if l == nil || l.err != nil {
		return
	}
	ts := metav1.NewTime(now)
	l.err = l.enc.Encode(DecisionRecord{
		Trace: l.trace, Seed: l.seed, Policy: policy, At: now.Sub(start).Seconds(), StartingReplicas: in.Starting,
		LastDecision: scaling.LastDecision(in, d, ts), Metrics: scaling.MetricStatuses(d, ts),
	})
}

// Err is the first error writing the log, nil for no log.
func (l *decisionLog) Err() error {
	if l == nil {
		return nil
	}
	return l.err
}
