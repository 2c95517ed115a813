// Command gputask-replay plays a request trace against a modelled pool of
// GPU workers in virtual time, under our autoscaler and the policies users
// would run instead, and prints what each cost and how long requests
// waited. `gputask-replay generate` writes synthetic traces, or draws them
// from ServeGen's production windows (--servegen).
//
//	gputask-replay generate --shape diurnal --out diurnal.csv
//	gputask-replay --trace diurnal.csv --time-column Timestamp \
//	  --input-tokens-column 'Request tokens' --output-tokens-column 'Response tokens' \
//	  --prefill-tokens-per-second 4000 --decode-tokens-per-second 40 \
//	  --concurrency 8 --startup 2m --plot _output/diurnal.png
//
// See pkg/replay for the model and docs/replay.md for measured figures.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/gpuprofile"
	"github.com/gputask/gputask-controller/pkg/replay"
	"github.com/gputask/gputask-controller/pkg/replay/baseline"
	enginemodel "github.com/gputask/gputask-controller/pkg/replay/engine"
	"github.com/gputask/gputask-controller/pkg/replay/report"
	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "gputask-replay:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "generate" {
		return generate(args[1:], stdout, stderr)
	}
	return replayTrace(args, stdout, stderr)
}

func replayTrace(args []string, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("gputask-replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		timeColumn   = fs.String("time-column", "", "column of arrival times: a timestamp (2006-01-02 15:04:05.9999999 or RFC 3339) or seconds from the start (required)")
		inputColumn  = fs.String("input-tokens-column", "", "column of prompt tokens; service time adds tokens / --prefill-tokens-per-second")
		outputColumn = fs.String("output-tokens-column", "", "column of generated tokens; service time adds tokens / --decode-tokens-per-second")
		prefill      = fs.Float64("prefill-tokens-per-second", 0, "prefill speed of one sequence")
		decode       = fs.Float64("decode-tokens-per-second", 0, "decode speed of one sequence")
		serviceCol   = fs.String("service-column", "", "column of service times in seconds")
		service      = fs.String("service", "", "fixed service time such as 30s, or lognormal:MEDIAN,SIGMA")
		rateScale    = fs.Float64("rate-scale", 1, "multiply the arrival rate by resampling the trace, read from a file or drawn by --shape")
		seed         = fs.Uint64("seed", 1, "seed of resampling and drawn service times")
		concurrency  = fs.Int("concurrency", 0, "requests one worker serves at once (required)")
		startup      = fs.String("startup", "2m", "time from a worker's creation until it is Ready: a duration, or lognormal:MEDIAN,SIGMA[,FLOOR] drawn per worker (seeded by --seed; FLOOR defaults to half the median)")
		grace        = fs.Duration("grace", 30*time.Second, "terminationGracePeriodSeconds of the pods: a deleted worker finishes the requests that end within it and loses the rest")
		behaviorPath = fs.String("hpa-behavior", "", "spec.behavior of hpa and keda, in the HPA's YAML (a behavior block or a whole HorizontalPodAutoscaler; default: the GPU serving preset)")
		load         = fs.String("load", string(sim.LoadDemand), "load index the backend reports: demand or utilization")
		slo          = fs.Duration("slo", 10*time.Second, "wait a request should not exceed")
		setPath      = fs.String("set", "", "GPUTaskSet YAML whose autoscaling block ours uses (default: the embedded inference pool)")
		hpaTarget    = fs.Float64("hpa-target", 0, "load index target of hpa and keda (default: the set's target, or the middle of its thresholds)")
		hpaType      = fs.String("hpa-target-type", "Value", "target type of hpa and hpa-default: Value or AverageValue")
		kedaType     = fs.String("keda-metric-type", "AverageValue", "metricType of keda's trigger: AverageValue (KEDA's default) or Value")
		source       = fs.String("source", "http", "where every row reads its metrics: http (fresh at each read) or prometheus (the last scrape)")
		scrape       = fs.Duration("scrape-interval", 15*time.Second, "Prometheus scrape interval, with --source prometheus")
		policies     = fs.String("policies", strings.Join(replay.AllPolicies, ","), "policies to replay, comma-separated; also "+strings.Join(replay.ExtraPolicies, ",")+", played only where named")
		jsonPath     = fs.String("json", "", "write the figures and time series as JSON to this file")
		decisions    = fs.String("decisions", "", "write each evaluation of ours and of its variants to this file, a line of JSON each: status.lastDecision and status.metrics as the autoscaler writes them, with the trace, seed, policy and seconds from the first arrival")
		plotPath     = fs.String("plot", "", "write a plot of demand, replicas and queue per policy to this file (.png, .svg or .pdf)")
		markdown     = fs.Bool("markdown", false, "print the table as Markdown")
		serving      = fs.String("serving", "", "how a worker serves its requests: fixed (each holds a slot for its service time), batched (decode slows as the batch grows; needs the token columns) or engine (see --engine) (default: engine with --engine, else fixed)")
		itlBase      = fs.Duration("itl-base", sim.DefaultITL.Base, "with --serving batched: inter-token latency of a worker, the part that does not grow with the batch")
		gpusPerNode  = fs.Int("gpus-per-node", sim.DefaultNodeModel.GPUsPerNode, "GPUs of a node; each worker takes one, and every policy reports node-hours and peak nodes (0 models no nodes)")
		placement    = fs.String("placement", string(sim.DefaultNodeModel.Placement), "how the scheduler places a new worker: spread (the default scheduler, which ignores GPUs: the node with the fewest workers) or pack (the packing profile of artifacts/scheduler: the node with the most GPUs in use)")
		nodeStartup  = fs.Duration("node-startup", sim.DefaultNodeModel.Startup, "time a new node takes before a worker on it starts its own start-up")
		nodeGrace    = fs.Duration("node-grace", sim.DefaultNodeModel.Grace, "Karpenter's consolidateAfter: time a node stays up after its last worker left, and without a worker placed or leaving before it is consolidated as underutilized")
		consolidate  = fs.String("consolidation", string(sim.DefaultNodeModel.Consolidation), "the NodePool's consolidation policy: when-empty, or when-empty-or-underutilized (Karpenter's default: a node whose workers fit on the other nodes is drained, busy workers of ours excepted)")
		depVictims   = fs.String("deployment-victims", string(sim.DeploymentVictimsReplicaSet), "scale-in order of the Deployment rows: replicaset (the ReplicaSet controller's) or node-aware (the set controller's, without busy marks)")
		itlPerSeq    = fs.Duration("itl-per-seq", sim.DefaultITL.PerSeq, "with --serving batched: inter-token latency added by each sequence in the batch")
		variants     []replay.Variant
		tracePaths   []string
	)
	// The engine model (--serving engine).
	var (
		enginePath = fs.String("engine", "", "GPU profile each worker's engine model runs on: a JSON file or one of "+strings.Join(gpuprofile.Names(), ", ")+"; implies --serving engine, and the token columns are required")
		maxBatched = fs.Int("max-batched-tokens", enginemodel.DefaultMaxBatchedTokens, "with --serving engine: prompt tokens one engine step carries (vLLM's max_num_batched_tokens)")
		maxSeqs    = fs.Int("max-num-seqs", enginemodel.DefaultMaxNumSeqs, "with --serving engine: sequences one worker runs at once (vLLM's max_num_seqs)")
		router     = fs.String("router", string(sim.RouterLeastOutstanding), "with --serving engine: least-outstanding (each request at its arrival to the Ready worker with the fewest outstanding, queued there) or pooled (one FIFO queue, at most --concurrency outstanding per worker)")
	)
	// The SLO users state, and the bounds and draws of the comparison.
	var (
		sloTTFT       = fs.Duration("slo-ttft", 0, "time to first token a request should not exceed, at --slo-percentile (0: not a target)")
		sloITL        = fs.Duration("slo-itl", 0, "mean gap between a request's tokens it should not exceed, at --slo-percentile (0: not a target)")
		sloPercentile = fs.Float64("slo-percentile", sim.DefaultSLOPercentile, "share of requests (0-100) within which every SLO target must hold")
		seeds         = fs.Int("seeds", 1, "draw the --shape traces (and the start-ups) this many times, seeds --seed, --seed+1, …; tables show each figure's mean and [min–max]")
		shapes        []string
	)
	fs.Func("shape", "a synthetic trace drawn in the replay, as generate --shape draws it (diurnal, bursty, step or flash; its tokens served at --prefill- and --decode-tokens-per-second); repeatable", func(v string) error {
		if !slices.Contains(workload.Shapes, v) {
			return fmt.Errorf("unknown shape %q: want one of %s", v, strings.Join(workload.Shapes, ", "))
		}
		shapes = append(shapes, v)
		return nil
	})
	fs.Func("trace", "request trace (this or --shape required): CSV with a header row, or Mooncake's JSONL if it ends in .jsonl; repeatable: each gets its table, and hpa-best's target is searched over all", func(v string) error {
		if v == "" {
			return errors.New("empty path")
		}
		tracePaths = append(tracePaths, v)
		return nil
	})
	fs.Func("variant", "one more run of ours, as ours+NAME: a built-in NAME ("+strings.Join(replay.BuiltinVariants, ", ")+") or NAME=FILE (a GPUTaskSet); repeatable", func(v string) error {
		variant, err := replay.ParseVariant(v)
		if err != nil {
			return err
		}
		variants = append(variants, variant)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	// The wait is a target beside a TTFT or ITL target only when asked
	// for: a user who states the latencies they feel states the SLO.
	waitSLO := *slo
	if !flagGiven(fs, "slo") && (*sloTTFT > 0 || *sloITL > 0) {
		waitSLO = 0
	}
	targets := sim.SLOTargets{Wait: waitSLO, TTFT: *sloTTFT, ITL: *sloITL, Percentile: *sloPercentile}
	if err := targets.Validate(); err != nil {
		return err
	}
	startups, err := sim.ParseStartup(*startup)
	if err != nil {
		return fmt.Errorf("--startup: %w", err)
	}
	// --time-column is checked where a CSV trace is read: a JSONL trace needs none.
	if len(tracePaths)+len(shapes) == 0 || *concurrency < 1 {
		return fmt.Errorf("--trace or --shape, and --concurrency (at least 1) are required, and --time-column for a CSV trace")
	}
	if *seeds < 1 {
		return fmt.Errorf("--seeds must be at least 1, got %d", *seeds)
	}
	model := workload.ServiceModel{
		Column: *serviceCol, InputTokensColumn: *inputColumn, OutputTokensColumn: *outputColumn,
		PrefillPerSecond: *prefill, DecodePerSecond: *decode,
	}
	if *service != "" {
		m, err := workload.ParseServiceDuration(*service)
		if err != nil {
			return err
		}
		model.Fixed, model.Sigma = m.Fixed, m.Sigma
	}
	var batched *sim.ITL
	var engineServing *sim.EngineServing
	if *serving == "" {
		*serving = map[bool]string{true: "engine", false: "fixed"}[*enginePath != ""]
	}
	switch *serving {
	case "engine":
		// A shape drawn in the replay comes with its token counts; a trace
		// file names them.
		if *enginePath == "" || len(tracePaths) > 0 && (*inputColumn == "" || *outputColumn == "") {
			return fmt.Errorf("--serving engine needs --engine, and a trace's token columns (--input-tokens-column, --output-tokens-column)")
		}
		profile, err := gpuprofile.LoadOrLookup(*enginePath)
		if err != nil {
			return fmt.Errorf("--engine: %w", err)
		}
		rt, err := sim.ParseRouter(*router)
		if err != nil {
			return err
		}
		engineServing = &sim.EngineServing{Router: rt, Engine: enginemodel.Config{Profile: profile, MaxBatchedTokens: *maxBatched, MaxNumSeqs: *maxSeqs}}
		if err := engineServing.Engine.Validate(); err != nil {
			return err
		}
		// The slot-based rows (static, oracle, the starting pool) still
		// size by service time: a request's time alone in a batch of
		// --concurrency at the profile's speeds, unless given.
		if model.PrefillPerSecond == 0 {
			model.PrefillPerSecond = profile.PrefillTokensPerSecond()
		}
		if model.DecodePerSecond == 0 {
			model.DecodePerSecond = 1 / profile.ITLSeconds(*concurrency, 1024)
		}
	case "fixed":
	case "batched":
		if *outputColumn == "" {
			return fmt.Errorf("--serving batched needs the trace's token columns: give --output-tokens-column (and --input-tokens-column for the prefill)")
		}
		batched = &sim.ITL{Base: *itlBase, PerSeq: *itlPerSeq}
	default:
		return fmt.Errorf("--serving must be fixed, batched or engine, got %q", *serving)
	}
	loadKind, err := sim.ParseLoadKind(*load)
	if err != nil {
		return err
	}
	names, err := replay.ParsePolicies(*policies)
	if err != nil {
		return err
	}
	if *hpaType != "Value" && *hpaType != "AverageValue" {
		return fmt.Errorf("--hpa-target-type must be Value or AverageValue, got %q", *hpaType)
	}
	if *kedaType != "Value" && *kedaType != "AverageValue" {
		return fmt.Errorf("--keda-metric-type must be Value or AverageValue, got %q", *kedaType)
	}
	var scrapeEvery time.Duration
	switch *source {
	case "http":
	case "prometheus":
		if *scrape <= 0 {
			return fmt.Errorf("--scrape-interval must be above 0, got %v", *scrape)
		}
		scrapeEvery = *scrape
	default:
		return fmt.Errorf("--source must be http or prometheus, got %q", *source)
	}
	if *grace < 0 {
		return fmt.Errorf("--grace must not be negative, got %v", *grace)
	}
	var behavior *autoscalingv2.HorizontalPodAutoscalerBehavior
	if *behaviorPath != "" {
		if behavior, err = baseline.LoadHPABehavior(*behaviorPath); err != nil {
			return fmt.Errorf("--hpa-behavior: %w", err)
		}
	}
	if !(*rateScale > 0) {
		return fmt.Errorf("--rate-scale must be above 0, got %v", *rateScale)
	}
	var nodes *sim.NodeModel
	if *gpusPerNode < 0 {
		return fmt.Errorf("--gpus-per-node must not be negative, got %d", *gpusPerNode)
	}
	if *gpusPerNode > 0 {
		pl, err := sim.ParsePlacement(*placement)
		if err != nil {
			return fmt.Errorf("--placement: %w", err)
		}
		cons, err := sim.ParseConsolidation(*consolidate)
		if err != nil {
			return fmt.Errorf("--consolidation: %w", err)
		}
		nodes = &sim.NodeModel{GPUsPerNode: *gpusPerNode, Placement: pl, Startup: *nodeStartup, Grace: *nodeGrace, Consolidation: cons}
		if err := nodes.Validate(); err != nil {
			return err
		}
	}
	victims, err := sim.ParseDeploymentVictims(*depVictims)
	if err != nil {
		return fmt.Errorf("--deployment-victims: %w", err)
	}
	var set *gputaskv1.GPUTaskSet // the embedded pool, its slots the workers'
	if *setPath != "" {
		if set, err = replay.LoadSet(*setPath); err != nil {
			return err
		}
	}

	var traces []replay.NamedTrace
	for _, path := range tracePaths {
		tr, err := readTrace(path, workload.TraceOptions{TimeColumn: *timeColumn, Service: model, RateScale: *rateScale, Seed: *seed})
		if err != nil {
			return err
		}
		traces = append(traces, replay.NamedTrace{Name: filepath.Base(path), Trace: tr})
	}
	drawn, err := drawShapes(shapes, *seed, *rateScale, model)
	if err != nil {
		return err
	}
	cfg := replay.Config{
		Concurrency: *concurrency, Startup: startups.Median, StartupSigma: startups.Sigma, StartupFloor: startups.Floor, StartupSeed: *seed, Grace: *grace, Load: loadKind, SLO: targets.Wait, SLOTTFT: targets.TTFT, SLOITL: targets.ITL, SLOPercentile: targets.Percentile, Set: set,
		HPABehavior: behavior, HPATarget: *hpaTarget, HPAAverageValue: *hpaType == "AverageValue", KEDAValue: *kedaType == "Value", Scrape: scrapeEvery, Policies: names, Variants: variants, Batched: batched,
		Nodes: nodes, DeploymentVictims: victims, Engine: engineServing,
	}
	if *decisions != "" {
		closeDecisions, openErr := openDecisions(*decisions, &cfg)
		if openErr != nil {
			return openErr
		}
		defer func() { err = errors.Join(err, closeDecisions()) }()
	}
	if *seeds > 1 {
		return replaySeeds(stdout, traces, shapes, *seeds, *seed, *rateScale, model, cfg, *markdown, *jsonPath)
	}
	traces = append(traces, drawn...)
	reports, best, err := replay.RunTraces(traces, cfg)
	if err != nil {
		return err
	}
	servingNote := ""
	if batched != nil {
		servingNote = fmt.Sprintf(", batched serving at %v + %v per sequence between tokens", batched.Base, batched.PerSeq)
	}
	if e := engineServing; e != nil {
		servingNote = fmt.Sprintf(", engine serving on %s (max %d sequences, %d batched tokens), %s router", e.Engine.Profile.Name, e.Engine.MaxNumSeqs, e.Engine.MaxBatchedTokens, e.Router)
	}
	if nodes != nil {
		servingNote += fmt.Sprintf(", %d-GPU nodes placed by %s, %v node start-up, %v consolidateAfter, %s consolidation, %s Deployment victims", nodes.GPUsPerNode, nodes.Placement, nodes.Startup, nodes.Grace, nodes.Consolidation, victims)
	}
	metrics := "fresh metrics"
	if scrapeEvery > 0 {
		metrics = fmt.Sprintf("metrics scraped every %v", scrapeEvery)
	}
	verdict := report.TargetsOfReports(reports)
	if len(reports) == 1 {
		reports[0].Targets = &verdict
	}
	for i, rep := range reports {
		tr := traces[i].Trace
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		fmt.Fprintf(stdout, "%s: %d requests over %v, %d slots per worker, %v startup, %v grace, %s load index, %s, SLO %v%s\n",
			traces[i].Name, len(tr.Requests), tr.Duration().Round(time.Second), *concurrency, rep.Startup, *grace, loadKind, metrics, rep.SLO, servingNote)
		if *markdown {
			err = rep.WriteMarkdown(stdout)
		} else {
			err = rep.WriteTable(stdout)
		}
		if err != nil {
			return err
		}
		if *jsonPath != "" {
			if err := writeFile(perTrace(*jsonPath, traces[i].Name, len(traces)), rep.WriteJSON); err != nil {
				return err
			}
		}
		if *plotPath != "" {
			if err := report.Plot(rep, perTrace(*plotPath, traces[i].Name, len(traces))); err != nil {
				return fmt.Errorf("plotting: %w", err)
			}
		}
	}
	if best != nil {
		fmt.Fprintf(stdout, "\n%s\n", best.Summary(len(traces)))
	}
	if err := printTargets(stdout, verdict, *markdown); err != nil {
		return err
	}
	if *jsonPath == "" || len(reports) == 1 {
		return nil
	}
	// The trace of a run of one has the verdict in its file; of several,
	// each has its file beside the path given, and the path the verdict.
	return writeJSON(*jsonPath, struct {
		Targets report.Targets `json:"targets"`
	}{verdict})
}

// printTargets prints ours against the targets after the tables, where
// ours ran.
func printTargets(w io.Writer, t report.Targets, markdown bool) error {
	if !t.OursRan() {
		return nil
	}
	fmt.Fprintln(w)
	if markdown {
		return t.WriteMarkdown(w)
	}
	return t.WriteTable(w)
}

// openDecisions creates path for the decisions of the run of c
// (replay.Config.Decisions), and returns what flushes and closes it.
func openDecisions(path string, c *replay.Config) (func() error, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--decisions: %w", err)
	}
	w := bufio.NewWriter(f)
	c.Decisions = w
	return func() error {
		if err := errors.Join(w.Flush(), f.Close()); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		return nil
	}, nil
}

// writeJSON writes v to path, indented.
func writeJSON(path string, v any) error {
	return writeFile(path, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", " ")
		return enc.Encode(v)
	})
}

