package e2e

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/replay"
	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
	"github.com/gputask/gputask-controller/pkg/scaling"
	"github.com/gputask/gputask-controller/test/framework"
	"github.com/gputask/gputask-controller/test/kwok"
)

// The fidelity run: a short step surge served by workers of two slots that
// take kwok.SlowStartup to load, scaled by the Step policy (one task a
// step, and the fast path for bursts) every 5 s between 1 and 4 tasks.
const (
	fidelityInterval    = 5 * time.Second
	fidelityConcurrency = 2
	// fidelityStartup is the modelled start: kwok's slow stage, plus the
	// scheduling and the status write that show the task Ready.
	fidelityStartup = kwok.SlowStartup + time.Second
)

// fidelityTrace is a quiet start, a 30 s surge well above what the pool
// can serve, and a quiet end: one request every 10 s of 4 s, then two a
// second, then one every 10 s again.
func fidelityTrace() workload.Trace {
	var reqs []workload.Served
	add := func(from, to, every time.Duration) {
		for at := from; at < to; at += every {
			reqs = append(reqs, workload.Served{Arrival: at, Service: 4 * time.Second})
		}
	}
	add(0, 20*time.Second, 10*time.Second)
	add(20*time.Second, 50*time.Second, 500*time.Millisecond)
	add(50*time.Second, 100*time.Second, 10*time.Second)
	return workload.Trace{Requests: reqs}
}

// fidelitySet is the pool both runs scale: what createPool makes, read
// from url.
func fidelitySet(model, url string) *gputaskv1.GPUTaskSet {
	amount := intstr.FromInt32(1)
	return &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: poolName},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To[int32](1),
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{
				GPU: model, GPUAmount: &amount,
				Env: []corev1.EnvVar{{Name: kwok.FakeStartupEnv, Value: kwok.FakeStartupSlow}},
			}},
			Autoscaling: &gputaskv1.AutoscalingSpec{
				MinReplicas:                  ptr.To[int32](1),
				MaxReplicas:                  4,
				Interval:                     &gputaskv1.Duration{Duration: fidelityInterval},
				Metrics:                      []gputaskv1.MetricSpec{{Name: "backend-load", HTTP: &gputaskv1.HTTPSource{URL: url}}},
				Policy:                       gputaskv1.ScalingPolicy{Type: gputaskv1.StepPolicy, StepUp: ptr.To[int32](1)},
				ScaleDownStabilizationWindow: &gputaskv1.Duration{},
				Burst:                        &gputaskv1.BurstSpec{Window: &gputaskv1.Duration{Duration: 20 * time.Second}},
			},
		},
	}
}

// decision is a change of spec.replicas in interval k of the trace: made
// by the evaluation at the trace's start plus k intervals (the replay), or
// within the interval after it, on the load index of that instant (the
// controller, whose intervals run from the set's creation; see
// fidelityHarness.step).
type decision struct {
	k        int
	replicas int32
}

func (d decision) String() string { return fmt.Sprintf("%d@%d", d.replicas, d.k) }

