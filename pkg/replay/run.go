package replay

import (
	"embed"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"sigs.k8s.io/yaml"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/replay/baseline"
	"github.com/gputask/gputask-controller/pkg/replay/report"
	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
	"github.com/gputask/gputask-controller/pkg/scaling"
)

// PolicyOurs is our policy's name, as --policies takes it; the baselines'
// are in package baseline.
const PolicyOurs = "ours"

// AllPolicies are every policy a run plays unless told which, in the
// order of the table.
var AllPolicies = []string{PolicyOurs, baseline.PolicyHPA, baseline.PolicyHPADefault, PolicyHPABest, PolicyHPABestOne, baseline.PolicyKEDA, baseline.PolicyKEDAQueue, baseline.PolicySeed, baseline.PolicyStatic, baseline.PolicyOracle, baseline.PolicyOracleSLO}

// ExtraPolicies are played only where --policies names them: oracle-lag
// and oracle-lag-drawn each replay a trace about 30 times after
// oracle-slo's search, as much again as every other row together.
var ExtraPolicies = []string{baseline.PolicyOracleLag, baseline.PolicyOracleLagDrawn}

// ParsePolicies reads --policies.
func ParsePolicies(s string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.Contains(AllPolicies, name) && !slices.Contains(ExtraPolicies, name) {
			return nil, fmt.Errorf("unknown policy %q: want some of %s", name, strings.Join(slices.Concat(AllPolicies, ExtraPolicies), ","))
		}
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no policy given")
	}
	return out, nil
}

//go:embed inference-pool.yaml
var defaultSetYAML []byte

//go:embed variants/*.yaml
var variantFiles embed.FS

// Variant is one more run of ours, reported as "ours+Name", with the
// autoscaling block of its own set.
type Variant struct {
	Name string
	Set  *gputaskv1.GPUTaskSet
	// Builtin is set for a variant that --variant names without a file:
	// its SLO policy's slots follow the workers' concurrency.
	Builtin bool
}

// BuiltinVariants are the variants that --variant names without a file:
// the inference pool with burst, predictive or a scheduled floor (each on
// the load index), scaled to a wait SLO (the default set), to TTFT and
// ITL objectives with the H100 engine profile on vLLM's eleven metrics
// (slo-engine, for --engine h100-llama-3.1-8b), or on a load index target
// of 0.7 (proportional).
var BuiltinVariants = []string{"burst", "predictive", "schedule", "slo", "slo-engine", "proportional"}

// ParseVariant reads a --variant value: a built-in name, or NAME=FILE for a
// GPUTaskSet of one's own.
func ParseVariant(v string) (Variant, error) {
	name, path, withFile := strings.Cut(v, "=")
	if name == "" || strings.ContainsAny(name, " ,") {
		return Variant{}, fmt.Errorf("variant %q: want a name of %s, or NAME=FILE", v, strings.Join(BuiltinVariants, ", "))
	}
	if withFile {
		set, err := LoadSet(path)
		if err != nil {
			return Variant{}, fmt.Errorf("variant %s: %w", name, err)
		}
		return Variant{Name: name, Set: set}, nil
	}
	b, err := variantFiles.ReadFile("variants/" + name + ".yaml")
	if err != nil {
		return Variant{}, fmt.Errorf("unknown variant %q: want one of %s, or NAME=FILE", name, strings.Join(BuiltinVariants, ", "))
	}
	set, err := ParseSet(b)
	if err != nil {
		return Variant{}, fmt.Errorf("the built-in variant %s is invalid: %w", name, err)
	}
	return Variant{Name: name, Set: set, Builtin: true}, nil
}

// DefaultSet is the inference pool ours scales when --set is not given.
func DefaultSet() *gputaskv1.GPUTaskSet {
	set, err := ParseSet(defaultSetYAML)
	if err != nil {
		panic(fmt.Sprintf("the embedded default GPUTaskSet is invalid: %v", err))
	}
	return set
}

// LoadSet reads a GPUTaskSet from a YAML file.
func LoadSet(path string) (*gputaskv1.GPUTaskSet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the GPUTaskSet: %w", err)
	}
	set, err := ParseSet(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return set, nil
}

