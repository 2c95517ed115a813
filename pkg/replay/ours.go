package replay

import (
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/scaling"
	"github.com/gputask/gputask-controller/pkg/setplan"
)

// Ours is the project's own policy. Each Step is what one interval does on
// a cluster: the autoscaler's evaluation (scaling.CountStarting and
// scaling.Decide, as pkg/autoscaler's evaluate calls them) and then the set
// controller's sync (setplan.Make: victim choice, minTaskAge, draining
// and taking drains back). Nothing of the policy is decided here; this type
// only turns the modelled workers into tasks and keeps the set as the two
// controllers leave it between intervals: spec.replicas and the status
// fields they read back (heldBackReplicas, consecutiveFailures).
type Ours struct {
	set  *gputaskv1.GPUTaskSet
	load sim.LoadKind

	// Initial is the count the pool starts with; 0 means minReplicas.
	Initial int32

	// lastStep and recs are what the autoscaler remembers of the set:
	// the exact time of its last step and status.recommendations.
	lastStep time.Time
	recs     []gputaskv1.Recommendation
	// queue is what the SLO policy carries from one evaluation to the
	// next (Decision.Queue), kept in the autoscaler's memory.
	queue scaling.QueueState
	wake  time.Time

	// engine is what the SLO policy sizes by when the set's slo.engine
	// names a profile (scaling.ProfileEngine, as the autoscaler builds
	// it); nil without slo.engine.
	engine *scaling.Engine

	// Label names the run in reports; empty means "ours".
	Label string
	// log records every decision; nil records none.
	log *decisionLog
	// Last is the last decision.
	Last scaling.Decision
}

// NewOurs scales with the set's autoscaling block, reading the modelled
// backend's load index of kind load for each of its metrics.
func NewOurs(set *gputaskv1.GPUTaskSet, load sim.LoadKind) (*Ours, error) {
	if set.Spec.Autoscaling == nil || len(set.Spec.Autoscaling.Metrics) == 0 {
		return nil, errors.New("the GPUTaskSet has no spec.autoscaling.metrics")
	}
	if errs := gputaskv1.ValidateTaskSetSpec(&set.Spec); len(errs) > 0 {
		return nil, fmt.Errorf("invalid GPUTaskSet spec: %w", errs.ToAggregate())
	}
	engine, err := engineOf(set)
	if err != nil {
		return nil, err
	}
	return &Ours{set: set.DeepCopy(), load: load, engine: engine}, nil
}

// engineOf is the engine the SLO policy sizes the set by, as
// pkg/autoscaler's engineOf finds it: the profile slo.engine names, or nil
// without slo.engine. A profile in a ConfigMap cannot be replayed: there
// is no cluster to read it from.
func engineOf(set *gputaskv1.GPUTaskSet) (*scaling.Engine, error) {
	as := set.Spec.Autoscaling
	if as.Policy.Type != gputaskv1.SLOPolicy || as.Policy.SLO == nil || as.Policy.SLO.Engine == nil {
		return nil, nil
	}
	e := as.Policy.SLO.Engine
	if e.Profile == "" {
		return nil, errors.New("slo.engine.configMapRef: the replay reads no ConfigMaps; name a built-in profile in slo.engine.profile")
	}
	p, err := scaling.LookupProfile(e.Profile)
	if err != nil {
		return nil, err
	}
	return scaling.ProfileEngine(p), nil
}

// Name implements sim.Policy.
func (o *Ours) Name() string {
	if o.Label != "" {
		return o.Label
	}
	return PolicyOurs
}

// Start begins with Initial Ready workers, within [minReplicas,
// maxReplicas], as a set that has run at that count: its status holds a
// recommendation of it, as a new HPA records its current count first
// (recordInitialRecommendation), so that the first evaluation's scale-down
// is stabilized like every later one.
func (o *Ours) Start(p *sim.Pool) {
	spec := o.set.Spec.Autoscaling
	replicas := min(max(o.Initial, ptrOr(spec.MinReplicas, scaling.DefaultMinReplicas)), spec.MaxReplicas)
	o.set.Spec.Replicas = &replicas
	o.set.CreationTimestamp = metav1.NewTime(p.Now())
	o.recs = []gputaskv1.Recommendation{{Time: metav1.NewTime(p.Now()), Replicas: replicas}}
	// The GPUTask controller marks a busy task's pod do-not-disrupt.
	p.SetDoNotDisrupt(true)
	p.AddReady(int(replicas))
}

// Period implements sim.Policy: autoscaling.interval.
func (o *Ours) Period() time.Duration { return scaling.IntervalOf(o.set.Spec.Autoscaling) }

// Replicas implements sim.Policy: spec.replicas.
func (o *Ours) Replicas() int32 { return ptrOr(o.set.Spec.Replicas, 1) }

// Wake implements sim.Policy: when a protected task comes of age or a drain
// times out, the set controller syncs again.
func (o *Ours) Wake() time.Time { return o.wake }

