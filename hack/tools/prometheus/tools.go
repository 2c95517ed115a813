//go:build tools

// Package tools records the commands that hack/tools/build.sh builds from this
// module, so that `go mod tidy` keeps their dependencies in go.sum.
// Prometheus has a module of its own so that its release's newer libraries
// (otel, prometheus/common) do not raise the control plane's. Where the
// control plane (hack/tools) requires the newer version of a library both use
// (golang.org/x, client-go, apimachinery, gnostic-models), this module
// requires that version too, so that the library and the packages over it
// are compiled once for both. Two go the other way: the control plane, and
// the project's go.mod with it, require this release's protobuf (v1.36.12,
// the release after the commit Kubernetes pins) and go-openapi/swag (v0.28.0),
// which client-go and kube-openapi import, so that those and what is built
// on them are compiled once too. A replace would not do it: the build cache
// keys a module's packages by the version required, not the replacement.
// Together, about three fifths of what Prometheus compiles is shared.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
