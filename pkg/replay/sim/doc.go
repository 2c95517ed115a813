// Package sim models the pool of GPU workers a replay scales: it serves a
// trace's requests in virtual time on the workers a policy asks for, and
// measures what each request saw, so that every policy is played and
// measured on the same model.
//
// The model (pool.go): each worker has a number of slots and becomes Ready
// a start-up after it is created, drawn per worker (startup.go). Requests
// wait in one FIFO queue and run on a free slot of the least loaded serving
// worker. A worker with a request in flight is busy (gputask.io/busy); a
// draining one takes no new request and finishes its own; a deleted one
// (Pool.Delete) leaves the router, finishes what ends within the pods'
// grace and loses the rest. With engine serving (Pool.SetEngine) each
// worker instead runs the engine model of package engine, and requests are
// routed at arrival to the Ready worker with the fewest outstanding
// (RouterLeastOutstanding) or wait in the one pool-wide queue
// (RouterPooled).
//
// What the pool tells a policy is what a cluster would: the backend's load
// index and the SLO policy's roles in an Observation (observation.go), fresh
// or through a Prometheus scrape (Pool.Metrics, metrics.go), with percentiles read from vLLM's
// buckets as histogram_quantile reads them (histogram.go); LoadIndexServer
// serves them over HTTP as a backend does; TaskOf shows a worker as the
// GPUTask the set controller would see.
//
// With a NodeModel (nodes.go) the workers run on nodes of a few GPUs,
// launched when a worker fits nowhere and removed as Karpenter's
// consolidation removes them (consolidation.go).
//
// Play (play.go) drives a Policy over a Pool and measures the result
// (Measure, targets.go) from each request's Outcome against the SLO users
// state: the wait, the time to first token and the inter-token latency at
// a percentile.
package sim
