#!/usr/bin/env bash
# Fails when the code map of docs/architecture.md is not what
# hack/update-codemap.sh makes from the package comments: a package added,
# moved or removed, or a package comment whose first sentence changed. It
# prints the lines that differ and leaves the file as it is.
set -o errexit
set -o nounset
set -o pipefail

SCRIPT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${SCRIPT_ROOT}"
# The settings of every Go command of the Makefile, so that the build cache
# is shared with them.
export CGO_ENABLED=0
case " ${GOFLAGS:-} " in *" -trimpath "*) ;; *) export GOFLAGS="${GOFLAGS:-} -trimpath" ;; esac
"${GO:-go}" run ./hack/codemap -check docs/architecture.md
