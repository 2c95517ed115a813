//go:build tools

// Package tools records the commands that hack/tools/build.sh builds from
// this module, so that `go mod tidy` keeps their dependencies in go.sum.
// The libraries this module shares with the project's own go.mod (the
// Kubernetes staging modules, grpc, otel, golang.org/x) are required at the
// project's versions: the make targets build with the same settings
// everywhere, so those packages are compiled once for both.
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
