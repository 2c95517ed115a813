package autoscaler

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/scaling"
)

// FuzzSetDecision feeds random GPUTaskSets, as a user might store them
// (the CRD's rules aside), through what the autoscaler does with one: the
// inputs built from the spec and status, and the decision. It never panics
// and never asks for a negative count. `go test` runs the seeds; `go test
// -fuzz FuzzSetDecision ./pkg/autoscaler/` explores further.
func FuzzSetDecision(f *testing.F) {
	for _, seed := range []struct {
		set   string
		value float64
		fail  bool
	}{
		{`{"spec":{"replicas":1,"autoscaling":{"minReplicas":1,"maxReplicas":8,"metrics":[{"name":"load","upThreshold":"0.8","downThreshold":"0.5"}],"policy":{"type":"Step","stepUp":2,"stepDown":1},"failureThreshold":3,"fallback":{"replicas":2}}}}`, 0.9, false},
		{`{"spec":{"replicas":4,"autoscaling":{"maxReplicas":10,"metrics":[{"name":"q","target":"100"}],"policy":{"type":"Proportional","tolerance":"0.1"},"scaleDownStabilizationWindow":"5m","scaleUpLimit":{"tasks":2,"period":"1m"}}}}`, 350, false},
		{`{"metadata":{"annotations":{"gputask.io/paused":"true","gputask.io/stopped":"true"}},"spec":{"replicas":-4,"autoscaling":{"minReplicas":-1,"maxReplicas":-2,"metrics":[{"name":"q","target":"0"}],"policy":{"type":"Proportional","tolerance":"-1"},"failureThreshold":-1,"fallback":{"replicas":-3}}},"status":{"consecutiveFailures":99,"heldBackReplicas":-5}}`, math.Inf(1), true},
		{`{"spec":{"replicas":2147483647,"autoscaling":{"minReplicas":2147483647,"maxReplicas":2147483647,"metrics":[],"policy":{"type":"Bogus","stepUp":2147483647},"scaleDownStabilizationWindow":"-5m","scaleUpLimit":{"tasks":-1,"period":"0s"}}},"status":{"lastScaleTime":"2000-01-01T00:00:00Z","recommendations":[{"time":"3000-01-01T00:00:00Z","replicas":-7}]}}`, math.NaN(), false},
		{`{"spec":{"autoscaling":{"maxReplicas":3,"metrics":[{"name":"a","upThreshold":"1e300","downThreshold":"-1e300","target":"1e-300"},{"name":"b"}]}}}`, -1, true},
	} {
		f.Add([]byte(seed.set), seed.value, seed.fail)
	}
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, data []byte, value float64, fail bool) {
		var set gputaskv1.GPUTaskSet
		if json.Unmarshal(data, &set) != nil || set.Spec.Autoscaling == nil {
			return
		}
		readings := make([]scaling.MetricInput, 0, len(set.Spec.Autoscaling.Metrics))
		for _, m := range set.Spec.Autoscaling.Metrics {
			in := scaling.MetricFor(m)
			in.Value = value
			if fail {
				in.Err = errors.New("timeout")
			}
			readings = append(readings, in)
		}
		in := scaling.InputsFor(&set, now, readings, nil, set.Status.Recommendations)
		if d := scaling.Decide(in); d.Desired < 0 {
			t.Fatalf("Decide(%+v) desired %d, want >= 0", in, d.Desired)
		}
	})
}
