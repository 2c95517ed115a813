package autoscaler

import (
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/controllertest"
	"github.com/gputask/gputask-controller/pkg/gpuprofile"
	"github.com/gputask/gputask-controller/pkg/scaling"
)

// engineRoles are the roles of a vLLM pool's metrics under an SLO on TTFT
// and ITL with an engine profile.
var engineRoles = []gputaskv1.MetricRole{gputaskv1.RoleArrivals, gputaskv1.RoleCompletions, gputaskv1.RoleRunning,
	gputaskv1.RoleWaiting, gputaskv1.RoleTTFTPercentile, gputaskv1.RoleInterTokenLatency,
	gputaskv1.RolePromptTokens, gputaskv1.RoleGenerationTokens, gputaskv1.RoleKVCacheUsage}

// engineSet is sloSet on TTFT 2s and ITL 50ms at p95 with the engine
// given, its capacity from the engine.
func engineSet(name string, replicas int32, engine *gputaskv1.EngineSpec) *gputaskv1.GPUTaskSet {
	set := sloSet(name, replicas, 20, engineRoles...)
	set.UID = types.UID(name + "-uid")
	slo := set.Spec.Autoscaling.Policy.SLO
	slo.Wait, slo.SlotsPerTask = nil, 0
	slo.TTFT, slo.ITL = &gputaskv1.Duration{Duration: 2 * time.Second}, &gputaskv1.Duration{Duration: 50 * time.Millisecond}
	slo.Engine = engine
	return set
}

// readVLLM sets the readings of the pool that docs/autoscaling.md walks
// through (pkg/scaling's TestSLOWalkthroughH100).
func (f *fixture) readVLLM() {
	for role, v := range map[gputaskv1.MetricRole]float64{
		gputaskv1.RoleArrivals: 50, gputaskv1.RoleCompletions: 50, gputaskv1.RoleRunning: 400, gputaskv1.RoleWaiting: 20,
		gputaskv1.RoleTTFTPercentile: 1.2, gputaskv1.RoleInterTokenLatency: 0.015,
		gputaskv1.RolePromptTokens: 50000, gputaskv1.RoleGenerationTokens: 8000, gputaskv1.RoleKVCacheUsage: 0.6,
	} {
		f.readings[strings.ToLower(string(role))] = fakeSource{value: v}
	}
}

func h100JSON(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../gpuprofile/profiles/h100-llama-3.1-8b.json")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func profileConfigMap(namespace, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(namespace + "-" + name), ResourceVersion: "1",
		Labels: map[string]string{gputaskv1.LabelEngineProfile: "true"}}, Data: data}
}

// learned is what the SLO policy of a pool has learned by t0: rises of
// 3.5 requests/s within a start-up over the last 11 start-ups, and its
// workers' ITL at 1 to 201 sequences, 7 ms + 51.2 µs a sequence, until a
// minute ago.
func learned() scaling.QueueState {
	var q scaling.QueueState
	for k := 11; k >= 1; k-- {
		q.Rises.Buckets = append(q.Rises.Buckets, scaling.RiseBucket{Start: t0.Add(-time.Duration(k) * 2 * time.Minute), Rise: 3.5})
	}
	for k := 0; k < 10; k++ {
		batch := float64(1 + 50*(k%5))
		q.ITL = q.ITL.Observe(t0.Add(time.Duration(k-10)*time.Minute), batch, time.Duration((0.007+0.0000512*batch)*float64(time.Second)))
	}
	return q
}

