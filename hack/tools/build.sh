#!/usr/bin/env bash
# Builds the local control plane into bin/ (or $BIN_DIR): etcd, kube-apiserver,
# kube-scheduler, kube-controller-manager, kubectl and kwok. A binary that is
# already there is left alone, so a second run does nothing.
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
