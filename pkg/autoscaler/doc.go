// Package autoscaler sets a GPUTaskSet's spec.replicas from its load indexes.
//
// The decision itself is pure and lives in pkg/scaling. This package is the
// loop around it (controller.go, evaluate.go, status.go): it gathers the
// inputs and acts on the decision:
//
//	set informer ─▶ queue ─▶ evaluate every spec.autoscaling.interval (30s)
//	  read all metrics at once (pkg/loadindex, sources cached per set)
//	  capacity from node, pod and task listers (capacityAware only)
//	  scaling.Decide
//	  UpdateScale (not when dryRun, paused or stopped)
//	  events, pkg/metrics, and the autoscaler's status fields
//
// Only a change to spec.autoscaling or to the paused/stopped annotations
// evaluates a set at once; replicas and status changes wait for the next
// interval, because a load index that has not yet felt a scale-up would
// only ask for another. Whatever triggers an evaluation (an edit, a retry
// after an error, the timer of an earlier evaluation, a new leader), the
// count changes at most once per interval: every evaluation reads the last
// step (remembered exactly, or status.lastScaleTime after a restart) and
// scaling.Decide holds a change until a full interval has passed. Tasks
// that are not Ready yet hold scale-up back until startupTimeout.
//
// The status is shared with the set controller through server-side apply,
// each with its own field manager (status.go). The autoscaler applies only
// loadIndex, desiredReplicas, capacityReplicas, startingReplicas,
// queuedReplicas, lastScaleTime, lastDecision, metrics,
// consecutiveFailures, burstUntil, predictive, recommendations and the
// AbleToScale, ScalingActive, ScalingLimited, Fallback and SpecValid
// conditions, so neither writer can undo the other's fields and no write
// needs a fresh read; it skips the write when only timestamps moved.
//
// pkg/app wires it beside the other controllers, with a client of its own
// and the shared informer factories.
//
// The controller needs RBAC to get, list and watch gputasksets, gputasks,
// nodes and pods; to get and update gputasksets/scale and to patch
// gputasksets/status; to get secrets (for metric credentials); and to
// create and patch events.
package autoscaler
