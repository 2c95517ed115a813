//go:build tools

// Package tools records the commands that hack/tools/build.sh builds from this
// module, so that `go mod tidy` keeps their dependencies in go.sum.
// Prometheus has a module of its own so that its release's libraries come
// into no other build through it. Each library that it and the control plane
// (hack/tools) both compile is required at one version by both, the newer of
// the two, so that the library and the packages over it are compiled once:
// the control plane's where that is the newer (golang.org/x, client-go,
// apimachinery, gnostic-models), this release's where that is (protobuf
// v1.36.12, the release after the commit Kubernetes pins; go-openapi/swag
// v0.28.0; client_golang v1.24.1, client_model v0.6.3 and common v0.71.0;
// OpenTelemetry v1.46.0, its OTLP exporters and otelhttp v0.71.0; the
// genproto, grpc-gateway, httpsnoop and fsnotify releases that go with
// them), which the control plane, the project's go.mod, Kueue's and
// Karpenter's then require. A replace would not do it: the build cache keys
// a module's packages by the version required, not the replacement.
// Together, about two thirds of the packages Prometheus and promtool link
// (the standard library's among them) are compiled once for both.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
