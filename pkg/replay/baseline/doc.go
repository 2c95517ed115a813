// Package baseline models what users run instead of our autoscaler, each
// as a policy on the modelled pool (package sim), so that a replay can
// compare them with ours on the same trace: the HPA on an External metric
// (hpa.go, with a behavior in hpa_behavior.go), KEDA's metrics-api trigger
// feeding that HPA (keda.go), the step script the project grew from and a
// static pool (simple.go), and two bounds that know the future: the
// zero-wait oracle (oracle.go) and oracle-slo, the fewest workers per
// interval that meet the SLO (oracleslo.go). oracle-lag, that schedule
// learned a start-up late, is a reference for what a pool that does not
// know the future spends (oraclelag.go). The Deployment rows delete pods
// in the ReplicaSet controller's order (replicaset.go).
//
// A baseline takes what it needs of the replay's configuration as plain
// fields, so that it depends on the model and not on the run.
package baseline

// Policy names, as --policies takes them.
const (
	// PolicyHPA is the HPA with a behavior (GPUServingBehavior unless
	// given); PolicyHPADefault the HPA without one.
	PolicyHPA        = "hpa"
	PolicyHPADefault = "hpa-default"
	PolicyKEDA       = "keda"
	// PolicyKEDAQueue is KEDA on the requests running and waiting per pod.
	PolicyKEDAQueue = "keda-queue"
	PolicySeed      = "seed"
	PolicyStatic    = "static"
	PolicyOracle    = "oracle"
)