// Step implements sim.Policy: one evaluation, then the set controller's sync.
func (o *Ours) Step(p *sim.Pool) {
	obs := p.Metrics()
	o.EvaluateRoles(p.Now(), obs.LoadIndex(o.load), obs, o.startedTasks(p))
	o.Sync(p)
}

// startedTasks are the tasks as the autoscaler sees them, where the
// workers the pool began with Ready show the start each of them took
// before the replay: a running set has measured its starts, and the SLO
// policy looks ahead by them (scaling.StartupOf). Only the tasks' creation
// and Ready times tell it; the pool's start-up model never does.
func (o *Ours) startedTasks(p *sim.Pool) []*gputaskv1.GPUTask {
	tasks := o.Tasks(p)
	for i, w := range p.Workers() {
		if w.StartedBefore > 0 {
			tasks[i].CreationTimestamp = metav1.NewTime(w.Created.Add(-w.StartedBefore))
		}
	}
	return tasks
}

// Evaluate is the autoscaler's evaluation at now, with the load index
// value read for every metric and the set's tasks as the task lister
// shows them. It updates spec.replicas and the autoscaler's status, and
// returns the decision.
func (o *Ours) Evaluate(now time.Time, value float64, tasks []*gputaskv1.GPUTask) scaling.Decision {
	return o.EvaluateRoles(now, value, sim.Observation{}, tasks)
}

// RoleValue is what a metric of role reads from the modelled backend: the
// pool's request rates and counts for the SLO policy's roles, the load
// index value for a metric without one; WaitPercentile and TTFTPercentile
// are the wait and the TTFT in seconds at percentile, InterTokenLatency
// the mean gap between tokens in seconds, PromptTokens and
// GenerationTokens tokens per second, KVCacheUsage the share of the KV
// cache in use. ok is false where the source has no value, as a
// Prometheus query gives NaN or no series: a percentile while no request
// got a slot (or its first token) within WaitWindow, the ITL while no
// request finished decoding within RateWindow, the KV cache with no
// serving worker.
func RoleValue(role gputaskv1.MetricRole, value float64, obs sim.Observation, percentile float64) (v float64, ok bool) {
	switch role {
	case "":
		return value, true
	case gputaskv1.RoleArrivals:
		return obs.Arrivals, true
	case gputaskv1.RoleCompletions:
		return obs.Completions, true
	case gputaskv1.RoleRunning:
		return float64(obs.Running), true
	case gputaskv1.RoleWaiting:
		return float64(obs.Waiting), true
	case gputaskv1.RoleWaitPercentile:
		return obs.WaitPercentile(percentile)
	case gputaskv1.RoleTTFTPercentile:
		return obs.TTFTPercentile(percentile)
	case gputaskv1.RoleInterTokenLatency:
		return obs.InterTokenLatency()
	case gputaskv1.RolePromptTokens:
		return obs.PromptTokens, true
	case gputaskv1.RoleGenerationTokens:
		return obs.GenerationTokens, true
	case gputaskv1.RoleKVCacheUsage:
		return obs.KVCacheUsage, obs.KVCacheKnown
	case gputaskv1.RoleGenerationTokensMedian:
		return obs.GenerationTokensMedian()
	case gputaskv1.RolePromptTokensMedian:
		return obs.PromptTokensMedian()
	}
	return 0, false
}

// noValue is why a role read no value (RoleValue), as the autoscaler
// reports a query that gives NaN or nothing.
func noValue(role gputaskv1.MetricRole) error {
	switch role {
	case gputaskv1.RoleWaitPercentile:
		return fmt.Errorf("no request got a slot within %v: no %s", sim.WaitWindow, role)
	case gputaskv1.RoleTTFTPercentile:
		return fmt.Errorf("no request got its first token within %v: no %s", sim.WaitWindow, role)
	case gputaskv1.RoleInterTokenLatency:
		return fmt.Errorf("no request finished decoding within %v: no %s", sim.RateWindow, role)
	case gputaskv1.RoleKVCacheUsage:
		return fmt.Errorf("no worker serves: no %s", role)
	case gputaskv1.RoleGenerationTokensMedian, gputaskv1.RolePromptTokensMedian:
		return fmt.Errorf("no request finished within %v: no %s", sim.WaitWindow, role)
	}
	return fmt.Errorf("no value for %s", role)
}

