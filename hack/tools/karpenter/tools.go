//go:build tools

// Package tools records Karpenter's kwok provider, which hack/tools/build.sh
// builds from this module, so that `go mod tidy` keeps its dependencies in
// go.sum. The test that runs a real node autoscaler under the controller's
// scale-in uses it. Karpenter has a module of its own because its release
// requires libraries that the control plane's module (hack/tools) does not
// build. Each library that it and the control plane, Prometheus
// (hack/tools/prometheus) or Kueue (hack/tools/kueue) both compile, the
// Kubernetes ones among them, is required at one version by all of them, the
// newest that any requires, so that each is compiled once.
package tools

import _ "sigs.k8s.io/karpenter/kwok"
