// Package replay plays a request trace against a modelled pool of GPU
// workers in virtual time, under our autoscaler and under what users would
// run instead, and measures what each costs (GPU-hours) and how long
// requests wait. cmd/gputask-replay is its command line; docs/replay.md has
// measured figures.
//
// This package holds ours and the run; each other concern has its own
// package under it, in the order a trace goes through them:
//
//	workload  the traces: the CSV and Mooncake readers, the service
//	          model that gives each request its service time, the
//	          synthetic shapes and ServeGen's windows, the CSV writer
//	engine    one vLLM engine per worker: continuous batching with
//	          chunked prefill, bounded by the KV cache, its speeds from
//	          a measured GPU profile (package gpuprofile)
//	sim       the modelled pool the policies scale: workers and their
//	          drawn start-ups, routing, nodes and consolidation, what a
//	          cluster tells a policy (the load index, the roles, the
//	          bucketed percentiles), the play loop, and each request's
//	          outcome measured against the SLO users state
//	baseline  what users run instead, each a policy on that pool
//	report    the tables, markdown, JSON and plots of the rows
//
// Nothing here imports a controller package: ours runs the project's pure
// functions, as the controllers call them.
//
// The policies, on the same trace and workers:
//
//	ours       ours.go               the project's code: scaling.CountStarting
//	                                 and scaling.Decide each interval (by
//	                                 default the SLO policy), setplan.Make
//	                                 for victims, minTaskAge and draining
//	hpa        baseline/hpa.go       autoscaling/v2 External metric, after
//	                                 pkg/controller/podautoscaler, with a
//	                                 behavior (hpa_behavior.go); hpa-default
//	                                 without one
//	hpa-best   best.go               hpa at the best fixed target in
//	                                 hindsight, per trace; hpa-best-one, one
//	                                 target for all traces
//	keda       baseline/keda.go      KEDA's metrics-api trigger feeding that
//	                                 HPA; keda-queue on running and waiting
//	                                 requests
//	seed       baseline/simple.go    the step script the project grew from
//	static     baseline/simple.go    a fixed pool sized for the trace's peak
//	oracle     baseline/oracle.go    the zero-wait bound, which knows every
//	                                 arrival
//	oracle-slo baseline/oracleslo.go the fewest workers per minute that meet
//	                                 the SLO, found in hindsight by replaying
//	                                 the pool
//
// Run (run.go) plays the policies a Config names on one trace and
// RunTraces (best.go) on several, searching hpa-best's target over them;
// the Deployment rows delete pods in the ReplicaSet's order, ours in the
// set controller's, which empties the node with the fewest GPUs in use
// first. Sim drives ours one interval at a time, so that a test on a real
// control plane can compare each of its steps with the real controllers'.
package replay