// TestReplayIsTheController: the replay's figures are the product's. One
// trace is played twice: in virtual time by the replay's model of our
// policy, and in real time against the running controller, with kwok
// workers that load for kwok.SlowStartup and a load index computed by the
// replay's pool model from the real tasks (their readiness, draining and
// deletion; the model's busy workers marked gputask.io/busy on their task,
// as real workers mark themselves), held at the instants the replay
// evaluates at. Both runs must make the same scaling decisions, each in the
// same interval give or take one.
func TestReplayIsTheController(t *testing.T) {
	// Beside the others: each run has a namespace and GPU model of its
	// own, and compares that namespace's decisions alone.
	t.Parallel()
	ns := cp.NamespaceT(t)
	model := createGPUNodes(t, ns, 2, 2)
	rec := recordPool(t, ns)
	trace := fidelityTrace()

	// The controller's run. The load index reads 0 until the trace starts.
	h := newFidelityHarness(t, ns, rec, trace)
	srv := httptest.NewServer(h.index)
	t.Cleanup(srv.Close)
	set := fidelitySet(model, srv.URL)
	if _, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Create(context.Background(), set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The trace starts once the first worker serves, as the replay's pool
	// starts with its first worker Ready.
	rec.waitSetWithin(t, 2*time.Minute, "the first task Ready", func(s *gputaskv1.GPUTaskSet) bool { return s.Status.ReadyReplicas == 1 })
	t0 := h.start()
	end := t0.Add(trace.Duration() + 15*time.Second)
	h.run(t, end)

	// The replay's run of the same trace and set.
	virtual, burstMsg := replayDecisions(t, set, trace, t0, end)
	real, reasons := rec.decisionsSince(t0)
	t.Logf("decisions (replicas@interval), replay: %v; controller: %v (reasons %v)", virtual, real, reasons)
	t.Logf("controller's run: %s", h.summary())
	if len(virtual) < 3 || virtual[0].replicas != 4 {
		t.Fatalf("the replay made decisions %v, want a burst to 4 and the scale-in after it", virtual)
	}
	// The burst to 4 is capped at maxReplicas, so its reason is
	// TooManyReplicas; the scale-down the burst held shows it.
	if !slices.Contains(reasons, scaling.ReasonHeldDuringBurst) {
		t.Errorf("the controller's decisions %v show no %s", reasons, scaling.ReasonHeldDuringBurst)
	}
	if !strings.Contains(burstMsg, "a burst") {
		t.Errorf("the replay's scale-up said %q, want a burst", burstMsg)
	}
	sameDecisions(t, real, virtual)
}

// replayDecisions plays trace through the replay's model of set from t0 to
// end, one evaluation per interval, and returns the changes of the count
// it made and the message of the first.
func replayDecisions(t *testing.T, set *gputaskv1.GPUTaskSet, trace workload.Trace, t0, end time.Time) ([]decision, string) {
	t.Helper()
	ours, err := replay.NewOurs(set, sim.LoadDemand)
	if err != nil {
		t.Fatal(err)
	}
	s := replay.NewSim(sim.NewPool(trace, t0, fidelityConcurrency, fidelityStartup), ours)
	var virtual []decision
	var firstMsg string
	last := int32(1)
	for k := 1; !t0.Add(time.Duration(k) * fidelityInterval).After(end); k++ {
		if r := s.Step(t0.Add(time.Duration(k) * fidelityInterval)); r != last {
			if len(virtual) == 0 {
				firstMsg = ours.Last.Message
			}
			virtual = append(virtual, decision{k: k, replicas: r})
			last = r
		}
	}
	return virtual, firstMsg
}

// decisionsSince returns the changes of spec.replicas the recorder saw
// after the set was created, by the interval from t0 they were made in,
// and the decision reasons.
func (r *poolRecorder) decisionsSince(t0 time.Time) ([]decision, []string) {
	var real []decision
	steps, reasons := r.snapshot()
	for _, s := range steps[1:] {
		k := int(s.at.Sub(t0) / fidelityInterval)
		real = append(real, decision{k: k, replicas: s.replicas})
	}
	return real, reasons
}

// sameDecisions checks that the controller made the replay's decisions,
// each in the same interval give or take one.
func sameDecisions(t *testing.T, real, virtual []decision) {
	t.Helper()
	if len(real) != len(virtual) {
		t.Fatalf("the controller made %d decisions %v, the replay %d %v", len(real), real, len(virtual), virtual)
	}
	for i := range virtual {
		if real[i].replicas != virtual[i].replicas || abs(real[i].k-virtual[i].k) > 1 {
			t.Errorf("decision %d: controller %v, replay %v; want the same replicas within one interval", i, real[i], virtual[i])
		}
	}
}

func abs(x int) int { return max(x, -x) }

// fidelityHarness plays the trace in real time on a replay pool whose
// workers are the set's real tasks, and serves that pool's load index.
type fidelityHarness struct {
	ns    string
	rec   *poolRecorder
	index *sim.LoadIndexServer

	mu      sync.Mutex
	t0      time.Time
	indexed time.Time // the instant of the pool the load index shows
	pool    *sim.Pool
	trace   workload.Trace
	workers map[string]*sim.Worker
	busy    map[string]bool
	patches int
}

func newFidelityHarness(t *testing.T, ns string, rec *poolRecorder, trace workload.Trace) *fidelityHarness {
	return &fidelityHarness{
		ns: ns, rec: rec, trace: trace, index: sim.NewLoadIndexServer(sim.LoadDemand),
		workers: map[string]*sim.Worker{}, busy: map[string]bool{},
	}
}

// start starts the trace now, with the set's tasks as its first workers.
func (h *fidelityHarness) start() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.t0 = time.Now()
	h.pool = sim.NewPool(h.trace, h.t0, fidelityConcurrency, fidelityStartup)
	return h.t0
}

