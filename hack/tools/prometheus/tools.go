//go:build tools

// Package tools records the commands that hack/tools/build.sh builds from this
// module, so that `go mod tidy` keeps their dependencies in go.sum.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