// ParseSet decodes a GPUTaskSet with an autoscaling block and validates it
// as the controllers do.
func ParseSet(b []byte) (*gputaskv1.GPUTaskSet, error) {
	var set gputaskv1.GPUTaskSet
	if err := yaml.UnmarshalStrict(b, &set); err != nil {
		return nil, fmt.Errorf("decoding the GPUTaskSet: %w", err)
	}
	if set.Kind != "" && set.Kind != "GPUTaskSet" {
		return nil, fmt.Errorf("kind is %q, want GPUTaskSet", set.Kind)
	}
	if set.Spec.Autoscaling == nil {
		return nil, errors.New("the GPUTaskSet has no spec.autoscaling")
	}
	if len(set.Spec.Autoscaling.Metrics) == 0 {
		return nil, errors.New("the GPUTaskSet has no spec.autoscaling.metrics")
	}
	if errs := gputaskv1.ValidateTaskSetSpec(&set.Spec); len(errs) > 0 {
		return nil, fmt.Errorf("invalid GPUTaskSet: %w", errs.ToAggregate())
	}
	return &set, nil
}

// Config is one replay: the workers, the load index and the policies.
type Config struct {
	Concurrency int
	// Startup is a worker's start-up, or its median when StartupSigma is
	// above 0: then each worker's is drawn from a log-normal, never below
	// StartupFloor, seeded by StartupSeed (sim.StartupModel).
	Startup      time.Duration
	StartupSigma float64
	StartupFloor time.Duration
	StartupSeed  uint64
	// Grace is the pods' termination grace period (see sim.Pool.Delete); 0
	// kills a deleted pod with its requests at once.
	Grace time.Duration
	Load  sim.LoadKind
	// SLO is the wait a request should not exceed, SLOTTFT its time to
	// first token and SLOITL its mean gap between tokens, each at
	// SLOPercentile (0 means 95) of the requests; a zero target is not
	// stated, and with none stated the wait's is 10 s.
	SLO, SLOTTFT, SLOITL time.Duration
	SLOPercentile        float64
	// Set gives ours its autoscaling block, and the others their bounds
	// and target.
	Set *gputaskv1.GPUTaskSet
	// HPATarget overrides the target of hpa and keda; 0 derives it from
	// the set: its metric target (Proportional) or the middle of its
	// thresholds (Step).
	HPATarget float64
	// HPAAverageValue gives hpa an averageValue target instead of a value
	// target.
	HPAAverageValue bool
	// KEDAValue gives keda metricType Value instead of KEDA's default,
	// AverageValue.
	KEDAValue bool
	// Scrape puts a Prometheus scrape of that interval in front of every
	// row's metrics (sim.Pool.SetScrape); 0 reads them fresh.
	Scrape time.Duration
	// HPABehavior is spec.behavior of hpa and of the HPA keda creates;
	// nil means GPUServingBehavior. hpa-default has none.
	HPABehavior *autoscalingv2.HorizontalPodAutoscalerBehavior
	Policies    []string
	// Nodes places the workers on nodes and measures node-hours
	// (sim.Pool.SetNodes); nil models no nodes.
	Nodes *sim.NodeModel
	// DeploymentVictims is the Deployment rows' scale-in order; empty
	// means the ReplicaSet controller's.
	DeploymentVictims sim.DeploymentVictims
	// Batched serves requests as a batching server does, at this
	// inter-token latency (sim.Pool.SetBatched); nil gives each request its
	// fixed Service.
	Batched *sim.ITL
	// Engine serves requests with the engine model (sim.Pool.SetEngine); it
	// takes precedence over Batched.
	Engine *sim.EngineServing
	// Variants are more runs of ours, after the policies.
	Variants []Variant
	// SampleEvery is the time between samples of the series; 0 picks one
	// that gives about 2000 samples.
	SampleEvery time.Duration
	// Limit is how long the replay runs past the last arrival before the
	// requests still waiting count as failed; 0 means 6 hours.
	Limit time.Duration
	// Start is the virtual time of the first arrival; zero means Monday
	// 2026-01-05 00:00 UTC.
	Start time.Time
	// Name labels the report.
	Name string
	// Decisions, when not nil, gets every evaluation of ours and of its
	// variants, a line of JSON each (DecisionRecord).
	Decisions io.Writer

	// hpaBest are the hpa-best and hpa-best-one rows of the trace, once
	// searched over the run's traces.
	hpaBest *[2]sim.Result
}

