// Package replay plays a request trace against a modelled pool of GPU
// workers in virtual time, under our autoscaler and under what users would
// run instead, and measures what each costs (GPU-hours) and how long
// requests wait. cmd/gputask-replay is its command line; docs/replay.md has
// measured figures.
//
// The model (pool.go): each worker has a number of slots and becomes Ready
// a startup after it is created. Requests wait in one FIFO queue and run on
// a free slot of the least loaded serving worker. A worker with a request
// in flight is busy (gputask.io/busy); a draining one takes no new request
// and finishes its own; a deleted one (Pool.Delete) leaves the router,
// finishes what ends within the pods' grace and loses the rest. The backend
// reports a load index (demand or utilization) computed from the pool and,
// for the SLO policy's roles, the request rates, the requests running and
// waiting and the recent wait percentile (RoleValue), fresh or through a
// Prometheus scrape (Pool.Metrics); LoadIndexServer serves the index over
// HTTP as a backend does. Nothing reaches a policy that a cluster would
// not tell it: each worker draws its own start-up (startup.go), which ours
// measures from its tasks' creation and Ready times, and a percentile is
// read as histogram_quantile gives it from vLLM's buckets (histogram.go).
//
// Every row is measured from each request's outcome (Pool.Outcomes)
// against the SLO users state (targets.go): the wait, the time to first
// token and the inter-token latency at a percentile; a row meets the SLO
// only if every stated target holds. SummarizeSeeds (seeds.go) gives each
// figure's mean and range over traces drawn with several seeds.
//
// With engine serving (Pool.SetEngine) each worker instead runs the
// engine model of package engine: continuous batching with chunked
// prefill, bounded by the KV cache, its speeds from a measured GPU
// profile (package gpuprofile). Requests are routed at arrival to the
// Ready worker with the fewest outstanding and wait in its own queue
// (RouterLeastOutstanding), or wait in the one pool-wide queue
// (RouterPooled).
//
// With a NodeModel (nodes.go) the workers run on nodes of a few GPUs,
// placed as the default scheduler spreads them or as the packing profile
// packs them; a node is launched when a worker fits nowhere, takes its
// start-up before the worker starts its own, and goes a grace after its
// last worker left, as Karpenter's WhenEmpty consolidation removes it.
// Every policy then reports node-hours and peak nodes; the Deployment
// rows delete pods in the ReplicaSet's order (replicaset.go), ours in
// taskset's, which empties the node with the fewest GPUs in use first.
//
// The policies, on the same trace and workers:
//
//	ours    ours.go   the project's code: scaling.CountStarting and
//	                  scaling.Decide each interval (by default the SLO
//	                  policy), setplan.Make for victims, minTaskAge
//	                  and draining
//	hpa     hpa.go    autoscaling/v2 External metric, after
//	                  pkg/controller/podautoscaler, with a behavior
//	                  (hpa_behavior.go); hpa-default without one
//	hpa-best best.go  hpa at the best fixed target in hindsight, per
//	                  trace; hpa-best-one, one target for all traces
//	keda    keda.go   KEDA's metrics-api trigger feeding that HPA;
//	                  keda-queue on running and waiting requests
//	seed    simple.go the step script the project grew from
//	static  simple.go a fixed pool sized for the trace's peak
//	oracle  oracle.go the zero-wait bound, which knows every arrival
//	oracle-slo oracleslo.go the fewest workers per minute that meet the
//	                  SLO, found in hindsight by replaying the pool
//
// Play (play.go) drives a Policy over a Pool; Sim drives ours one interval
// at a time, so that a test on a real control plane can compare each of
// its steps with the real controllers'.
package replay
