//go:build tools

// Package tools records Kueue, which hack/tools/build.sh builds from this
// module for the tests that run the controller under a real Kueue, so that
// `go mod tidy` keeps its dependencies in go.sum. Kueue has a module of its
// own because its release requires libraries that the control plane's
// module (hack/tools) must not raise. It requires the control plane's
// version of each library both compile, the Kubernetes ones among them, so
// that each is compiled once; where it and Karpenter (hack/tools/karpenter)
// share a library the control plane does not compile (controller-runtime,
// zap), both require the same version. build.sh links only its pod
// integration, the one the tests turn on.
package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"
