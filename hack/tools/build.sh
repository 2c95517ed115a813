#!/usr/bin/env bash
# Builds the local control plane into bin/ (or $BIN_DIR): etcd, kube-apiserver,
# kube-scheduler, kube-controller-manager, kubectl and kwok; the Prometheus
# server that the tests of the Prometheus load-index source query and its
# promtool; and Helm, for the chart's tests. A binary that is already there is
# left alone, so a second run does nothing.
set -euo pipefail

TOOLS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "${TOOLS_DIR}/../.." && pwd)
BIN_DIR=${BIN_DIR:-${ROOT}/bin}
KWOK_VERSION=v0.8.0
KUBE_VERSION=$(cd "${TOOLS_DIR}" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
# Stamp the version the way the Kubernetes release build does, so that
# `kubectl version` and the components' /version report the real release.
VERSION_PKG=k8s.io/component-base/version
LDFLAGS="-s -w -X ${VERSION_PKG}.gitVersion=${KUBE_VERSION} -X ${VERSION_PKG}.gitTreeState=clean"
KUBE_MINOR=${KUBE_VERSION#v1.}; KUBE_MINOR=${KUBE_MINOR%%.*}
LDFLAGS+=" -X ${VERSION_PKG}.gitMajor=1 -X ${VERSION_PKG}.gitMinor=${KUBE_MINOR}"
mkdir -p "${BIN_DIR}"

build() {
  local name=$1 pkg=$2
  if [[ -x "${BIN_DIR}/${name}" ]]; then
    return
  fi
  echo ">> building ${name} (${pkg})"
  (cd "${TOOLS_DIR}" && CGO_ENABLED=0 go build -trimpath -ldflags="${LDFLAGS}" -o "${BIN_DIR}/${name}.tmp" "${pkg}")
  mv "${BIN_DIR}/${name}.tmp" "${BIN_DIR}/${name}"
}

build etcd ./etcd
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build kubectl k8s.io/kubernetes/cmd/kubectl

if [[ ! -x "${BIN_DIR}/kwok" ]]; then
  echo ">> building kwok ${KWOK_VERSION}"
  tmp=$(mktemp -d)
  GOBIN="${tmp}" CGO_ENABLED=0 go install -trimpath -ldflags='-s -w' "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
  mv "${tmp}/kwok" "${BIN_DIR}/kwok"
  rmdir "${tmp}"
fi

# Prometheus comes from a module of its own (hack/tools/prometheus), so that its
# dependencies never meet the Kubernetes ones: the server for the tests of the
# Prometheus source, and promtool, from the same release, which checks and
# unit-tests the alert rules in artifacts/monitoring (make test-alerts).
# remove_all_sd leaves out the cloud service discoveries, a large part of the
# build: the tests scrape static targets. Without the builtinassets tag the web
# UI is absent; the HTTP API, which is all the tests use, works without it.
PROM_DIR=${TOOLS_DIR}/prometheus
build_prometheus() {
  local name=$1
  if [[ -x "${BIN_DIR}/${name}" ]]; then
    return
  fi
  local module_version release minor version
  module_version=$(cd "${PROM_DIR}" && go list -m -f '{{.Version}}' github.com/prometheus/prometheus)
  # Module v0.315.0 is Prometheus 3.15.0.
  release=${module_version#v0.}; release=${release%%[-+]*}
  minor=${release%%.*}
  version="$((minor / 100)).$((minor % 100)).${release#*.}"
  echo ">> building ${name} ${version} (github.com/prometheus/prometheus ${module_version})"
  (cd "${PROM_DIR}" && CGO_ENABLED=0 go build -trimpath -tags remove_all_sd \
    -ldflags="-s -w -X github.com/prometheus/common/version.Version=${version}" \
    -o "${BIN_DIR}/${name}.tmp" "github.com/prometheus/prometheus/cmd/${name}")
  mv "${BIN_DIR}/${name}.tmp" "${BIN_DIR}/${name}"
}
build_prometheus prometheus
build_prometheus promtool

# Helm comes from a module of its own (hack/tools/helm), like Prometheus, so
# that its dependencies never meet the Kubernetes ones. The version stamps are
# those of Helm's own Makefile: `helm version` reports the release, and the
# default Kubernetes version that `helm lint` and `helm template` assume is
# the minor of the client-go Helm was built with.
if [[ ! -x "${BIN_DIR}/helm" ]]; then
  HELM_DIR=${TOOLS_DIR}/helm
  HELM_VERSION=$(cd "${HELM_DIR}" && go list -m -f '{{.Version}}' helm.sh/helm/v3)
  HELM_KUBE_MINOR=$(cd "${HELM_DIR}" && go list -m -f '{{.Version}}' k8s.io/client-go)
  HELM_KUBE_MINOR=${HELM_KUBE_MINOR#v0.}; HELM_KUBE_MINOR=${HELM_KUBE_MINOR%%.*}
  HELM_LDFLAGS="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION} -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    HELM_LDFLAGS+=" -X ${pkg}.k8sVersionMajor=1 -X ${pkg}.k8sVersionMinor=${HELM_KUBE_MINOR}"
  done
  echo ">> building helm ${HELM_VERSION} (helm.sh/helm/v3)"
  (cd "${HELM_DIR}" && CGO_ENABLED=0 go build -trimpath -ldflags="${HELM_LDFLAGS}" \
    -o "${BIN_DIR}/helm.tmp" helm.sh/helm/v3/cmd/helm)
  mv "${BIN_DIR}/helm.tmp" "${BIN_DIR}/helm"
fi