// TestSLOEngineStatus: an SLO set on TTFT and ITL with the H100 profile,
// reading what vLLM exports, writes the decision the pure policy makes
// (pkg/scaling's TestSLOWalkthroughH100) and explains it in
// lastDecision: the capacity from the profile at the context the KV
// cache shows, the fit of the workers' ITL and its age, the predicted
// TTFT and ITL at the count chosen, and the burst headroom.
func TestSLOEngineStatus(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := engineSet("web", 2, &gputaskv1.EngineSpec{Profile: "h100-llama-3.1-8b"})
	f.Add(set)
	f.scaleReplicas = 2
	f.readVLLM()
	c := f.newController(ctx)
	c.sets[cache.ObjectName{Namespace: set.Namespace, Name: set.Name}] = &setState{uid: string(set.UID), queue: learned()}

	f.syncOK(ctx, c, "web")
	f.expectScale("web", 3)
	ts := metav1.NewTime(t0)
	inputs := "arrivals=50/s expected=53.7222/s backlog=0.222222/s service=8s slots=159 ca2=1 cs2=1 correction=1 startup=2m0s"
	message := "53.7222/s expected (50/s now) at 8s per request need 3 tasks of 159 slots for a p95 wait within 1.974s"
	want := set.DeepCopy()
	want.Status.LoadIndex, want.Status.DesiredReplicas, want.Status.LastScaleTime = "50", ptr.To[int32](3), &ts
	want.Status.LastDecision = &gputaskv1.ScalingDecision{Time: ts, Inputs: inputs + " predicted-p95-wait=0s", From: 2, To: 3,
		Reason: scaling.ReasonSLOScaleUp, Message: message,
		// 1,000-token prompts prefill in 26 ms; 134 sequences a task, 43 %
		// of its time prefilling, step in 28.8 ms.
		PredictedWait: "0s", PredictedTTFT: "26.11ms", PredictedITL: "33.11ms", BurstHeadroom: "3.5",
		// 0.6 × 465,567 KV tokens × 2 tasks / 400 running.
		Capacity: &gputaskv1.TaskCapacity{SlotsPerTask: 159, Source: gputaskv1.CapacityProfile, Context: "1397",
			// The ten readings learned before, and this one: 200
			// sequences a task at 15 ms.
			Fit: &gputaskv1.ITLFitStatus{Alpha: "7.19ms", Beta: "47.57µs", Readings: "10.1", LastReadingTime: ts}},
	}
	for _, r := range engineRoles {
		name := strings.ToLower(string(r))
		want.Status.Metrics = append(want.Status.Metrics, gputaskv1.MetricStatus{Name: name, Value: scaling.FormatValue(f.readings[name].value),
			DesiredReplicas: ptr.To[int32](3), LastReadTime: &ts})
	}
	want.Status.Recommendations = []gputaskv1.Recommendation{{Time: ts, Replicas: 3}}
	want.Status.Conditions = []metav1.Condition{rescaled(3),
		{Type: gputaskv1.ConditionScalingActive, Status: metav1.ConditionTrue, Reason: ReasonValidMetricFound, Message: "the autoscaler read every load index: " + inputs},
		withinRange,
	}
	for i := range want.Status.Conditions {
		want.Status.Conditions[i].LastTransitionTime = ts
	}
	f.ExpectApplyStatus(want)
	f.CheckActions()
}

// TestEngineProfileFromConfigMap: slo.engine.configMapRef reads the
// profile from a ConfigMap of the set's own namespace. One that is
// missing (or only in another namespace), lacks the key or holds no
// profile holds the count, with ScalingActive and a Warning naming what
// is wrong and never the ConfigMap's text.
func TestEngineProfileFromConfigMap(t *testing.T) {
	ref := &gputaskv1.EngineSpec{ConfigMapRef: &gputaskv1.ConfigMapKeyRef{Name: "h100", Key: "profile.json"}}
	for _, tc := range []struct {
		name       string
		configMaps []*corev1.ConfigMap
		wantErr    string // empty: the profile is read
	}{
		{name: "read from the set's namespace", configMaps: []*corev1.ConfigMap{profileConfigMap(metav1.NamespaceDefault, "h100", map[string]string{"profile.json": h100JSON(t)})}},
		{name: "missing", wantErr: `ConfigMap "h100" of slo.engine.configMapRef not found in namespace default with the label gputask.io/engine-profile=true`},
		{name: "only in another tenant's namespace", configMaps: []*corev1.ConfigMap{profileConfigMap("other", "h100", map[string]string{"profile.json": h100JSON(t)})},
			wantErr: `ConfigMap "h100" of slo.engine.configMapRef not found in namespace default`},
		{name: "without the key", configMaps: []*corev1.ConfigMap{profileConfigMap(metav1.NamespaceDefault, "h100", map[string]string{"other.json": h100JSON(t)})},
			wantErr: `ConfigMap "h100" of slo.engine.configMapRef has no key "profile.json"`},
		{name: "not a profile", configMaps: []*corev1.ConfigMap{profileConfigMap(metav1.NamespaceDefault, "h100", map[string]string{"profile.json": `{"secret-looking": "s3cr3t"`})},
			wantErr: `key "profile.json" of ConfigMap "h100" of slo.engine.configMapRef is not an engine profile`},
		{name: "a profile without decode points", configMaps: []*corev1.ConfigMap{profileConfigMap(metav1.NamespaceDefault, "h100", map[string]string{"profile.json": `{"gpu":"x","decode":[],"prefill":[]}`})},
			wantErr: `key "profile.json" of ConfigMap "h100" of slo.engine.configMapRef is not an engine profile`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			set := engineSet("web", 2, ref)
			f.Add(set)
			for _, cm := range tc.configMaps {
				f.Add(cm)
			}
			f.scaleReplicas = 2
			f.readVLLM()
			c := f.newController(ctx)

			f.syncOK(ctx, c, "web")
			if tc.wantErr == "" {
				f.expectScale("web", 3)
			}
			f.expectStatus("web")
			f.CheckActions()
			got := f.lastStatus()
			if tc.wantErr == "" {
				if cp := got.Status.LastDecision.Capacity; cp == nil || cp.Source != gputaskv1.CapacityProfile || cp.SlotsPerTask != 159 {
					t.Errorf("capacity %+v, want 159 from the profile", cp)
				}
				return
			}
			assertCondition(t, got, gputaskv1.ConditionScalingActive, metav1.ConditionFalse, gputaskv1.ReasonEngineProfileUnavailable)
			for _, cond := range got.Status.Conditions {
				if cond.Type == gputaskv1.ConditionScalingActive && (!strings.Contains(cond.Message, tc.wantErr) || !strings.HasSuffix(cond.Message, "; holding at 2") || strings.Contains(cond.Message, "s3cr3t")) {
					t.Errorf("ScalingActive message %q, want %q and the count held", cond.Message, tc.wantErr)
				}
			}
			if d := got.Status.LastDecision; d.To != 2 || d.Reason != gputaskv1.ReasonEngineProfileUnavailable {
				t.Errorf("decision %d (%s), want held at 2 for the profile", d.To, d.Reason)
			}
			if events := f.events(); controllertest.CountEvents(events, "Warning EngineProfileUnavailable "+tc.wantErr) != 1 {
				t.Errorf("events %q, want one Warning naming it", events)
			}
		})
	}
}

