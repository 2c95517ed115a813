#!/usr/bin/env bash
# Regenerates everything derived from pkg/apis: deepcopy functions, OpenAPI
# model names, and in pkg/generated the OpenAPI definitions, the apply
# configurations, the typed clientset (with its fake), listers and informers;
# and the CRD manifests in artifacts/crds. The generators come from go.mod (the `tool`
# block), so nothing but Go is needed.
set -o errexit
set -o nounset
set -o pipefail

SCRIPT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${SCRIPT_ROOT}"

MODULE=$(go list -m)
# On a fresh machine the module is not in the module cache yet, and go list
# reports no directory for it until it is downloaded.
go mod download k8s.io/code-generator
CODEGEN_PKG=$(go list -m -f '{{.Dir}}' k8s.io/code-generator)
if [[ ! -f "${CODEGEN_PKG}/kube_codegen.sh" ]]; then
  echo "k8s.io/code-generator not found in the module cache (got '${CODEGEN_PKG}')" >&2
  exit 1
fi
# kube_codegen.sh installs the generators into GOBIN; keep them out of the
# user's GOPATH/bin and reuse them between runs.
export GOBIN="${GOBIN:-${SCRIPT_ROOT}/bin/codegen}"
mkdir -p "${GOBIN}"

# shellcheck source=/dev/null
source "${CODEGEN_PKG}/kube_codegen.sh"

OUTPUT_DIR=${OUTPUT_DIR:-${SCRIPT_ROOT}}
BOILERPLATE="${SCRIPT_ROOT}/hack/boilerplate.go.txt"

kube::codegen::gen_helpers \
  --boilerplate "${BOILERPLATE}" \
  "${OUTPUT_DIR}/pkg/apis"

# The OpenAPI definitions of our types, and of the Kubernetes types they use
# (the task's pod template is a core/v1 PodSpec), feed the apply
# configurations below. The model names (zz_generated.model_name.go, from the
# +k8s:openapi-model-package marker) are the names the scheme gives the kinds,
# so that the fake clientset finds their schema. openapi-gen's API rule
# report is written next to the definitions, so verify-codegen.sh shows a new
# violation as a diff. Ours is the one known one: GPUTaskSpec's gpu-amount,
# the field name users already write.
KUBE_CODEGEN_READONLY_PKGS+=(k8s.io/api/core/v1)
kube::codegen::gen_openapi \
  --output-dir "${OUTPUT_DIR}/pkg/generated/openapi" \
  --output-pkg "${MODULE}/pkg/generated/openapi" \
  --output-model-name-file zz_generated.model_name.go \
  --extra-pkgs k8s.io/api/core/v1 \
  --extra-pkgs k8s.io/apimachinery/pkg/util/intstr \
  --report-filename "${OUTPUT_DIR}/pkg/generated/openapi/api_violations.list" \
  --update-report \
  --boilerplate "${BOILERPLATE}" \
  "${OUTPUT_DIR}/pkg/apis"

# Apply configurations (GPUTaskApplyConfiguration, ...) and the typed clients'
# Apply and ApplyStatus. With the schema, the fake clientset's NewClientset
# tracks managed fields and serves server-side apply for our kinds too.
OPENAPI_SCHEMA=$(mktemp)
trap 'rm -f "${OPENAPI_SCHEMA}"' EXIT
(cd "${OUTPUT_DIR}" && go run ./pkg/generated/openapi/cmd/models-schema) > "${OPENAPI_SCHEMA}"

kube::codegen::gen_client \
  --with-watch \
  --with-applyconfig \
  --applyconfig-openapi-schema "${OPENAPI_SCHEMA}" \
  --output-dir "${OUTPUT_DIR}/pkg/generated" \
  --output-pkg "${MODULE}/pkg/generated" \
  --boilerplate "${BOILERPLATE}" \
  "${OUTPUT_DIR}/pkg/apis"

# controller-gen reads the types' markers and doc comments, so `kubectl explain`
# shows the same descriptions as the Go documentation. generateEmbeddedObjectMeta
# keeps the labels and annotations of the pod template's ephemeral volume claim
# templates, which would otherwise be pruned.
go tool controller-gen crd:crdVersions=v1,generateEmbeddedObjectMeta=true \
  paths=./pkg/apis/... \
  output:crd:artifacts:config="${OUTPUT_DIR}/artifacts/crds"

# controller-gen cannot put maxLength on a resource.Quantity (an int or a
# string), and without it the API server estimates the CEL rules on the
# GPUTaskSet's thresholds, target and tolerance as if each string could be
# megabytes long, over the cost budget. No quantity needs more than 64
# characters.
awk '
  /^ *x-kubernetes-int-or-string: true$/ && prev !~ /^ *maxLength:/ {
    indent = $0; sub(/x-kubernetes-int-or-string.*/, "", indent)
    print indent "maxLength: 64"
  }
  { print; prev = $0 }
' "${OUTPUT_DIR}/artifacts/crds/gputask.io_gputasksets.yaml" > "${OUTPUT_DIR}/artifacts/crds/gputask.io_gputasksets.yaml.tmp"
mv "${OUTPUT_DIR}/artifacts/crds/gputask.io_gputasksets.yaml.tmp" "${OUTPUT_DIR}/artifacts/crds/gputask.io_gputasksets.yaml"
# The pod templates carry the whole PodSpec schema from k8s.io/api. Its
# descriptions are the Kubernetes API reference and would make each CRD about
# four times larger, so they are dropped below the templates' spec only.
go run ./hack/crdtrim "${OUTPUT_DIR}"/artifacts/crds/gputask.io_*.yaml
hack/update-chart-crds.sh "${OUTPUT_DIR}"