func readTrace(path string, o workload.TraceOptions) (workload.Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return workload.Trace{}, err
	}
	defer f.Close()
	read := workload.ReadTrace
	if strings.EqualFold(filepath.Ext(path), ".jsonl") {
		read = workload.ReadMooncakeTrace
	}
	tr, err := read(f, o)
	if err != nil {
		return workload.Trace{}, fmt.Errorf("%s: %w", path, err)
	}
	return tr, nil
}

// perTrace is where the file of one trace goes: path itself with one
// trace, else path with the trace's name before its extension
// (out.json, diurnal.csv: out-diurnal.json).
func perTrace(path, trace string, traces int) string {
	if traces == 1 {
		return path
	}
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "-" + strings.TrimSuffix(trace, filepath.Ext(trace)) + ext
}

func generate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gputask-replay generate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	shape := fs.String("shape", workload.ShapeDiurnal, "diurnal, bursty, step or flash")
	out := fs.String("out", "", "file to write (default: standard output)")
	// Defaults are the shape's; a flag given on the command line overrides them.
	var (
		duration     = fs.Duration("duration", 0, "length of the trace (default per shape)")
		peak         = fs.Float64("peak-rate", 0, "arrivals per second at the peak (default per shape)")
		peakToTrough = fs.Float64("peak-to-trough", 0, "daily peak rate over the nightly trough (diurnal, bursty)")
		weekend      = fs.Float64("weekend", 0, "rate factor on days 6 and 7 of each week (diurnal, bursty)")
		gammaShape   = fs.Float64("gamma-shape", 0, "Gamma shape of inter-arrival times (bursty); below 1 is burstier than Poisson")
		burstShape   = fs.Float64("burst-shape", 0, "Gamma shape of each burst window's rate factor (bursty); 0 keeps the diurnal curve")
		gammaScale   = fs.Float64("gamma-scale", 0, "Gamma scale of inter-arrival times in seconds (bursty; default follows the rate)")
		burstWindow  = fs.Duration("burst-window", 0, "time over which a burst's rate holds (bursty)")
		surgeAt      = fs.Duration("surge-at", 0, "start of the step surge or flash crowd")
		surgeFor     = fs.Duration("surge-for", 0, "length of the step surge, or decay time of the flash crowd")
		surgeFactor  = fs.Float64("surge-factor", 0, "peak rate over the base rate of the surge")
		inputMedian  = fs.Float64("input-tokens-median", 0, "median prompt tokens")
		outputMedian = fs.Float64("output-tokens-median", 0, "median generated tokens")
		tokensSigma  = fs.Float64("tokens-sigma", 0, "log-normal sigma of token counts")
		seed         = fs.Uint64("seed", 0, "seed (default 1)")
		servegen     = fs.String("servegen", "", "draw the trace from a ServeGen model folder (windows.csv, tokens.csv) instead of a shape")
		days         = fs.Int("days", 1, "with --servegen: how many days of the windows to draw")
		firstDay     = fs.Int("first-day", 1, "with --servegen: the day to draw from, 1 the data's first; arrivals count from its start")
		rateScale    = fs.Float64("rate-scale", 1, "with --servegen: multiply every client's rate")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *servegen != "" {
		return generateServeGen(*servegen, *firstDay, *days, *rateScale, max(*seed, 1), *out, set, stdout, stderr)
	}
	if set["days"] || set["first-day"] || set["rate-scale"] {
		return errors.New("--days, --first-day and --rate-scale go with --servegen")
	}
	o := workload.DefaultGenerateOptions(*shape)
	override := func(name string, apply func()) {
		if set[name] {
			apply()
		}
	}
	override("duration", func() { o.Duration = *duration })
	override("peak-rate", func() { o.PeakRate = *peak })
	override("peak-to-trough", func() { o.PeakToTrough = *peakToTrough })
	override("weekend", func() { o.Weekend = *weekend })
	override("gamma-shape", func() { o.GammaShape = *gammaShape })
	override("gamma-scale", func() { o.GammaScale = *gammaScale })
	override("burst-shape", func() { o.BurstShape = *burstShape })
	override("burst-window", func() { o.BurstWindow = *burstWindow })
	override("surge-at", func() { o.SurgeAt = *surgeAt })
	override("surge-for", func() { o.SurgeFor = *surgeFor })
	override("surge-factor", func() { o.SurgeFactor = *surgeFactor })
	override("input-tokens-median", func() { o.InputTokensMedian = *inputMedian })
	override("output-tokens-median", func() { o.OutputTokensMedian = *outputMedian })
	override("tokens-sigma", func() { o.TokensSigma = *tokensSigma })
	override("seed", func() { o.Seed = *seed })
	reqs, err := workload.Generate(o)
	if err != nil {
		return err
	}
	if *out == "" {
		return workload.WriteCSV(stdout, reqs)
	}
	return writeFile(*out, func(w io.Writer) error { return workload.WriteCSV(w, reqs) })
}