// run mirrors the tasks into the pool and the pool into the load index and
// the busy marks, every 100 ms until end.
func (h *fidelityHarness) run(t *testing.T, end time.Time) {
	t.Helper()
	for now := time.Now(); now.Before(end); now = time.Now() {
		h.step(t, now)
		time.Sleep(100 * time.Millisecond)
	}
}

func (h *fidelityHarness) step(t *testing.T, now time.Time) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	// Tasks that appeared, became Ready, were marked draining or went.
	live := map[string]bool{}
	for _, task := range h.rec.tasks(t) {
		if task.DeletionTimestamp != nil {
			continue
		}
		live[task.Name] = true
		w := h.workers[task.Name]
		if w == nil {
			w = h.pool.AddPending(1)[0]
			h.workers[task.Name] = w
		}
		if meta.IsStatusConditionTrue(task.Status.Conditions, gputaskv1.ConditionReady) {
			h.pool.MarkReady(w)
		}
		switch draining := gputaskv1.IsDraining(task); {
		case draining && !w.Draining:
			h.pool.Drain(w)
		case !draining && w.Draining:
			h.pool.Undrain(w)
		}
	}
	for name, w := range h.workers {
		if !live[name] {
			h.pool.Remove(w)
			delete(h.workers, name)
			delete(h.busy, name)
		}
	}
	// The requests up to now. The load index shows the pool at the last
	// instant of the replay's evaluations (t0 plus whole intervals), as a
	// scrape each interval would: the controller, whose evaluations fall
	// anywhere within an interval, reads what the replay reads at its
	// start, not the first requests of a burst that began a moment before.
	if at := h.t0.Add(now.Sub(h.t0).Truncate(fidelityInterval)); at.After(h.indexed) {
		h.advance(at)
		h.index.Update(h.pool)
		h.indexed = at
	}
	h.advance(now)
	// A worker marks its task busy while it serves, as the drain protocol
	// asks of real workers.
	for name, w := range h.workers {
		if w.Busy() == h.busy[name] {
			continue
		}
		value := "null"
		if w.Busy() {
			value = `"true"`
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, gputaskv1.AnnotationBusy, value)
		if _, err := cp.GPUTask.GputaskV1().GPUTasks(h.ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Logf("marking task %s busy=%v: %v", name, w.Busy(), err)
			continue
		}
		h.busy[name] = w.Busy()
		h.patches++
	}
}

// advance plays the trace up to to. A draining worker that falls idle
// stops the pool early: its busy mark goes in step, and the set controller
// deletes it.
func (h *fidelityHarness) advance(to time.Time) {
	for {
		if _, drainIdle := h.pool.Advance(to); !drainIdle {
			return
		}
	}
}

func (h *fidelityHarness) summary() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%d workers, %d busy-mark patches, %.3f GPU-hours", len(h.pool.AllWorkers()), h.patches, h.pool.GPUHours(h.pool.Now()))
	return b.String()
}

