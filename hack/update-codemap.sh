#!/usr/bin/env bash
# Rewrites the code map of docs/architecture.md from the package comments:
# one line per Go package and command. Run it after adding, moving or
# removing a package, or changing the first sentence of a package comment.
set -o errexit
set -o nounset
set -o pipefail

SCRIPT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${SCRIPT_ROOT}"
# The settings of every Go command of the Makefile, so that the build cache
# is shared with them.
export CGO_ENABLED=0
case " ${GOFLAGS:-} " in *" -trimpath "*) ;; *) export GOFLAGS="${GOFLAGS:-} -trimpath" ;; esac
"${GO:-go}" run ./hack/codemap -write docs/architecture.md