// DefaultHPATarget is the load index target of hpa and keda beside a set
// that has none: the inference pool's target before the SLO policy.
const DefaultHPATarget = 0.7

// Target is the load index value hpa and keda aim for.
func (c Config) Target() float64 {
	if c.HPATarget > 0 {
		return c.HPATarget
	}
	spec := c.Set.Spec.Autoscaling
	if spec.Policy.Type == gputaskv1.SLOPolicy {
		// An SLO set has no load index target; the rows that need one
		// play the inference pool's.
		return DefaultHPATarget
	}
	m := scaling.MetricFor(spec.Metrics[0])
	if spec.Policy.Type == gputaskv1.ProportionalPolicy {
		if m.Target <= 0 {
			return 1
		}
		return m.Target
	}
	return (m.UpThreshold + m.DownThreshold) / 2
}

// withDefaults checks the config and fills what it leaves out.
func (c Config) withDefaults() (Config, error) {
	if c.Concurrency < 1 {
		return c, fmt.Errorf("concurrency must be at least 1, got %d", c.Concurrency)
	}
	if c.Startup < 0 || c.StartupSigma < 0 || c.StartupFloor < 0 {
		return c, fmt.Errorf("startup must not be negative, got %v", c.StartupModel())
	}
	if c.Scrape < 0 {
		return c, fmt.Errorf("scrape interval must not be negative, got %v", c.Scrape)
	}
	if c.Grace < 0 {
		return c, fmt.Errorf("grace must not be negative, got %v", c.Grace)
	}
	if c.Nodes != nil {
		if err := c.Nodes.Validate(); err != nil {
			return c, err
		}
	}
	if c.DeploymentVictims != "" {
		if _, err := sim.ParseDeploymentVictims(string(c.DeploymentVictims)); err != nil {
			return c, err
		}
	}
	// The embedded sets are sized for the workers they are played on; a
	// set one gave must agree with them.
	if c.Set == nil {
		c.Set = withSlots(DefaultSet(), c.Concurrency, c.Engine != nil)
	}
	if err := checkCapacity("the set", c.Set, c.Concurrency, c.Engine != nil); err != nil {
		return c, err
	}
	c.Variants = slices.Clone(c.Variants)
	for i, v := range c.Variants {
		if v.Builtin {
			c.Variants[i].Set = withSlots(v.Set, c.Concurrency, c.Engine != nil)
		}
		if err := checkCapacity("variant "+v.Name, c.Variants[i].Set, c.Concurrency, c.Engine != nil); err != nil {
			return c, err
		}
	}
	if c.Load == "" {
		c.Load = sim.LoadDemand
	}
	slo := c.Targets()
	if err := slo.Validate(); err != nil {
		return c, err
	}
	slo = slo.WithDefaults()
	c.SLO, c.SLOTTFT, c.SLOITL, c.SLOPercentile = slo.Wait, slo.TTFT, slo.ITL, slo.Percentile
	if len(c.Policies) == 0 {
		c.Policies = AllPolicies
	}
	if c.Limit <= 0 {
		c.Limit = 6 * time.Hour
	}
	if c.Start.IsZero() {
		c.Start = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	}
	return c, nil
}

// defaultSampleEvery gives about 2000 samples of tr.
func defaultSampleEvery(tr workload.Trace) time.Duration {
	return max(tr.Duration()/2000, 10*time.Second).Round(time.Second)
}

func (c Config) playOptions() sim.PlayOptions {
	return sim.PlayOptions{SampleEvery: c.SampleEvery, Limit: c.Limit, Load: c.Load, SLO: c.Targets()}
}