// TestEngineProfileParsedOncePerVersion: the profile of a ConfigMap is
// parsed again only when the ConfigMap changes.
func TestEngineProfileParsedOncePerVersion(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	set := engineSet("web", 2, &gputaskv1.EngineSpec{ConfigMapRef: &gputaskv1.ConfigMapKeyRef{Name: "h100", Key: "profile.json"}})
	cm := profileConfigMap(metav1.NamespaceDefault, "h100", map[string]string{"profile.json": h100JSON(t)})
	f.Add(set, cm)
	f.readVLLM()
	c := f.newController(ctx)
	state := &setState{}
	first, err := c.profileOf(ctx, set, set.Spec.Autoscaling.Policy.SLO.Engine, state)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := c.profileOf(ctx, set, set.Spec.Autoscaling.Policy.SLO.Engine, state); again != first {
		t.Error("the same version of the ConfigMap was parsed again")
	}
	cm = cm.DeepCopy()
	cm.ResourceVersion = "2"
	cm.Data["profile.json"] = "{}"
	f.Update(cm)
	if _, err := c.profileOf(ctx, set, set.Spec.Autoscaling.Policy.SLO.Engine, state); err == nil {
		t.Error("a new version of the ConfigMap was not read")
	}
	// The embedded profiles are those the API's enum lists.
	if got, want := strings.Join(gpuprofile.Names(), ","), strings.Join(gputaskv1.EngineProfiles, ","); got != want {
		t.Errorf("embedded profiles %s, the API lists %s", got, want)
	}
}

// TestProfileChangeEnqueuesItsSets: a change of an engine profile's
// ConfigMap evaluates the sets of its namespace that read it, and no
// other; a resync enqueues nothing.
func TestProfileChangeEnqueuesItsSets(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	ref := &gputaskv1.EngineSpec{ConfigMapRef: &gputaskv1.ConfigMapKeyRef{Name: "h100", Key: "profile.json"}}
	reads := engineSet("reads", 2, ref)
	other := engineSet("other", 2, &gputaskv1.EngineSpec{ConfigMapRef: &gputaskv1.ConfigMapKeyRef{Name: "h200", Key: "profile.json"}})
	embedded := engineSet("embedded", 2, &gputaskv1.EngineSpec{Profile: "h100-llama-3.1-8b"})
	elsewhere := engineSet("elsewhere", 2, ref)
	elsewhere.Namespace = "tenant-b"
	f.Add(reads, other, embedded, elsewhere)
	c := f.newController(ctx)
	defer c.workqueue.ShutDown()

	cm := profileConfigMap(metav1.NamespaceDefault, "h100", map[string]string{"profile.json": "{}"})
	c.profileChanged(klog.Background(), cm, cm)
	if n := c.workqueue.Len(); n != 0 {
		t.Fatalf("a resync enqueued %d sets", n)
	}
	changed := cm.DeepCopy()
	changed.ResourceVersion = "2"
	c.profileChanged(klog.Background(), cm, changed)
	if n := c.workqueue.Len(); n != 1 {
		t.Fatalf("%d sets enqueued, want the one that reads default/h100", n)
	}
	if key, _ := c.workqueue.Get(); key.Name != "reads" || key.Namespace != metav1.NamespaceDefault {
		t.Errorf("enqueued %v, want default/reads", key)
	}
}
