package baseline

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The behavior model follows k8s.io/kubernetes v1.37
// pkg/controller/podautoscaler/horizontal.go and pkg/apis/autoscaling.
// Each test names the function whose rule it checks.

func rules(sel autoscalingv2.ScalingPolicySelect, window int32, policies ...autoscalingv2.HPAScalingPolicy) *autoscalingv2.HPAScalingRules {
	return &autoscalingv2.HPAScalingRules{SelectPolicy: &sel, StabilizationWindowSeconds: &window, Policies: policies}
}

func pods(v, period int32) autoscalingv2.HPAScalingPolicy {
	return autoscalingv2.HPAScalingPolicy{Type: autoscalingv2.PodsScalingPolicy, Value: v, PeriodSeconds: period}
}

func percent(v, period int32) autoscalingv2.HPAScalingPolicy {
	return autoscalingv2.HPAScalingPolicy{Type: autoscalingv2.PercentScalingPolicy, Value: v, PeriodSeconds: period}
}

func ev(change int32, ago time.Duration) timestampedScaleEvent {
	return timestampedScaleEvent{replicaChange: change, timestamp: t0.Add(-ago)}
}

// horizontal.go: calculateScaleUpLimitWithScalingRules starts each policy
// from the count at the start of its period, rounds Percent up, and picks
// by selectPolicy; Disabled returns the current count.
func TestCalculateScaleUpLimitWithScalingRules(t *testing.T) {
	for _, tc := range []struct {
		name     string
		current  int32
		up, down []timestampedScaleEvent
		rules    *autoscalingv2.HPAScalingRules
		want     int32
	}{
		{"Max of pods and percent: pods", 3, nil, nil, rules("Max", 0, pods(8, 15), percent(100, 15)), 11},
		{"Max of pods and percent: percent", 10, nil, nil, rules("Max", 0, pods(8, 15), percent(100, 15)), 20},
		{"Min of pods and percent", 10, nil, nil, rules("Min", 0, pods(8, 15), percent(100, 15)), 18},
		{"Disabled keeps the count", 10, nil, nil, rules("Disabled", 0, pods(8, 15)), 10},
		{"percent rounds up", 3, nil, nil, rules("Max", 0, percent(10, 15)), 4},
		{"pods added in the period count against it", 10, []timestampedScaleEvent{ev(4, 30*time.Second)}, nil, rules("Max", 0, pods(5, 60)), 11},
		{"pods removed in the period count for it", 10, nil, []timestampedScaleEvent{ev(2, 30*time.Second)}, rules("Max", 0, pods(5, 60)), 17},
		{"an event out of the period counts for nothing", 10, []timestampedScaleEvent{ev(4, 61*time.Second)}, nil, rules("Max", 0, pods(5, 60)), 15},
		{"an event exactly one period ago is out of it", 10, []timestampedScaleEvent{ev(4, 60*time.Second)}, nil, rules("Max", 0, pods(5, 60)), 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := calculateScaleUpLimitWithScalingRules(t0, tc.current, tc.up, tc.down, tc.rules); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

// horizontal.go: calculateScaleDownLimitWithBehaviors starts each policy
// from the count at the start of its period, rounds Percent down (toward
// fewer pods kept... int32 truncation), and Max picks the lowest count.
func TestCalculateScaleDownLimitWithBehaviors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		current  int32
		up, down []timestampedScaleEvent
		rules    *autoscalingv2.HPAScalingRules
		want     int32
	}{
		{"pods", 10, nil, nil, rules("Max", 300, pods(2, 60)), 8},
		{"Max picks the biggest change", 10, nil, nil, rules("Max", 300, pods(2, 60), percent(50, 60)), 5},
		{"Min picks the smallest change", 10, nil, nil, rules("Min", 300, pods(2, 60), percent(50, 60)), 8},
		{"Disabled keeps the count", 10, nil, nil, rules("Disabled", 300, pods(2, 60)), 10},
		{"percent truncates", 9, nil, nil, rules("Max", 300, percent(50, 60)), 4},
		{"pods removed in the period count against it", 8, nil, []timestampedScaleEvent{ev(2, 45*time.Second)}, rules("Max", 300, pods(2, 60)), 8},
		{"pods added in the period count for it", 12, []timestampedScaleEvent{ev(2, 45*time.Second)}, nil, rules("Max", 300, pods(2, 60)), 8},
		{"an event out of the period counts for nothing", 8, nil, []timestampedScaleEvent{ev(2, 60*time.Second)}, rules("Max", 300, pods(2, 60)), 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := calculateScaleDownLimitWithBehaviors(t0, tc.current, tc.up, tc.down, tc.rules); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

// horizontal.go: getReplicasChangePerPeriod sums the changes of the
// events after now − period.
func TestGetReplicasChangePerPeriod(t *testing.T) {
	events := []timestampedScaleEvent{ev(1, 10*time.Second), ev(2, 59*time.Second), ev(4, 60*time.Second), ev(8, 600*time.Second)}
	for _, tc := range []struct {
		period int32
		want   int32
	}{{15, 1}, {60, 3}, {61, 7}, {3600, 15}} {
		if got := getReplicasChangePerPeriod(t0, tc.period, events); got != tc.want {
			t.Errorf("period %d: got %d, want %d", tc.period, got, tc.want)
		}
	}
}

// horizontal.go: markScaleEventsOutdated marks the events older than the
// longest policy period, and storeScaleEvent puts a new event in the slot
// of the last outdated one, or appends it, in its direction's list.
func TestStoreScaleEvent(t *testing.T) {
	h := NewHPA(HPAConfig{Min: 1, Max: 100, Target: 1, Behavior: GPUServingBehavior()})
	h.storeScaleEvent(t0, 4, 10)
	h.storeScaleEvent(t0.Add(10*time.Second), 10, 12)
	if len(h.scaleUpEvents) != 2 || len(h.scaleDownEvents) != 0 {
		t.Fatalf("events up %v down %v; want two up", h.scaleUpEvents, h.scaleDownEvents)
	}
	// 20 s after the first: it is older than the 15 s policies; its slot is reused.
	h.storeScaleEvent(t0.Add(20*time.Second), 12, 13)
	if len(h.scaleUpEvents) != 2 || h.scaleUpEvents[0].replicaChange != 1 || h.scaleUpEvents[1].replicaChange != 2 {
		t.Errorf("up events %+v; want the first slot reused by +1", h.scaleUpEvents)
	}
	h.storeScaleEvent(t0.Add(30*time.Second), 13, 11)
	h.storeScaleEvent(t0.Add(80*time.Second), 11, 9) // within the 60 s policy of the last: appended
	if len(h.scaleDownEvents) != 2 || h.scaleDownEvents[0].replicaChange != 2 || h.scaleDownEvents[1].replicaChange != 2 {
		t.Errorf("down events %+v; want two of 2", h.scaleDownEvents)
	}
	h.storeScaleEvent(t0.Add(200*time.Second), 9, 8) // both older than 60 s: the last outdated slot
	if len(h.scaleDownEvents) != 2 || h.scaleDownEvents[1].replicaChange != 1 || h.scaleDownEvents[0].replicaChange != 2 {
		t.Errorf("down events %+v; want the last outdated slot reused by 1", h.scaleDownEvents)
	}
	markScaleEventsOutdated(t0.Add(200*time.Second), h.scaleDownEvents, 60)
	if !h.scaleDownEvents[0].outdated || h.scaleDownEvents[1].outdated {
		t.Errorf("outdated marks %+v; want only the old one", h.scaleDownEvents)
	}
	// Without a behavior nothing is stored.
	d := NewHPA(HPAConfig{Min: 1, Max: 100, Target: 1})
	d.storeScaleEvent(t0, 1, 5)
	if len(d.scaleUpEvents) != 0 {
		t.Errorf("stored %v without a behavior", d.scaleUpEvents)
	}
}

// horizontal.go: stabilizeRecommendationWithBehaviors bounds the count by
// the lowest recommendation within the scale-up window and the highest
// within the scale-down window, and records this one in the slot of a
// sample older than both windows.
func TestStabilizeRecommendationWithBehaviors(t *testing.T) {
	b := GPUServingBehavior()
	b.ScaleUp.StabilizationWindowSeconds = ptrTo[int32](60)
	newH := func(recs ...timestampedRecommendation) *HPA {
		h := NewHPA(HPAConfig{Min: 1, Max: 100, Target: 1, Behavior: b})
		h.recs = recs
		return h
	}
	rec := func(r int32, ago time.Duration) timestampedRecommendation {
		return timestampedRecommendation{r, t0.Add(-ago)}
	}
	for _, tc := range []struct {
		name      string
		recs      []timestampedRecommendation
		current   int32
		proposal  int32
		want      int32
		wantSlots int
	}{
		{"no history: the proposal", nil, 5, 9, 9, 1},
		{"scale-up window holds up to the lowest recent", []timestampedRecommendation{rec(6, 30*time.Second)}, 5, 9, 6, 2},
		{"scale-up window never below current", []timestampedRecommendation{rec(3, 30*time.Second)}, 5, 9, 5, 2},
		{"scale-down window holds down to the highest recent", []timestampedRecommendation{rec(8, 200*time.Second)}, 10, 4, 8, 2},
		{"scale-down window never above current", []timestampedRecommendation{rec(12, 200*time.Second)}, 10, 4, 10, 2},
		{"out of both windows: ignored and replaced", []timestampedRecommendation{rec(20, 300*time.Second), rec(7, 100*time.Second)}, 10, 4, 7, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newH(tc.recs...)
			if got := h.stabilizeRecommendationWithBehaviors(t0, tc.current, tc.proposal); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
			if len(h.recs) != tc.wantSlots {
				t.Errorf("%d samples kept, want %d", len(h.recs), tc.wantSlots)
			}
			last := false
			for _, r := range h.recs {
				last = last || (r.recommendation == tc.proposal && r.timestamp.Equal(t0))
			}
			if !last {
				t.Errorf("samples %+v lack this proposal", h.recs)
			}
		})
	}
}

// horizontal.go: convertDesiredReplicasWithBehaviorRate clamps a scale-up
// to min(maxReplicas, max(limit, current)) and a scale-down to
// max(minReplicas, min(limit, current)); a count that stays is kept.
func TestConvertDesiredReplicasWithBehaviorRate(t *testing.T) {
	for _, tc := range []struct {
		name              string
		min, max, current int32
		desired           int32
		up                []timestampedScaleEvent
		want              int32
		down              []timestampedScaleEvent
	}{
		{"up within the policies", 1, 100, 4, 10, nil, 10, nil},
		{"up limited by Pods 8", 1, 100, 4, 30, nil, 12, nil},
		{"up limited by Percent 100", 1, 100, 10, 30, nil, 20, nil},
		{"up limited by maxReplicas", 1, 15, 10, 30, nil, 15, nil},
		{"up never below current after a burst", 1, 100, 20, 30, []timestampedScaleEvent{ev(16, 5*time.Second)}, 20, nil},
		{"down limited by Pods 2", 1, 100, 10, 3, nil, 8, nil},
		{"down limited by minReplicas", 9, 100, 10, 3, nil, 9, nil},
		{"same count stays", 1, 100, 10, 10, nil, 10, nil},
		{"down never above current after removals", 1, 100, 10, 3, nil, 10, []timestampedScaleEvent{ev(4, 30*time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHPA(HPAConfig{Min: tc.min, Max: tc.max, Target: 1, Behavior: GPUServingBehavior()})
			h.scaleUpEvents, h.scaleDownEvents = tc.up, tc.down
			if got := h.convertDesiredReplicasWithBehaviorRate(t0, tc.current, tc.desired); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

// horizontal.go: normalizeDesiredReplicasWithBehaviors stabilizes and then
// limits the rate; reconcileAutoscaler stores each rescale, so the second
// scale-up within a period starts from the count before the first.
func TestNormalizeDesiredReplicasWithBehaviors(t *testing.T) {
	h := NewHPA(HPAConfig{Min: 1, Max: 100, Target: 1, Behavior: GPUServingBehavior()})
	// index 10 × 4 Ready: the metric asks for 40.
	steps := []struct {
		at      time.Duration
		current int32
		metric  float64
		want    int32
	}{
		{0, 4, 10, 12},                   // Pods 8 beats 100 % of 4
		{15 * time.Second, 12, 10, 24},   // the first event is one period old: 100 % of 12
		{20 * time.Second, 24, 10, 24},   // the last event is within 15 s: 24 − 12 + 12 = 24
		{30 * time.Second, 24, 0.5, 24},  // a lower proposal waits for the 300 s window
		{330 * time.Second, 24, 0.5, 22}, // Pods 2 per 60 s
		{345 * time.Second, 22, 0.5, 22}, // still within that 60 s
		{390 * time.Second, 22, 0.5, 20},
	}
	for _, s := range steps {
		got := h.reconcile(t0.Add(s.at), s.current, s.current, s.current, s.metric)
		if got != s.want {
			t.Errorf("at %v from %d with %v: got %d, want %d", s.at, s.current, s.metric, got, s.want)
		}
	}
}

// The hpa row has a behavior; without one the model keeps the
// max(2 × current, 4) limit of convertDesiredReplicasWithRules.
func TestBehaviorReplacesScaleUpLimit(t *testing.T) {
	with := NewHPA(HPAConfig{Min: 1, Max: 100, Target: 1, Behavior: GPUServingBehavior()})
	without := NewHPA(HPAConfig{Min: 1, Max: 100, Target: 1})
	if got := with.reconcile(t0, 2, 2, 2, 10); got != 10 {
		t.Errorf("with behavior: got %d, want 2 + 8 = 10", got)
	}
	if got := without.reconcile(t0, 2, 2, 2, 10); got != 4 {
		t.Errorf("without: got %d, want max(2 × 2, 4) = 4", got)
	}
	if with.Name() != PolicyHPA || without.Name() != PolicyHPADefault {
		t.Errorf("names %q, %q", with.Name(), without.Name())
	}
}

// defaults.go: SetDefaults_HorizontalPodAutoscalerBehavior fills each
// rule left out with the defaults that repeat the HPA without behavior,
// and horizontal.go's maybeInitScaleDownStabilizationWindow a scale-down
// window left out with the controller's flag.
func TestDefaultBehavior(t *testing.T) {
	b := defaultBehavior(&autoscalingv2.HorizontalPodAutoscalerBehavior{
		ScaleDown: &autoscalingv2.HPAScalingRules{Policies: []autoscalingv2.HPAScalingPolicy{pods(1, 60)}},
	}, 5*time.Minute)
	up, down := b.ScaleUp, b.ScaleDown
	if *up.StabilizationWindowSeconds != 0 || *up.SelectPolicy != "Max" || len(up.Policies) != 2 ||
		up.Policies[0] != pods(4, 15) || up.Policies[1] != percent(100, 15) {
		t.Errorf("scaleUp %+v", up)
	}
	if *down.StabilizationWindowSeconds != 300 || *down.SelectPolicy != "Max" || len(down.Policies) != 1 || down.Policies[0] != pods(1, 60) {
		t.Errorf("scaleDown %+v", down)
	}
	empty := defaultBehavior(&autoscalingv2.HorizontalPodAutoscalerBehavior{}, time.Minute)
	if len(empty.ScaleDown.Policies) != 1 || empty.ScaleDown.Policies[0] != percent(100, 15) || *empty.ScaleDown.StabilizationWindowSeconds != 60 {
		t.Errorf("default scaleDown %+v", empty.ScaleDown)
	}
}

// horizontal.go: tolerancesForHpa takes each direction's tolerance from
// the behavior when set, else the controller's.
func TestTolerancesForHPA(t *testing.T) {
	b := GPUServingBehavior()
	q := resource.MustParse("0.05")
	b.ScaleUp.Tolerance = &q
	c := HPAConfig{Target: 1, Behavior: b}.withDefaults()
	if got := c.tolerances(); got != (hpaTolerances{scaleDown: 0.1, scaleUp: 0.05}) {
		t.Errorf("got %+v", got)
	}
	if got := (HPAConfig{}).withDefaults().tolerances(); got != symmetricTolerance {
		t.Errorf("without behavior got %+v", got)
	}
	// replica_calculator.go: Tolerances.isWithin with the two apart.
	if (hpaTolerances{0.1, 0.05}).isWithin(1.06) || !(hpaTolerances{0.1, 0.05}).isWithin(0.91) {
		t.Error("isWithin ignores a direction")
	}
}

func TestGPUServingBehavior(t *testing.T) {
	b := GPUServingBehavior()
	if *b.ScaleUp.StabilizationWindowSeconds != 0 || *b.ScaleUp.SelectPolicy != "Max" ||
		len(b.ScaleUp.Policies) != 2 || b.ScaleUp.Policies[0] != pods(8, 15) || b.ScaleUp.Policies[1] != percent(100, 15) {
		t.Errorf("scaleUp %+v", b.ScaleUp)
	}
	if *b.ScaleDown.StabilizationWindowSeconds != 300 || *b.ScaleDown.SelectPolicy != "Max" ||
		len(b.ScaleDown.Policies) != 1 || b.ScaleDown.Policies[0] != pods(2, 60) {
		t.Errorf("scaleDown %+v", b.ScaleDown)
	}
	if errs := validateBehavior(b, nil); len(errs) > 0 {
		t.Errorf("the preset is invalid: %v", errs)
	}
}

// validation.go: validateScalingRules and validateScalingPolicy.
func TestLoadHPABehavior(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, yaml, wantErr string
		check               func(*autoscalingv2.HorizontalPodAutoscalerBehavior) bool
	}{
		{name: "behavior block", yaml: "scaleUp:\n  policies:\n  - type: Pods\n    value: 3\n    periodSeconds: 30\n",
			check: func(b *autoscalingv2.HorizontalPodAutoscalerBehavior) bool {
				return b.ScaleDown == nil && b.ScaleUp.Policies[0] == pods(3, 30)
			}},
		{name: "whole HPA", yaml: "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nspec:\n  maxReplicas: 5\n  scaleTargetRef: {kind: Deployment, name: x}\n  behavior:\n    scaleDown:\n      stabilizationWindowSeconds: 60\n",
			check: func(b *autoscalingv2.HorizontalPodAutoscalerBehavior) bool {
				return *b.ScaleDown.StabilizationWindowSeconds == 60
			}},
		{name: "unknown field", yaml: "scaleUp:\n  window: 3\n", wantErr: "unknown field"},
		{name: "empty", yaml: "", wantErr: "empty"},
		{name: "HPA without behavior", yaml: "spec:\n  maxReplicas: 5\n", wantErr: "no spec.behavior"},
		{name: "other kind", yaml: "kind: Deployment\nspec:\n  behavior: {}\n", wantErr: "want HorizontalPodAutoscaler"},
		{name: "negative window", yaml: "scaleDown:\n  stabilizationWindowSeconds: -1\n", wantErr: "spec.behavior.scaleDown.stabilizationWindowSeconds"},
		{name: "window too long", yaml: "scaleUp:\n  stabilizationWindowSeconds: 3601\n", wantErr: "less than or equal to 3600"},
		{name: "bad selectPolicy", yaml: "scaleUp:\n  selectPolicy: Most\n", wantErr: "spec.behavior.scaleUp.selectPolicy"},
		{name: "empty policies", yaml: "scaleUp:\n  policies: []\n", wantErr: "must specify at least one Policy"},
		{name: "bad type", yaml: "scaleUp:\n  policies:\n  - {type: Nodes, value: 1, periodSeconds: 15}\n", wantErr: "spec.behavior.scaleUp.policies[0].type"},
		{name: "zero value", yaml: "scaleUp:\n  policies:\n  - {type: Pods, value: 0, periodSeconds: 15}\n", wantErr: "policies[0].value"},
		{name: "zero period", yaml: "scaleDown:\n  policies:\n  - {type: Pods, value: 1, periodSeconds: 0}\n", wantErr: "policies[0].periodSeconds"},
		{name: "period too long", yaml: "scaleDown:\n  policies:\n  - {type: Pods, value: 1, periodSeconds: 1801}\n", wantErr: "less than or equal to 1800"},
		{name: "negative tolerance", yaml: "scaleDown:\n  tolerance: -0.1\n", wantErr: "spec.behavior.scaleDown.tolerance"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			b, err := LoadHPABehavior(path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(b) {
				t.Errorf("got %+v", b)
			}
		})
	}
	if _, err := LoadHPABehavior(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "reading the HPA behavior") {
		t.Errorf("missing file: err = %v", err)
	}
}