// checkCapacity reports a set whose capacity setting disagrees with the
// workers it scales: an SLO policy sized for slotsPerTask requests a task
// when each worker serves concurrency would ask for the wrong count on
// every trace, and no cluster would tell the two apart.
func checkCapacity(what string, set *gputaskv1.GPUTaskSet, concurrency int, engine bool) error {
	spec := set.Spec.Autoscaling
	if spec == nil || spec.Policy.Type != gputaskv1.SLOPolicy || spec.Policy.SLO == nil {
		return nil
	}
	if engine && engineSized(set) {
		return nil
	}
	if slots := spec.Policy.SLO.SlotsPerTask; int(slots) != concurrency {
		return fmt.Errorf("%s has policy.slo.slotsPerTask %d but each worker serves %d requests at once (--concurrency): set them alike", what, slots, concurrency)
	}
	return nil
}

// engineSized says whether set's SLO policy sizes a task by its engine's
// capacity (slo.engine without slotsPerTask): on workers that run the
// engine model, it is the engine that says how many requests a worker
// serves within the ITL objective, not --concurrency.
func engineSized(set *gputaskv1.GPUTaskSet) bool {
	slo := set.Spec.Autoscaling.Policy.SLO
	return slo.Engine != nil && slo.SlotsPerTask == 0
}

// withSlots is set with its SLO policy sized for workers of concurrency
// slots, unless engine (the workers run the engine model) and the set
// sizes its tasks by the engine's capacity.
func withSlots(set *gputaskv1.GPUTaskSet, concurrency int, engine bool) *gputaskv1.GPUTaskSet {
	spec := set.Spec.Autoscaling
	if spec == nil || spec.Policy.SLO == nil || (engine && engineSized(set)) {
		return set
	}
	set = set.DeepCopy()
	set.Spec.Autoscaling.Policy.SLO.SlotsPerTask = int32(concurrency)
	return set
}

// StartupModel is how long each worker takes to start.
func (c Config) StartupModel() sim.StartupModel {
	return sim.StartupModel{Median: c.Startup, Sigma: c.StartupSigma, Floor: c.StartupFloor}
}

// Targets are the SLO's targets every row is measured against.
func (c Config) Targets() sim.SLOTargets {
	return sim.SLOTargets{Wait: c.SLO, TTFT: c.SLOTTFT, ITL: c.SLOITL, Percentile: c.SLOPercentile}
}

// Run replays tr under every policy of the config. hpa-best, unless
// RunTraces searched its target over several traces, is searched on tr.
func Run(tr workload.Trace, c Config) (report.Report, error) {
	c, err := c.withDefaults()
	if err != nil {
		return report.Report{}, err
	}
	if err := c.checkServing(tr); err != nil {
		return report.Report{}, err
	}
	if c.SampleEvery <= 0 {
		c.SampleEvery = defaultSampleEvery(tr)
	}
	if (slices.Contains(c.Policies, PolicyHPABest) || slices.Contains(c.Policies, PolicyHPABestOne)) && c.hpaBest == nil {
		best, err := SearchHPATarget([]NamedTrace{{c.Name, tr}}, c)
		if err != nil {
			return report.Report{}, err
		}
		perTrace, one := best.rowsFor(0)
		c.hpaBest = &[2]sim.Result{perTrace, one}
	}
	rep := report.Report{
		Trace: c.Name, Requests: len(tr.Requests), Concurrency: c.Concurrency,
		Startup: c.StartupModel().String(), Load: c.Load, SLO: c.Targets().String(), SLOTargets: c.Targets(), Nodes: c.Nodes,
		Series: map[string][]sim.Sample{},
	}
	// oracle-slo's search, which oracle-lag and oracle-lag-drawn play late
	// too, runs once.
	var counts []int32
	schedule := func() []int32 {
		if counts == nil {
			counts = c.oracleSLO().Schedule(tr)
		}
		return counts
	}
	for _, name := range c.Policies {
		var res sim.Result
		switch name {
		case PolicyHPABest:
			res = c.hpaBest[0] // played by the search
		case PolicyHPABestOne:
			res = c.hpaBest[1]
		case baseline.PolicyOracleSLO:
			res = c.oracleSLO().RunSchedule(tr, schedule())
		case baseline.PolicyOracleLag, baseline.PolicyOracleLagDrawn:
			res = baseline.OracleLag{OracleSLO: c.oracleSLO(), Drawn: name == baseline.PolicyOracleLagDrawn}.Run(tr, schedule())
		case baseline.PolicyOracle:
			o := baseline.Oracle{Concurrency: c.Concurrency, Startup: c.Startup, Nodes: c.Nodes, SLO: c.Targets()}
			if c.Engine != nil {
				o.Engine = &c.Engine.Engine
			}
			res = o.Run(tr, c.SampleEvery)
		default:
			pol, err := c.policy(name, tr)
			if err != nil {
				return report.Report{}, err
			}
			res = sim.Play(c.newPool(tr), pol, c.playOptions())
			if ours, ok := pol.(*Ours); ok {
				if err := ours.log.Err(); err != nil {
					return report.Report{}, fmt.Errorf("writing the decisions: %w", err)
				}
			}
		}
		rep.Policies = append(rep.Policies, res)
		rep.Series[name] = res.Series
	}
	seen := map[string]bool{}
	for _, v := range c.Variants {
		if seen[v.Name] {
			return report.Report{}, fmt.Errorf("variant %s given twice", v.Name)
		}
		seen[v.Name] = true
		ours, err := NewOurs(v.Set, c.Load)
		if err != nil {
			return report.Report{}, fmt.Errorf("variant %s: %w", v.Name, err)
		}
		ours.Initial, ours.Label, ours.log = InitialWorkers(tr, c.Concurrency), PolicyOurs+"+"+v.Name, c.decisionLog()
		res := sim.Play(c.newPool(tr), ours, c.playOptions())
		if err := ours.log.Err(); err != nil {
			return report.Report{}, fmt.Errorf("writing the decisions: %w", err)
		}
		rep.Policies = append(rep.Policies, res)
		rep.Series[ours.Label] = res.Series
	}
	flagBelowOracleSLO(rep.Policies)
	return rep, nil
}

