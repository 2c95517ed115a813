//go:build tools

// Package tools records Karpenter's kwok provider, which hack/tools/build.sh
// builds from this module, so that `go mod tidy` keeps its dependencies in
// go.sum. The test that runs a real node autoscaler under the controller's
// scale-in uses it. Karpenter has a module of its own because its release
// requires libraries that the control plane's module (hack/tools) must not
// raise. It requires the control plane's version of each library both
// compile, the Kubernetes ones among them, so that each is compiled once;
// where it and Kueue (hack/tools/kueue) share a library the control plane
// does not compile (controller-runtime, zap), both require the same version.
package tools

import _ "sigs.k8s.io/karpenter/kwok"
