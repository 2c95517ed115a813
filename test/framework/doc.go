// Package framework runs a real, local Kubernetes control plane for the
// integration and end-to-end tests and for `make demo`. That is etcd,
// kube-apiserver and, on request, kube-scheduler, kube-controller-manager,
// kwok with fake GPU nodes, and the gputask-controller binary.
//
// Every component is a separate process built from source into bin/ by
// `make tools`. Each binds 127.0.0.1 on a free port, runs in its own process
// group and logs to a file in the control plane's directory, so nothing binds
// a public address and nothing outlives Stop.
//
// The core API returns errors and never needs a *testing.T, so the demo uses
// it too; the helpers in testing.go wrap it for tests.
//
// One behaviour differs from a real cluster on purpose: kube-apiserver runs
// with the TaintNodesByCondition admission plugin disabled. That plugin puts
// node.kubernetes.io/not-ready on every new node, and only the node lifecycle
// controller (not run here) would remove it once kwok reports the node Ready.
// CreateGPUNode also strips the taint should it ever be present.
package framework