// flagBelowOracleSLO marks the rows that meet the SLO on fewer GPU-hours
// than oracle-slo, when it ran: each is a finding to explain, not a
// bound broken silently.
func flagBelowOracleSLO(rows []sim.Result) {
	i := slices.IndexFunc(rows, func(r sim.Result) bool { return r.Name == baseline.PolicyOracleSLO })
	if i < 0 {
		return
	}
	for k := range rows {
		rows[k].BelowOracleSLO = k != i && rows[k].MeetsSLO && rows[k].GPUHours < rows[i].GPUHours
	}
}

// policy builds the policy called name for the config.
func (c Config) policy(name string, tr workload.Trace) (sim.Policy, error) {
	spec := c.Set.Spec.Autoscaling
	minReplicas := ptrOr(spec.MinReplicas, 1)
	initial := InitialWorkers(tr, c.Concurrency)
	switch name {
	case PolicyOurs:
		ours, err := NewOurs(c.Set, c.Load)
		if err != nil {
			return nil, err
		}
		ours.Initial, ours.log = initial, c.decisionLog()
		return ours, nil
	case baseline.PolicyHPA:
		return baseline.NewHPA(c.hpaConfig(tr)), nil
	case baseline.PolicyHPADefault:
		return baseline.NewHPA(baseline.HPAConfig{Min: minReplicas, Max: spec.MaxReplicas, Initial: initial, Target: c.Target(), AverageValue: c.HPAAverageValue, Load: c.Load}), nil
	case baseline.PolicyKEDA:
		return baseline.NewKEDA(baseline.KEDAConfig{MinReplicas: minReplicas, MaxReplicas: spec.MaxReplicas, Initial: initial, Target: c.Target(), AverageValue: !c.KEDAValue, Load: c.Load, Behavior: c.behavior()}), nil
	case baseline.PolicyKEDAQueue:
		return baseline.NewKEDA(baseline.KEDAConfig{
			Name: baseline.PolicyKEDAQueue, MinReplicas: minReplicas, MaxReplicas: spec.MaxReplicas, Initial: initial, Behavior: c.behavior(),
			Triggers: []baseline.ExternalMetric{baseline.RunningRequestsMetric(c.Target() * float64(c.Concurrency)), baseline.WaitingRequestsMetric(KEDAQueueWaitingPerPod)},
		}), nil
	case baseline.PolicySeed:
		return &baseline.Seed{Min: minReplicas, Max: spec.MaxReplicas, Initial: initial, Interval: scaling.IntervalOf(spec), Load: c.Load}, nil
	case baseline.PolicyStatic:
		return &baseline.Static{Size: max(baseline.PeakWorkers(tr, c.Concurrency), 1)}, nil
	}
	return nil, fmt.Errorf("unknown policy %q", name)
}