// EvaluateRoles is Evaluate where the metrics of the SLO policy read
// their role's value from obs (RoleValue). The start-up time it looks
// ahead by is the one the tasks show (scaling.StartupOf), as the
// autoscaler measures it, and the engine it sizes by the one slo.engine
// names, as the autoscaler builds it.
func (o *Ours) EvaluateRoles(now time.Time, value float64, obs sim.Observation, tasks []*gputaskv1.GPUTask) scaling.Decision {
	spec := o.set.Spec.Autoscaling
	current := o.Replicas()
	// What pkg/autoscaler's evaluate does, in its order: the readings, the
	// last step, the tasks on their way, the inputs, the decision.
	readings := make([]scaling.MetricInput, len(spec.Metrics))
	percentile := scaling.SLOOf(spec.Policy.SLO).Percentile
	for i, m := range spec.Metrics {
		readings[i] = scaling.MetricFor(m)
		v, ok := RoleValue(m.Role, value, obs, percentile)
		readings[i].Value = v
		if !ok {
			readings[i].Err = noValue(m.Role)
		}
	}
	asked := maxTime(o.lastStep, o.set.CreationTimestamp.Time)
	st := scaling.CountStarting(scaling.TaskStarts(tasks), current, asked, scaling.StartupTimeoutOf(spec), now)
	in := scaling.InputsFor(o.set, now, readings, nil, o.recs)
	in.LastScaleTime, in.Starting = o.lastStep, st.Starting
	in.Startup = scaling.StartupOf(tasks, scaling.StartupTimeoutOf(spec))
	in.StartingFor = st.ServeFor(in.Startup, scaling.SlowestStartupOf(tasks, scaling.StartupTimeoutOf(spec)))
	in.Queue = o.queue
	if o.engine != nil {
		// A copy an evaluation cannot change for the next.
		e := *o.engine
		in.Engine = &e
	}
	d := scaling.Decide(in)
	o.log.write(o.Name(), o.set.CreationTimestamp.Time, now, in, d)
	o.queue = d.Queue
	o.recs = d.Recommendations
	o.set.Status.ConsecutiveFailures = d.ConsecutiveFailures
	o.set.Status.Predictive = scaling.PredictiveStatusOf(o.set, d)
	o.set.Status.BurstUntil = nil
	if d.BurstUntil.After(now) {
		o.set.Status.BurstUntil = &metav1.Time{Time: d.BurstUntil}
	}
	if d.Desired != current && !spec.DryRun {
		desired := d.Desired
		o.set.Spec.Replicas, o.lastStep = &desired, now
	}
	o.Last = d
	return d
}

// Sync is the set controller's sync: it moves the workers towards
// spec.replicas with setplan.Make and carries the plan out.
func (o *Ours) Sync(p *sim.Pool) {
	now := p.Now()
	plan := setplan.Make(o.Tasks(p), int(o.Replicas()), nil, setplan.DrainTimeout(o.set), setplan.MinTaskAge(o.set), now, setplan.DefaultBurstReplicas)
	// The workers are looked up afresh: the pool replaces a worker that
	// consolidation evicted, as the GPUTask controller creates a new pod.
	byName := make(map[string]*sim.Worker, len(p.Workers()))
	for _, w := range p.Workers() {
		byName[w.Name] = w
	}
	for _, t := range plan.Undrain {
		p.Undrain(byName[t.Name])
	}
	for _, t := range plan.Drain {
		p.Drain(byName[t.Name])
	}
	for _, t := range plan.Delete {
		p.Delete(byName[t.Name])
	}
	p.Add(plan.Create)
	o.set.Status.HeldBackReplicas = plan.HeldBack
	o.wake = time.Time{}
	if plan.RetryAfter > 0 {
		o.wake = now.Add(plan.RetryAfter)
	}
}

// Tasks shows the live workers as the set's GPUTasks: Pending while their
// node launches, then Running on it, Ready once the model is loaded,
// gputask.io/busy while a request is in flight, and gputask.io/draining
// once scale-in chose a busy one.
func (o *Ours) Tasks(p *sim.Pool) []*gputaskv1.GPUTask {
	now := p.Now()
	tasks := make([]*gputaskv1.GPUTask, 0, len(p.Workers()))
	for _, w := range p.Workers() {
		tasks = append(tasks, sim.TaskOf(w, now))
	}
	return tasks
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Sim is our policy on a modelled pool, driven one interval at a time, so
// that a test can compare each step with what the real controllers do.
type Sim struct {
	Pool *sim.Pool
	Ours *Ours
}

// NewSim starts our policy on a pool; the pool's first workers are Ready
// at its start.
func NewSim(p *sim.Pool, ours *Ours) *Sim {
	ours.Start(p)
	return &Sim{Pool: p, Ours: ours}
}

// Step plays the trace up to now, letting the set controller act whenever
// a drain ends or a protected task comes of age, then evaluates once and
// syncs the set. It returns the replica count decided this interval.
func (s *Sim) Step(now time.Time) int32 {
	s.advance(now)
	s.Ours.Step(s.Pool)
	return s.Ours.Replicas()
}

// Advance plays the trace up to now without an evaluation, the set
// controller acting as in Step: what the backend has done by the time
// something other than the autoscaler looks at it.
func (s *Sim) Advance(now time.Time) { s.advance(now) }

// LoadIndex is what the modelled backend reports now.
func (s *Sim) LoadIndex() float64 { return s.Pool.Observe().LoadIndex(s.Ours.load) }

func (s *Sim) advance(to time.Time) {
	sim.PlayUntil(s.Pool, s.Ours, to, func(f func(*sim.Pool)) { f(s.Pool) })
}
