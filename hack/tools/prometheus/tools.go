//go:build tools

// Package tools records the commands that hack/tools/build.sh builds from this
// module, so that `go mod tidy` keeps their dependencies in go.sum.
// Prometheus has a module of its own so that its release's newer libraries
// (otel, prometheus/common, protobuf) do not raise the control plane's. Where
// the control plane (hack/tools) requires the newer version of a library both
// use (golang.org/x, client-go, apimachinery, gnostic-models), this module
// requires that version too, so that the library and the packages over it
// are compiled once for both: about two fifths of what Prometheus compiles.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