// TestReplayIsTheControllerForFloors: the schedule and forecast floors the
// replay plays are the controller's. A quiet trace is played twice, in
// virtual time by the replay and in real time against the controller, on a
// set that gains, as the trace starts, a scheduled window in force
// (minReplicas 3), or predictive pre-warming in Active mode over a history
// that asks for 3 tasks at every hour of the week. Before that, in Preview
// mode, the controller reports the forecast and acts on nothing. Both runs
// must make the same decisions, each in the same interval give or take one.
func TestReplayIsTheControllerForFloors(t *testing.T) {
	// Beside the others: each run has a namespace and GPU model of its
	// own, and compares that namespace's decisions alone.
	t.Parallel()
	const floor = 3
	tests := []struct {
		name string
		// floorOn turns the floor on in a set's autoscaling spec.
		floorOn func(*gputaskv1.AutoscalingSpec)
		// predictive seeds a learned history, and starts in Preview.
		predictive bool
		wantFrom   string
	}{{
		name: "schedule",
		floorOn: func(a *gputaskv1.AutoscalingSpec) {
			a.Schedules = []gputaskv1.ScheduleSpec{{Name: "always", Start: "* * * * *", Duration: gputaskv1.Duration{Duration: time.Hour}, MinReplicas: floor}}
		},
		wantFrom: "of schedule always",
	}, {
		name:       "predictive",
		predictive: true,
		floorOn: func(a *gputaskv1.AutoscalingSpec) {
			a.Predictive = &gputaskv1.PredictiveSpec{Mode: gputaskv1.PredictiveActive, LeadTime: &gputaskv1.Duration{Duration: time.Minute}}
		},
		wantFrom: "of the predictive forecast",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := cp.NamespaceT(t)
			model := createGPUNodes(t, ns, 2, 2)
			rec := recordPool(t, ns)
			trace := workload.Trace{Requests: []workload.Served{
				{Arrival: 0, Service: 4 * time.Second}, {Arrival: 20 * time.Second, Service: 4 * time.Second}, {Arrival: 40 * time.Second, Service: 4 * time.Second},
			}}
			h := newFidelityHarness(t, ns, rec, trace)
			srv := httptest.NewServer(h.index)
			t.Cleanup(srv.Close)
			set := fidelitySet(model, srv.URL)
			set.Spec.Autoscaling.Burst = nil
			ctx := context.Background()
			sets := cp.GPUTask.GputaskV1().GPUTaskSets(ns)

			// A history that asks for the floor at every quarter hour of
			// the week, learned on the days before today.
			var history scaling.History
			week := time.Now().Add(-8 * 24 * time.Hour)
			for i := range 7 * 96 {
				history.Learn(week.Add(time.Duration(i)*15*time.Minute), floor)
			}
			if tc.predictive {
				set.Spec.Autoscaling.Predictive = &gputaskv1.PredictiveSpec{Mode: gputaskv1.PredictivePreview, LeadTime: &gputaskv1.Duration{Duration: time.Minute}}
			}
			if _, err := sets.Create(ctx, set, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if tc.predictive {
				// The history a new leader would find in the status. The
				// autoscaler may apply its own status from a cache that did
				// not see the write yet, as no other writer exists in a
				// running cluster; so the history is written again until the
				// status keeps it. Preview: the forecast is reported, nothing
				// is acted on.
				writes := 0
				framework.Poll(t, time.Minute, "the history kept and the forecast previewed", func(ctx context.Context) (bool, string) {
					cur, err := sets.Get(ctx, poolName, metav1.GetOptions{})
					if err != nil {
						return false, err.Error()
					}
					if p := cur.Status.Predictive; p != nil && ptr.Deref(p.ForecastReplicas, 0) == floor && strings.Contains(p.Message, "preview: not acting on it") {
						return true, ""
					}
					kept := scaling.History{}
					if p := cur.Status.Predictive; p != nil {
						kept = scaling.DecodeHistory(p.History)
					}
					if _, ok := kept.Forecast(time.Now()); !ok {
						cur.Status.Predictive = &gputaskv1.PredictiveStatus{History: history.Encode()}
						if _, err := sets.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
							return false, err.Error()
						}
						writes++
					}
					return false, describeStatus(cur)
				})
				t.Logf("the history written %d times before the status kept it", writes)
			}
			rec.waitSetWithin(t, 2*time.Minute, "the first task Ready", func(s *gputaskv1.GPUTaskSet) bool { return s.Status.ReadyReplicas == 1 })
			if steps, _ := rec.snapshot(); len(steps) != 1 {
				t.Fatalf("spec.replicas changed before the floor was on: %v", steps)
			}

			// The floor goes on as the trace starts.
			t0 := h.start()
			framework.Poll(t, 30*time.Second, "the floor turned on", func(ctx context.Context) (bool, string) {
				cur, err := sets.Get(ctx, poolName, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				tc.floorOn(cur.Spec.Autoscaling)
				if _, err := sets.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
					return false, err.Error()
				}
				return true, ""
			})
			end := t0.Add(trace.Duration() + 15*time.Second)
			h.run(t, end)

			// The replay's run: the floor on from the start, the same
			// history in the status.
			replaySet := set.DeepCopy()
			tc.floorOn(replaySet.Spec.Autoscaling)
			if tc.predictive {
				replaySet.Status.Predictive = &gputaskv1.PredictiveStatus{History: history.Encode()}
			}
			virtual, firstMsg := replayDecisions(t, replaySet, trace, t0, end)
			real, reasons := rec.decisionsSince(t0)
			t.Logf("decisions (replicas@interval), replay: %v (%q); controller: %v (reasons %v)", virtual, firstMsg, real, reasons)
			final, err := sets.Get(ctx, poolName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if d := final.Status.LastDecision; d == nil || !strings.Contains(d.Message, tc.wantFrom) {
				t.Errorf("the controller's last decision %+v, want the floor %s", d, tc.wantFrom)
			}
			if len(virtual) == 0 || virtual[0].replicas != floor || !strings.Contains(firstMsg, tc.wantFrom) {
				t.Fatalf("the replay made decisions %v (%q), want the floor of %d %s first", virtual, firstMsg, floor, tc.wantFrom)
			}
			sameDecisions(t, real, virtual)
		})
	}
}
