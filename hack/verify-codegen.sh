#!/usr/bin/env bash
# Fails when pkg/generated (clientset, apply configurations with their schema,
# listers, informers, OpenAPI definitions and their API rule report), the
# deepcopy functions and OpenAPI model names in pkg/apis, artifacts/crds, or
# the chart's copies of the CRDs, admission policies and alert rules
# differ from what hack/update-codegen.sh makes from pkg/apis. The tree is
# left as it was.
set -o errexit
set -o nounset
set -o pipefail

SCRIPT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${SCRIPT_ROOT}"

TMP=$(mktemp -d)
trap 'rm -rf "${TMP}"' EXIT

# Generate into a copy so that a stale tree is reported, not silently fixed.
# Built binaries and _output (the logs that `make test` writes while this runs
# beside its tests) are left out.
mkdir -p "${TMP}/src"
tar -C "${SCRIPT_ROOT}" --exclude=./bin --exclude=./.git --exclude=./_output -cf - . | tar -C "${TMP}/src" -xf -
(cd "${TMP}/src" && GOBIN="${GOBIN:-${SCRIPT_ROOT}/bin/codegen}" bash hack/update-codegen.sh >/dev/null)

status=0
for dir in pkg/apis pkg/generated artifacts/crds charts/gputask-controller/crds charts/gputask-controller/files; do
  if ! diff -Naupr "${SCRIPT_ROOT}/${dir}" "${TMP}/src/${dir}"; then
    status=1
  fi
done
if [[ ${status} -ne 0 ]]; then
  echo "generated code is out of date: run hack/update-codegen.sh" >&2
  exit 1
fi
echo "generated code is up to date"
