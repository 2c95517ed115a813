package v1_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// TestDurationDecodesAnything: a list holding one bad duration still
// decodes, the bad value is kept as written and written back unchanged.
func TestDurationDecodesAnything(t *testing.T) {
	tests := []struct {
		json     string
		want     time.Duration
		unparsed string
	}{
		{json: `"30s"`, want: 30 * time.Second},
		{json: `"1h30m"`, want: 90 * time.Minute},
		{json: `"-5s"`, want: -5 * time.Second},
		{json: `"0s"`},
		{json: `"abc"`, unparsed: `"abc"`},
		{json: `""`, unparsed: `""`},
		{json: `"30"`, unparsed: `"30"`},
		{json: `30`, unparsed: `30`},
		{json: `{"a":1}`, unparsed: `{"a":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.json, func(t *testing.T) {
			list := `{"items":[{"metadata":{"name":"bad"},"spec":{"template":{"spec":{}},"minTaskAge":` + tt.json + `}},` +
				`{"metadata":{"name":"good"},"spec":{"template":{"spec":{}},"minTaskAge":"1m"}}]}`
			var sets gputaskv1.GPUTaskSetList
			if err := json.Unmarshal([]byte(list), &sets); err != nil {
				t.Fatalf("decoding the list failed: %v", err)
			}
			d := sets.Items[0].Spec.MinTaskAge
			if d.Duration != tt.want || d.Unparsed != tt.unparsed || d.Valid() != (tt.unparsed == "") {
				t.Errorf("decoded %+v, want %v / unparsed %q", *d, tt.want, tt.unparsed)
			}
			if good := sets.Items[1].Spec.MinTaskAge; good.Duration != time.Minute || !good.Valid() {
				t.Errorf("the good item decoded as %+v", *good)
			}
			if tt.unparsed != "" {
				out, err := json.Marshal(d)
				if err != nil || string(out) != tt.json {
					t.Errorf("written back as %s (%v), want %s", out, err, tt.json)
				}
			}
		})
	}
}

func TestValidateTaskSetSpec(t *testing.T) {
	q := resource.MustParse
	dur := func(d time.Duration) *gputaskv1.Duration { return &gputaskv1.Duration{Duration: d} }
	bad := func(raw string) *gputaskv1.Duration { return &gputaskv1.Duration{Unparsed: raw} }
	valid := func() *gputaskv1.GPUTaskSetSpec {
		return &gputaskv1.GPUTaskSetSpec{
			Autoscaling: &gputaskv1.AutoscalingSpec{
				MinReplicas: ptr.To[int32](1), MaxReplicas: 5,
				Metrics: []gputaskv1.MetricSpec{{Name: "m", HTTP: &gputaskv1.HTTPSource{URL: "http://x"}}},
			},
		}
	}
	tests := []struct {
		name string
		edit func(*gputaskv1.GPUTaskSetSpec)
		want []string // fields named by the errors, in order; none for valid
		msg  string   // a message the errors must hold
	}{
		{name: "defaults", edit: func(*gputaskv1.GPUTaskSetSpec) {}},
		{name: "no autoscaling", edit: func(s *gputaskv1.GPUTaskSetSpec) { s.Autoscaling = nil; s.MinTaskAge = dur(time.Hour) }},
		{name: "every bound at its edge", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			s.MinTaskAge = dur(24 * time.Hour)
			a := s.Autoscaling
			a.Interval, a.ScaleDownStabilizationWindow = dur(time.Second), dur(0)
			a.ScaleUpLimit = &gputaskv1.ScaleUpLimit{Tasks: 1, Period: dur(time.Hour)}
			a.Policy = gputaskv1.ScalingPolicy{Type: gputaskv1.ProportionalPolicy, Tolerance: ptr.To(q("1"))}
			a.Metrics[0].Target = ptr.To(q("0.001"))
			a.Metrics[0].UpThreshold, a.Metrics[0].DownThreshold = ptr.To(q("0.5001")), ptr.To(q("0.5"))
			a.Metrics[0].HTTP.Timeout = dur(30 * time.Second)
		}},
		{name: "unparsed interval", edit: func(s *gputaskv1.GPUTaskSetSpec) { s.Autoscaling.Interval = bad(`"abc"`) }, want: []string{"spec.autoscaling.interval"}},
		{name: "zero interval", edit: func(s *gputaskv1.GPUTaskSetSpec) { s.Autoscaling.Interval = dur(0) }, want: []string{"spec.autoscaling.interval"}},
		{name: "negative interval", edit: func(s *gputaskv1.GPUTaskSetSpec) { s.Autoscaling.Interval = dur(-5 * time.Second) }, want: []string{"spec.autoscaling.interval"}},
		{name: "interval over 1h", edit: func(s *gputaskv1.GPUTaskSetSpec) { s.Autoscaling.Interval = dur(2 * time.Hour) }, want: []string{"spec.autoscaling.interval"}},
		{name: "negative minTaskAge", edit: func(s *gputaskv1.GPUTaskSetSpec) { s.MinTaskAge = dur(-time.Second) }, want: []string{"spec.minTaskAge"}},
		{name: "unparsed minTaskAge", edit: func(s *gputaskv1.GPUTaskSetSpec) { s.MinTaskAge = bad(`30`) }, want: []string{"spec.minTaskAge"}},
		{name: "zero startupTimeout", edit: func(s *gputaskv1.GPUTaskSetSpec) { s.Autoscaling.StartupTimeout = dur(0) }, want: []string{"spec.autoscaling.startupTimeout"}},
		{name: "startupTimeout over 24h", edit: func(s *gputaskv1.GPUTaskSetSpec) { s.Autoscaling.StartupTimeout = dur(25 * time.Hour) }, want: []string{"spec.autoscaling.startupTimeout"}},
		{name: "unparsed drainTimeout", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			s.ScaleIn = &gputaskv1.ScaleInSpec{DrainTimeout: bad(`"soon"`)}
		}, want: []string{"spec.scaleIn.drainTimeout"}},
		{name: "negative drainTimeout", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			s.ScaleIn = &gputaskv1.ScaleInSpec{DrainTimeout: dur(-time.Second)}
		}, want: []string{"spec.scaleIn.drainTimeout"}},
		{name: "zero drainTimeout is valid", edit: func(s *gputaskv1.GPUTaskSetSpec) { s.ScaleIn = &gputaskv1.ScaleInSpec{DrainTimeout: dur(0)} }},
		{name: "negative window", edit: func(s *gputaskv1.GPUTaskSetSpec) { s.Autoscaling.ScaleDownStabilizationWindow = dur(-time.Minute) }, want: []string{"spec.autoscaling.scaleDownStabilizationWindow"}},
		{name: "zero scale-up period", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			s.Autoscaling.ScaleUpLimit = &gputaskv1.ScaleUpLimit{Tasks: 1, Period: dur(0)}
		}, want: []string{"spec.autoscaling.scaleUpLimit.period"}},
		{name: "zero timeout", edit: func(s *gputaskv1.GPUTaskSetSpec) { s.Autoscaling.Metrics[0].HTTP.Timeout = dur(0) }, want: []string{"spec.autoscaling.metrics[0].http.timeout"}},
		{name: "prometheus timeout unparsed", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			s.Autoscaling.Metrics[0].HTTP = nil
			s.Autoscaling.Metrics[0].Prometheus = &gputaskv1.PrometheusSource{ServerAddress: "http://p", Query: "up", Timeout: bad(`"5 seconds"`)}
		}, want: []string{"spec.autoscaling.metrics[0].prometheus.timeout"}},
		{name: "negative tolerance", edit: func(s *gputaskv1.GPUTaskSetSpec) { s.Autoscaling.Policy.Tolerance = ptr.To(q("-0.1")) }, want: []string{"spec.autoscaling.policy.tolerance"}},
		{name: "tolerance over 1", edit: func(s *gputaskv1.GPUTaskSetSpec) { s.Autoscaling.Policy.Tolerance = ptr.To(q("1.5")) }, want: []string{"spec.autoscaling.policy.tolerance"}},
		{name: "schedule start not cron", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			s.Autoscaling.Schedules = []gputaskv1.ScheduleSpec{{Name: "a", Start: "0 25 * * *", Duration: gputaskv1.Duration{Duration: time.Hour}, MinReplicas: 1}}
		}, want: []string{"spec.autoscaling.schedules[0].start"}},
		{name: "schedule time zone unknown", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			s.Autoscaling.Schedules = []gputaskv1.ScheduleSpec{{Name: "a", Start: "0 9 * * *", TimeZone: "Mars/Olympus", Duration: gputaskv1.Duration{Duration: time.Hour}, MinReplicas: 1}}
		}, want: []string{"spec.autoscaling.schedules[0].timeZone"}},
		{name: "schedule time zone in start", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			s.Autoscaling.Schedules = []gputaskv1.ScheduleSpec{{Name: "a", Start: "CRON_TZ=UTC 0 9 * * *", Duration: gputaskv1.Duration{Duration: time.Hour}, MinReplicas: 1}}
		}, want: []string{"spec.autoscaling.schedules[0].start"}},
		{name: "schedule without duration, ceiling under floor", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			s.Autoscaling.Schedules = []gputaskv1.ScheduleSpec{{Name: "a", Start: "0 9 * * 1-5", MinReplicas: 4, MaxReplicas: ptr.To[int32](2)}}
		}, want: []string{"spec.autoscaling.schedules[0].duration", "spec.autoscaling.schedules[0].maxReplicas"}},
		{name: "predictive mode unknown, lead time over 1h", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			s.Autoscaling.Predictive = &gputaskv1.PredictiveSpec{Mode: "Sometimes", LeadTime: &gputaskv1.Duration{Duration: 2 * time.Hour}}
		}, want: []string{"spec.autoscaling.predictive.mode", "spec.autoscaling.predictive.leadTime"}},
		{name: "burst factor below 1.1", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			s.Autoscaling.Burst = &gputaskv1.BurstSpec{Factor: ptr.To(q("1"))}
		}, want: []string{"spec.autoscaling.burst.factor"}},
		{name: "burst window over 1h", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			s.Autoscaling.Burst = &gputaskv1.BurstSpec{Window: &gputaskv1.Duration{Duration: 2 * time.Hour}}
		}, want: []string{"spec.autoscaling.burst.window"}},
		{name: "up below down", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			s.Autoscaling.Metrics[0].UpThreshold, s.Autoscaling.Metrics[0].DownThreshold = ptr.To(q("0.3")), ptr.To(q("0.6"))
		}, want: []string{"spec.autoscaling.metrics[0].upThreshold"}},
		{name: "up equal to down", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			s.Autoscaling.Metrics[0].UpThreshold, s.Autoscaling.Metrics[0].DownThreshold = ptr.To(q("0.5")), ptr.To(q("0.5"))
		}, want: []string{"spec.autoscaling.metrics[0].upThreshold"}},
		{name: "up below the default down", edit: func(s *gputaskv1.GPUTaskSetSpec) { s.Autoscaling.Metrics[0].UpThreshold = ptr.To(q("0.4")) }, want: []string{"spec.autoscaling.metrics[0].upThreshold"}},
		{name: "negative down", edit: func(s *gputaskv1.GPUTaskSetSpec) { s.Autoscaling.Metrics[0].DownThreshold = ptr.To(q("-1")) }, want: []string{"spec.autoscaling.metrics[0].downThreshold"}},
		{name: "Proportional without target", edit: func(s *gputaskv1.GPUTaskSetSpec) { s.Autoscaling.Policy.Type = gputaskv1.ProportionalPolicy }, want: []string{"spec.autoscaling.metrics[0].target"}},
		{name: "zero target", edit: func(s *gputaskv1.GPUTaskSetSpec) { s.Autoscaling.Metrics[0].Target = ptr.To(q("0")) }, want: []string{"spec.autoscaling.metrics[0].target"}},
		{name: "min above max", edit: func(s *gputaskv1.GPUTaskSetSpec) { s.Autoscaling.MinReplicas = ptr.To[int32](6) }, want: []string{"spec.autoscaling.minReplicas"}},
		{name: "no metrics", edit: func(s *gputaskv1.GPUTaskSetSpec) { s.Autoscaling.Metrics = nil }, want: []string{"spec.autoscaling.metrics"}},
		{name: "SLO policy", edit: func(s *gputaskv1.GPUTaskSetSpec) { sloPolicy(s) }},
		{name: "SLO at its bounds", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			sloPolicy(s)
			s.Autoscaling.Policy.SLO = &gputaskv1.SLOSpec{Wait: &gputaskv1.Duration{Duration: time.Hour}, Percentile: ptr.To(q("99.9")),
				SlotsPerTask: 100000, ServiceTimeVariability: ptr.To(q("0"))}
			s.Autoscaling.Metrics[0].Role = gputaskv1.RoleCompletions
		}},
		{name: "SLO without slo", edit: func(s *gputaskv1.GPUTaskSetSpec) { sloPolicy(s); s.Autoscaling.Policy.SLO = nil }, want: []string{"spec.autoscaling.policy.slo"}},
		{name: "slo on Step", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			s.Autoscaling.Policy.SLO = &gputaskv1.SLOSpec{Wait: &gputaskv1.Duration{Duration: 10 * time.Second}, SlotsPerTask: 8}
		}, want: []string{"spec.autoscaling.policy.slo"}},
		{name: "SLO bounds", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			sloPolicy(s)
			s.Autoscaling.Policy.SLO = &gputaskv1.SLOSpec{Wait: &gputaskv1.Duration{Duration: 500 * time.Millisecond}, Percentile: ptr.To(q("99.95")),
				SlotsPerTask: -1, ServiceTimeVariability: ptr.To(q("101"))}
		}, want: []string{"spec.autoscaling.policy.slo.wait", "spec.autoscaling.policy.slo.percentile", "spec.autoscaling.policy.slo.slotsPerTask", "spec.autoscaling.policy.slo.itl", "spec.autoscaling.policy.slo.serviceTimeVariability"}},
		{name: "SLO without an objective", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			sloPolicy(s)
			s.Autoscaling.Policy.SLO.Wait = nil
		}, want: []string{"spec.autoscaling.policy.slo"}},
		{name: "SLO on TTFT and ITL from a profile", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			engineSLO(s)
		}},
		{name: "SLO ttft and itl at their bounds, no wait", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			engineSLO(s)
			s.Autoscaling.Policy.SLO.TTFT, s.Autoscaling.Policy.SLO.ITL = dur(10*time.Millisecond), dur(10*time.Second)
		}},
		{name: "SLO ttft and itl out of bounds", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			engineSLO(s)
			s.Autoscaling.Policy.SLO.TTFT, s.Autoscaling.Policy.SLO.ITL = dur(5*time.Millisecond), dur(11*time.Second)
		}, want: []string{"spec.autoscaling.policy.slo.ttft", "spec.autoscaling.policy.slo.itl"}},
		{name: "SLO ttft without TTFTPercentile", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			engineSLO(s)
			dropRole(s, gputaskv1.RoleTTFTPercentile)
		}, want: []string{"spec.autoscaling.metrics"}, msg: gputaskv1.TTFTNeedsPercentile},
		{name: "SLO profile capacity without KVCacheUsage", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			engineSLO(s)
			dropRole(s, gputaskv1.RoleKVCacheUsage)
		}, want: []string{"spec.autoscaling.metrics"}, msg: gputaskv1.ProfileNeedsKVCache},
		{name: "SLO GenerationTokensMedian without GenerationTokens", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			engineSLO(s)
			dropRole(s, gputaskv1.RoleGenerationTokens)
			s.Autoscaling.Metrics = append(s.Autoscaling.Metrics, gputaskv1.MetricSpec{Name: "generation-median", Role: gputaskv1.RoleGenerationTokensMedian,
				HTTP: &gputaskv1.HTTPSource{URL: "http://x"}})
		}, want: []string{"spec.autoscaling.metrics"}, msg: gputaskv1.MedianNeedsMean},
		{name: "SLO PromptTokensMedian without PromptTokens", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			engineSLO(s)
			dropRole(s, gputaskv1.RolePromptTokens)
			s.Autoscaling.Metrics = append(s.Autoscaling.Metrics, gputaskv1.MetricSpec{Name: "prompt-median", Role: gputaskv1.RolePromptTokensMedian,
				HTTP: &gputaskv1.HTTPSource{URL: "http://x"}})
		}, want: []string{"spec.autoscaling.metrics"}, msg: gputaskv1.PromptMedianNeedsMean},
		{name: "SLO profile with slotsPerTask needs no KVCacheUsage", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			engineSLO(s)
			dropRole(s, gputaskv1.RoleKVCacheUsage)
			s.Autoscaling.Policy.SLO.SlotsPerTask = 64
		}},
		{name: "SLO itl learned without InterTokenLatency", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			engineSLO(s)
			s.Autoscaling.Policy.SLO.Engine = nil
			dropRole(s, gputaskv1.RoleInterTokenLatency)
		}, want: []string{"spec.autoscaling.metrics"}, msg: gputaskv1.ITLNeedsEngine},
		{name: "SLO itl learned from InterTokenLatency", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			engineSLO(s)
			s.Autoscaling.Policy.SLO.Engine = nil
		}},
		{name: "SLO without slotsPerTask or itl", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			sloPolicy(s)
			s.Autoscaling.Policy.SLO.SlotsPerTask = 0
		}, want: []string{"spec.autoscaling.policy.slo.itl"}},
		{name: "SLO engine unknown profile", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			engineSLO(s)
			s.Autoscaling.Policy.SLO.Engine.Profile = "b200-mystery"
		}, want: []string{"spec.autoscaling.policy.slo.engine.profile"}},
		{name: "SLO engine with both sources", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			engineSLO(s)
			s.Autoscaling.Policy.SLO.Engine.ConfigMapRef = &gputaskv1.ConfigMapKeyRef{Name: "a", Key: "b"}
		}, want: []string{"spec.autoscaling.policy.slo.engine"}},
		{name: "SLO engine from a ConfigMap without key", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			engineSLO(s)
			s.Autoscaling.Policy.SLO.Engine = &gputaskv1.EngineSpec{ConfigMapRef: &gputaskv1.ConfigMapKeyRef{Name: "a"}}
		}, want: []string{"spec.autoscaling.policy.slo.engine.configMapRef"}},
		{name: "SLO percentile below 50", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			sloPolicy(s)
			s.Autoscaling.Policy.SLO.Percentile = ptr.To(q("49.9"))
		}, want: []string{"spec.autoscaling.policy.slo.percentile"}},
		{name: "SLO with burst", edit: func(s *gputaskv1.GPUTaskSetSpec) { sloPolicy(s); s.Autoscaling.Burst = &gputaskv1.BurstSpec{} }, want: []string{"spec.autoscaling.burst"}},
		{name: "SLO metric without role, none Running", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			sloPolicy(s)
			s.Autoscaling.Metrics[1].Role = ""
		}, want: []string{"spec.autoscaling.metrics[1].role", "spec.autoscaling.metrics"}},
		{name: "SLO role twice, unknown role", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			sloPolicy(s)
			s.Autoscaling.Metrics = append(s.Autoscaling.Metrics,
				gputaskv1.MetricSpec{Name: "again", Role: gputaskv1.RoleRunning, HTTP: &gputaskv1.HTTPSource{URL: "http://x"}},
				gputaskv1.MetricSpec{Name: "odd", Role: "Load", HTTP: &gputaskv1.HTTPSource{URL: "http://x"}})
		}, want: []string{"spec.autoscaling.metrics[2].role", "spec.autoscaling.metrics[3].role"}},
		{name: "SLO without arrivals", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			sloPolicy(s)
			s.Autoscaling.Metrics[0].Role = gputaskv1.RoleWaiting
		}, want: []string{"spec.autoscaling.metrics"}},
		{name: "role on Step", edit: func(s *gputaskv1.GPUTaskSetSpec) { s.Autoscaling.Metrics[0].Role = gputaskv1.RoleArrivals }, want: []string{"spec.autoscaling.metrics[0].role"}},
		{name: "several at once", edit: func(s *gputaskv1.GPUTaskSetSpec) {
			s.MinTaskAge = bad(`"forever"`)
			s.Autoscaling.Interval = dur(0)
		}, want: []string{"spec.minTaskAge", "spec.autoscaling.interval"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := valid()
			tt.edit(spec)
			errs := gputaskv1.ValidateTaskSetSpec(spec)
			var got []string
			for _, e := range errs {
				got = append(got, e.Field)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("errors %v, want fields %v", errs, tt.want)
			}
			if msg := errs.ToAggregate(); tt.msg != "" && !strings.Contains(msg.Error(), tt.msg) {
				t.Fatalf("errors %v, want the message %q", msg, tt.msg)
			}
		})
	}
	// The message shows an unparsed string as the user wrote it.
	spec := valid()
	spec.Autoscaling.Interval = bad(`"abc"`)
	if msg := gputaskv1.ValidateTaskSetSpec(spec).ToAggregate().Error(); !strings.Contains(msg, `spec.autoscaling.interval: Invalid value: "abc": must be a duration`) {
		t.Errorf("message %q", msg)
	}
}

// engineSLO turns the valid spec into an SLO policy on TTFT and ITL, with
// the H100 profile and every metric the roles name.
func engineSLO(s *gputaskv1.GPUTaskSetSpec) {
	sloPolicy(s)
	s.Autoscaling.Policy.SLO = &gputaskv1.SLOSpec{TTFT: &gputaskv1.Duration{Duration: 2 * time.Second}, ITL: &gputaskv1.Duration{Duration: 50 * time.Millisecond},
		Engine: &gputaskv1.EngineSpec{Profile: "h100-llama-3.1-8b"}}
	for _, r := range []gputaskv1.MetricRole{gputaskv1.RoleTTFTPercentile, gputaskv1.RoleInterTokenLatency,
		gputaskv1.RolePromptTokens, gputaskv1.RoleGenerationTokens, gputaskv1.RoleKVCacheUsage} {
		s.Autoscaling.Metrics = append(s.Autoscaling.Metrics, gputaskv1.MetricSpec{Name: strings.ToLower(string(r)), Role: r, HTTP: &gputaskv1.HTTPSource{URL: "http://x"}})
	}
}

func dropRole(s *gputaskv1.GPUTaskSetSpec, role gputaskv1.MetricRole) {
	s.Autoscaling.Metrics = slices.DeleteFunc(s.Autoscaling.Metrics, func(m gputaskv1.MetricSpec) bool { return m.Role == role })
}

// sloPolicy turns the valid spec into an SLO policy over an arrivals and a
// running metric.
func sloPolicy(s *gputaskv1.GPUTaskSetSpec) {
	a := s.Autoscaling
	a.Policy = gputaskv1.ScalingPolicy{Type: gputaskv1.SLOPolicy, SLO: &gputaskv1.SLOSpec{Wait: &gputaskv1.Duration{Duration: 10 * time.Second}, SlotsPerTask: 8}}
	a.Metrics[0].Role = gputaskv1.RoleArrivals
	a.Metrics = append(a.Metrics, gputaskv1.MetricSpec{Name: "running", Role: gputaskv1.RoleRunning, HTTP: &gputaskv1.HTTPSource{URL: "http://x"}})
}

// TestDurationUnstructured: converting to and from unstructured, as
// server-side apply and the fake clients do, keeps what JSON keeps.
func TestDurationUnstructured(t *testing.T) {
	for _, d := range []gputaskv1.Duration{{Duration: 90 * time.Second}, {Unparsed: `"abc"`}} {
		set := &gputaskv1.GPUTaskSet{Spec: gputaskv1.GPUTaskSetSpec{MinTaskAge: &d}}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(set)
		if err != nil {
			t.Fatal(err)
		}
		want := map[bool]string{true: "1m30s", false: "abc"}[d.Valid()]
		if got := u["spec"].(map[string]any)["minTaskAge"]; got != want {
			t.Errorf("unstructured minTaskAge = %#v, want %q", got, want)
		}
		back := &gputaskv1.GPUTaskSet{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, back); err != nil {
			t.Fatal(err)
		}
		if *back.Spec.MinTaskAge != d {
			t.Errorf("back from unstructured: %+v, want %+v", *back.Spec.MinTaskAge, d)
		}
	}
}
