#!/usr/bin/env bash
# Builds the local control plane into bin/ (or $BIN_DIR): etcd, kube-apiserver,
# kube-scheduler, kube-controller-manager, kubectl and kwok; Helm, for the
# chart's tests; and the Prometheus server that the tests of the Prometheus
# load-index source query, with its promtool; Kueue, for the tests that run
# the controller under it; and Karpenter, a node autoscaler, for the test of
# how many nodes a scale-in leaves up. A binary that is already there is left alone,
# so a second run does nothing.
set -euo pipefail

TOOLS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "${TOOLS_DIR}/../.." && pwd)
BIN_DIR=${BIN_DIR:-${ROOT}/bin}
KUBE_VERSION=$(cd "${TOOLS_DIR}" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
# Stamp the version the way the Kubernetes release build does, so that
# `kubectl version` and the components' /version report the real release.
VERSION_PKG=k8s.io/component-base/version
LDFLAGS="-s -w -X ${VERSION_PKG}.gitVersion=${KUBE_VERSION} -X ${VERSION_PKG}.gitTreeState=clean"
KUBE_MINOR=${KUBE_VERSION#v1.}; KUBE_MINOR=${KUBE_MINOR%%.*}
LDFLAGS+=" -X ${VERSION_PKG}.gitMajor=1 -X ${VERSION_PKG}.gitMinor=${KUBE_MINOR}"
mkdir -p "${BIN_DIR}"
# Temporary directories of the builds below, removed however the script ends.
tmp_dirs=()
trap 'rm -rf "${tmp_dirs[@]}"' EXIT

# build compiles, in module directory dir, the missing commands among
# "name=package" pairs with one go build, so that their common packages are
# compiled once and the links of the large binaries overlap.
build() {
  local dir=$1 ldflags=$2 tags=$3; shift 3
  local pkgs=() names=() pair
  for pair in "$@"; do
    if [[ ! -x "${BIN_DIR}/${pair%%=*}" ]]; then
      names+=("${pair%%=*}"); pkgs+=("${pair#*=}")
    fi
  done
  if [[ ${#pkgs[@]} -eq 0 ]]; then
    return
  fi
  echo ">> building ${names[*]}"
  local out i
  out=$(mktemp -d "${BIN_DIR}/.build.XXXXXX")
  if ! (cd "${dir}" && CGO_ENABLED=0 go build -trimpath -tags "${tags}" -ldflags="${ldflags}" -o "${out}/" "${pkgs[@]}"); then
    rm -rf "${out}"
    return 1
  fi
  for i in "${!pkgs[@]}"; do
    mv "${out}/${pkgs[$i]##*/}" "${BIN_DIR}/${names[$i]}"
  done
  rmdir "${out}"
}

# build_karpenter builds Karpenter, the node autoscaler of the test that
# measures how many nodes a scale-in leaves up (docs/cost.md), from a module
# of its own (hack/tools/karpenter) at the release go.mod pins: its kwok
# provider, whose nodes are plain Node objects that the tests' kwok makes
# Ready. Its CRDs (NodePool, NodeClaim, KWOKNodeClass) are taken from the
# same module, as its kwok chart installs them, into bin/karpenter-manifests.
# One thing changes in what is built: its metrics and health servers listen
# on 127.0.0.1 instead of every interface, on the ports its flags give. The
# build takes the module from a copy with that change, through a go.mod of
# its own that replaces the module with the copy (the module cache is read
# only, and a build overlay may not replace files there).
build_karpenter() {
  local dir=${TOOLS_DIR}/karpenter
  if [[ -x "${BIN_DIR}/karpenter" && -d "${BIN_DIR}/karpenter-manifests" ]]; then
    return
  fi
  local version src copy any_interface='fmt.Sprintf(":%d", '
  version=$(cd "${dir}" && go list -m -f '{{.Version}}' sigs.k8s.io/karpenter)
  src=$(cd "${dir}" && go mod download -json sigs.k8s.io/karpenter | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  if [[ $(grep -cF "${any_interface}" "${src}/pkg/operator/operator.go") -ne 2 ]]; then
    echo "karpenter ${version}: pkg/operator/operator.go has not two lines with ${any_interface}; update $0" >&2
    return 1
  fi
  copy=$(mktemp -d "${dir}/build.XXXXXX")
  tmp_dirs+=("${copy}")
  mkdir "${copy}/karpenter"
  cp -r "${src}/go.mod" "${src}/pkg" "${src}/kwok" "${copy}/karpenter/"
  chmod -R u+w "${copy}/karpenter"
  sed -i "s|${any_interface}|fmt.Sprintf(\"127.0.0.1:%d\", |" "${copy}/karpenter/pkg/operator/operator.go"
  cp "${dir}/go.sum" "${copy}/go.sum"
  { cat "${dir}/go.mod"; echo "replace sigs.k8s.io/karpenter => ./${copy##*/}/karpenter"; } > "${copy}/go.mod"
  rm -f "${BIN_DIR}/karpenter"
  GOFLAGS="$(go env GOFLAGS) -modfile=${copy}/go.mod" \
    build "${dir}" "-s -w -X sigs.k8s.io/karpenter/pkg/operator.Version=${version}" "" \
    karpenter=sigs.k8s.io/karpenter/kwok
  rm -rf "${BIN_DIR}/karpenter-manifests"
  mkdir -p "${BIN_DIR}/karpenter-manifests/crds"
  cp "${src}"/kwok/charts/crds/karpenter.sh_nodepools.yaml \
    "${src}"/kwok/charts/crds/karpenter.sh_nodeclaims.yaml \
    "${src}"/kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml \
    "${BIN_DIR}/karpenter-manifests/crds/"
  chmod -R u+w "${BIN_DIR}/karpenter-manifests"
}

# `build.sh karpenter` builds only Karpenter.
if [[ "${1:-}" == karpenter ]]; then
  build_karpenter
  exit 0
fi

# `build.sh node` builds only the kubelet, from the same module and with the
# same version stamps as the control plane, for the tests that run a real
# node (test/node, docs/node.md); the other builds do not need it.
if [[ "${1:-}" == node ]]; then
  build "${TOOLS_DIR}" "${LDFLAGS}" "" kubelet=k8s.io/kubernetes/cmd/kubelet
  exit 0
fi

# kwok and Helm come from this module, at the versions go.mod pins, on the
# same Kubernetes libraries as the control plane, and are built with it.
# Helm's version stamps are those of its own Makefile, so that `helm version`
# reports the release; the default Kubernetes version that `helm lint` and
# `helm template` assume Helm reads from the client-go it is built with.
HELM_VERSION=$(cd "${TOOLS_DIR}" && go list -m -f '{{.Version}}' helm.sh/helm/v4)
LDFLAGS+=" -X helm.sh/helm/v4/internal/version.version=${HELM_VERSION} -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
build "${TOOLS_DIR}" "${LDFLAGS}" "" \
  etcd=./etcd \
  kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
  kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler \
  kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
  kubectl=k8s.io/kubernetes/cmd/kubectl \
  kwok=sigs.k8s.io/kwok/cmd/kwok \
  helm=helm.sh/helm/v4/cmd/helm
# `build.sh control-plane` stops here: the benchmarks need nothing more.
if [[ "${1:-}" == control-plane ]]; then
  exit 0
fi

# Prometheus comes from a module of its own (hack/tools/prometheus), so that its
# newer libraries never raise the control plane's, on the control plane's
# versions where those are the newer (see its tools.go): the server for the tests of the
# Prometheus source, and promtool, from the same release, which checks and
# unit-tests the alert rules in artifacts/monitoring (make test-alerts).
# remove_all_sd leaves out the cloud service discoveries, a large part of the
# build: the tests scrape static targets. Without the builtinassets tag the web
# UI is absent; the HTTP API, which is all the tests use, works without it.
PROM_DIR=${TOOLS_DIR}/prometheus
module_version=$(cd "${PROM_DIR}" && go list -m -f '{{.Version}}' github.com/prometheus/prometheus)
# Module v0.315.0 is Prometheus 3.15.0.
release=${module_version#v0.}; release=${release%%[-+]*}
minor=${release%%.*}
version="$((minor / 100)).$((minor % 100)).${release#*.}"
build "${PROM_DIR}" "-s -w -X github.com/prometheus/common/version.Version=${version}" remove_all_sd \
  prometheus=github.com/prometheus/prometheus/cmd/prometheus \
  promtool=github.com/prometheus/prometheus/cmd/promtool
# `build.sh demo` stops here: the demo runs a Prometheus that scrapes its
# fake vLLM endpoint, and nothing more.
if [[ "${1:-}" == demo ]]; then
  exit 0
fi

# Kueue, for the tests that run the controller under a real Kueue, comes from
# a module of its own (hack/tools/kueue) at the release go.mod pins, on the
# control plane's Kubernetes libraries, so that those are compiled once. Two
# things are taken from its source next to the binary, into
# bin/kueue-manifests: its CRDs and its webhook configurations, which the
# tests install with the webhooks pointed at 127.0.0.1. The build takes the
# module from a copy with three changes, through a go.mod of its own that
# replaces the module with the copy (as Karpenter's, below):
#   - main reads the directory of the metrics certificate, fixed at
#     /etc/kueue/metrics/certs, from KUEUE_METRICS_CERT_DIR, so that the tests
#     serve Kueue's metrics with a certificate of their own directory instead
#     of writing to /etc;
#   - main links the one job integration the tests turn on, the pod's, instead
#     of all of them: the others bring in the APIs of a dozen operators
#     (Kubeflow's trainer among them, which names core/v1 types the control
#     plane's release has removed);
#   - the job framework's list of the kinds a workload may be prebuilt for
#     names TrainJob by its group, version and kind instead of through the
#     trainer's API package, the one other import of it.
build_kueue() {
  local dir=${TOOLS_DIR}/kueue
  if [[ -x "${BIN_DIR}/kueue" && -d "${BIN_DIR}/kueue-manifests" ]]; then
    return
  fi
  local version src copy check file line
  version=$(cd "${dir}" && go list -m -f '{{.Version}}' sigs.k8s.io/kueue)
  src=$(cd "${dir}" && go mod download -json sigs.k8s.io/kueue | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  local main=cmd/kueue/main.go validation=pkg/controller/jobframework/validation.go
  local cert_dir='metricsCertPath := "/etc/kueue/metrics/certs"'
  local all_jobs='_ "sigs.k8s.io/kueue/pkg/controller/jobs"'
  local trainer_import='kftrainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"'
  local trainer_kind='kftrainer.SchemeGroupVersion.WithKind(kftrainer.TrainJobKind).String()'
  for check in "${main}|${cert_dir}" "${main}|${all_jobs}" "${validation}|${trainer_import}" "${validation}|${trainer_kind}"; do
    file=${check%%|*}; line=${check#*|}
    if [[ $(grep -cF "${line}" "${src}/${file}") -ne 1 ]]; then
      echo "kueue ${version}: ${file} has not one line with ${line}; update $0" >&2
      return 1
    fi
  done
  copy=$(mktemp -d "${dir}/build.XXXXXX")
  tmp_dirs+=("${copy}")
  mkdir "${copy}/kueue"
  cp -r "${src}/go.mod" "${src}/apis" "${src}/cmd" "${src}/pkg" "${copy}/kueue/"
  chmod -R u+w "${copy}/kueue"
  sed -i -e "s|${cert_dir}|metricsCertPath := os.Getenv(\"KUEUE_METRICS_CERT_DIR\")|" \
    -e "s|${all_jobs}|_ \"sigs.k8s.io/kueue/pkg/controller/jobs/pod\"|" "${copy}/kueue/${main}"
  sed -i -e "\|${trainer_import}|d" \
    -e "s|${trainer_kind}|\"trainer.kubeflow.org/v1alpha1, Kind=TrainJob\"|" "${copy}/kueue/${validation}"
  cp "${dir}/go.sum" "${copy}/go.sum"
  { cat "${dir}/go.mod"; echo "replace sigs.k8s.io/kueue => ./${copy##*/}/kueue"; } > "${copy}/go.mod"
  rm -f "${BIN_DIR}/kueue"
  GOFLAGS="$(go env GOFLAGS) -modfile=${copy}/go.mod" \
    build "${dir}" "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=${version}" "" \
    kueue=sigs.k8s.io/kueue/cmd/kueue
  rm -rf "${BIN_DIR}/kueue-manifests"
  mkdir -p "${BIN_DIR}/kueue-manifests/crds"
  cp "${src}"/config/components/crd/bases/*.yaml "${BIN_DIR}/kueue-manifests/crds/"
  cp "${src}/config/components/webhook/manifests.yaml" "${BIN_DIR}/kueue-manifests/webhooks.yaml"
  chmod -R u+w "${BIN_DIR}/kueue-manifests"
}

build_kueue
build_karpenter