// generateServeGen writes a trace drawn from a ServeGen model folder. The
// shape's flags do not apply to it; given, they are an error rather than
// silently ignored.
func generateServeGen(dir string, first, days int, rateScale float64, seed uint64, out string, set map[string]bool, stdout, stderr io.Writer) error {
	for name := range set {
		if !slices.Contains([]string{"servegen", "first-day", "days", "rate-scale", "seed", "out"}, name) {
			return fmt.Errorf("--%s does not go with --servegen", name)
		}
	}
	s, err := workload.LoadServeGen(dir)
	if err != nil {
		return err
	}
	var sum workload.ServeGenSummary
	write := func(w io.Writer) error {
		cw := workload.NewCSVWriter(w)
		if sum, err = s.Generate(first, days, rateScale, seed, cw.Write); err != nil {
			return err
		}
		return cw.Flush()
	}
	if out == "" {
		err = write(stdout)
	} else {
		err = writeFile(out, write)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%s: %d requests from %d clients over %d days from day %d at %v times their rate", dir, sum.Requests, sum.Clients, days, first, rateScale)
	if len(sum.LeftOut) > 0 {
		fmt.Fprintf(stderr, "; %d clients without token data left out, as ServeGen does (%.0f %% of the requests)", len(sum.LeftOut), 100*sum.LeftOutShare)
	}
	fmt.Fprintln(stderr)
	return nil
}

// flagGiven reports whether name was set on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// writeFile writes a file through write, creating its directory.
func writeFile(path string, write func(io.Writer) error) error {
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}
