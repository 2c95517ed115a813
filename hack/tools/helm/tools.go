//go:build tools

// Package tools records the command that hack/tools/build.sh builds from this
// module, so that `go mod tidy` keeps its dependencies in go.sum.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
