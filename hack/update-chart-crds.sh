#!/usr/bin/env bash
# Copies what the Helm chart shares with artifacts/ into charts/gputask-controller:
#   artifacts/crds: the CRDs to crds/ (installed by Helm as they are), every
#     other resource of its kustomization (the admission policies) to
#     files/admission/, which templates/admission-policies.yaml renders;
#   artifacts/monitoring: the alerting rules (gputask-rules.yaml, a Prometheus
#     rule file) to files/alerts.yaml, which templates/prometheusrule.yaml
#     renders.
# hack/update-codegen.sh runs it last. With --verify it changes nothing and
# fails when the chart differs from artifacts/.
#
# Usage: hack/update-chart-crds.sh [--verify] [ROOT]   (ROOT: the repository)
set -o errexit
set -o nounset
set -o pipefail

verify=false
if [[ "${1:-}" == "--verify" ]]; then
  verify=true
  shift
fi
ROOT=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
CRDS=${ROOT}/artifacts/crds
MONITORING=${ROOT}/artifacts/monitoring
CHART=${ROOT}/charts/gputask-controller

# Build the chart's copy in a scratch directory, then compare or install it.
want=$(mktemp -d)
trap 'rm -rf "${want}"' EXIT
mkdir -p "${want}/crds" "${want}/files/admission"

# The resources of artifacts/crds, in the kustomization's order.
resources=$(sed -n 's/^- *\([^ #]*\.yaml\).*$/\1/p' "${CRDS}/kustomization.yaml")
if [[ -z "${resources}" ]]; then
  echo "no resources listed in ${CRDS}/kustomization.yaml" >&2
  exit 1
fi
for name in ${resources}; do
  if grep -q '^kind: CustomResourceDefinition$' "${CRDS}/${name}"; then
    cp "${CRDS}/${name}" "${want}/crds/${name}"
  else
    cp "${CRDS}/${name}" "${want}/files/admission/${name}"
  fi
done

# The alerting rules: a Prometheus rule file (groups: [...]).
if [[ -f "${MONITORING}/gputask-rules.yaml" ]]; then
  cp "${MONITORING}/gputask-rules.yaml" "${want}/files/alerts.yaml"
fi

# Only these paths belong to this script; the rest of the chart is written by hand.
paths=(crds files/admission files/alerts.yaml)
if [[ "${verify}" == true ]]; then
  status=0
  for path in "${paths[@]}"; do
    if [[ -e "${want}/${path}" || -e "${CHART}/${path}" ]]; then
      if ! diff -Naupr "${CHART}/${path}" "${want}/${path}"; then
        status=1
      fi
    fi
  done
  if [[ ${status} -ne 0 ]]; then
    echo "charts/gputask-controller differs from artifacts/: run hack/update-chart-crds.sh" >&2
    exit 1
  fi
  echo "charts/gputask-controller matches artifacts/"
  exit 0
fi

for path in "${paths[@]}"; do
  rm -rf "${CHART:?}/${path}"
  if [[ -e "${want}/${path}" ]]; then
    mkdir -p "$(dirname "${CHART}/${path}")"
    cp -R "${want}/${path}" "${CHART}/${path}"
  fi
done
