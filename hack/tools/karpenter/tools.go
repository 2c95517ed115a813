//go:build tools

// Package tools records Karpenter's kwok provider, which hack/tools/build.sh
// builds from this module, so that `go mod tidy` keeps its dependencies in
// go.sum. The test that runs a real node autoscaler under the controller's
// scale-in uses it. Karpenter has a module of its own because it is
// built on the Kubernetes libraries of its own release, not on those of the
// control plane in hack/tools. Where it and Kueue (hack/tools/kueue) share a
// library, both require the same version, the higher of the two releases'
// (a patch release apart at most), so that the library is compiled once.
package tools

import _ "sigs.k8s.io/karpenter/kwok"