// hpaConfig is the hpa row's HPA.
func (c Config) hpaConfig(tr workload.Trace) baseline.HPAConfig {
	spec := c.Set.Spec.Autoscaling
	return baseline.HPAConfig{
		Min: ptrOr(spec.MinReplicas, 1), Max: spec.MaxReplicas, Initial: InitialWorkers(tr, c.Concurrency),
		Target: c.Target(), AverageValue: c.HPAAverageValue, Load: c.Load, Behavior: c.behavior(),
	}
}

// oracleSLO is the oracle-slo row on c's pool, SLO and start-up.
func (c Config) oracleSLO() baseline.OracleSLO {
	return baseline.OracleSLO{
		Pool: func(tr workload.Trace, from time.Duration, trial bool) *sim.Pool {
			c := c
			c.Start = c.Start.Add(from)
			if trial {
				c.Nodes = nil
			}
			return c.newPool(tr)
		},
		Concurrency: c.Concurrency, Startup: c.Startup, Play: c.playOptions(),
	}
}

// behavior is spec.behavior of hpa and of the HPAs keda creates.
func (c Config) behavior() *autoscalingv2.HorizontalPodAutoscalerBehavior {
	if c.HPABehavior == nil {
		return baseline.GPUServingBehavior()
	}
	return c.HPABehavior
}

// KEDAQueueWaitingPerPod is the keda-queue row's target of requests
// waiting per pod (averageValue 1): the HPA asks for as many pods as
// requests wait, and any queue above that adds workers.
const KEDAQueueWaitingPerPod = 1

// newPool is the pool every row plays on.
func (c Config) newPool(tr workload.Trace) *sim.Pool {
	pool := sim.NewPool(tr, c.Start, c.Concurrency, c.Startup)
	pool.SetStartup(c.StartupModel(), c.StartupSeed)
	pool.SetGrace(c.Grace)
	pool.SetScrape(c.Scrape)
	pool.SetDeploymentVictims(c.DeploymentVictims)
	if c.Nodes != nil {
		if err := pool.SetNodes(*c.Nodes); err != nil {
			panic(err) // withDefaults validated the model
		}
	}
	if c.Engine != nil {
		if err := pool.SetEngine(*c.Engine); err != nil {
			panic(err) // checkServing let the trace through
		}
	} else if c.Batched != nil {
		if err := pool.SetBatched(*c.Batched); err != nil {
			panic(err) // checkServing let the trace through
		}
	}
	return pool
}

// checkServing reports a trace that c's serving model cannot play.
func (c Config) checkServing(tr workload.Trace) error {
	if c.Engine != nil {
		if err := sim.NewPool(tr, c.Start, c.Concurrency, 0).SetEngine(*c.Engine); err != nil {
			return fmt.Errorf("%w: give the trace's token columns", err)
		}
		return nil
	}
	if c.Batched == nil {
		return nil
	}
	if err := sim.NewPool(tr, c.Start, c.Concurrency, 0).SetBatched(*c.Batched); err != nil {
		return fmt.Errorf("%w: give the trace's token columns", err)
	}
	return nil
}

// InitialWorkers is the pool every autoscaled policy starts with: the
// workers the first ten minutes of the trace keep busy at their peak, so
// that no policy pays for a cold start the trace did not have.
func InitialWorkers(tr workload.Trace, concurrency int) int32 {
	var head workload.Trace
	for _, r := range tr.Requests {
		if r.Arrival > 10*time.Minute {
			break
		}
		head.Requests = append(head.Requests, r)
	}
	return baseline.PeakWorkers(head, concurrency)
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
