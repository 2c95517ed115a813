//go:build tools

// Package tools records Kueue, which hack/tools/build.sh builds from this
// module for the tests that run the controller under a real Kueue, so that
// `go mod tidy` keeps its dependencies in go.sum. Kueue has a module of its
// own because its release requires libraries that the control plane's
// module (hack/tools) does not build. Each library that it and the control
// plane, Prometheus (hack/tools/prometheus) or Karpenter (hack/tools/karpenter)
// both compile, the Kubernetes ones among them, is required at one version by
// all of them, the newest that any requires (zap v1.28.0 and logrus v1.10.2
// among them), so that each is compiled once. build.sh links only its pod
// integration, the one the tests turn on.
package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"
