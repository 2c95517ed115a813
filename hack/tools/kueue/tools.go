//go:build tools

// Package tools records Kueue, which hack/tools/build.sh builds from this
// module for the tests that run the controller under a real Kueue, so that
// `go mod tidy` keeps its dependencies in go.sum. Kueue has a module of its
// own because it is built on the Kubernetes libraries of its own release,
// not on those of the control plane in hack/tools. Where it and Karpenter
// (hack/tools/karpenter) share a library, both require the same version, so
// that the library is compiled once.
package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"
