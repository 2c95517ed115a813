#!/usr/bin/env bash
# Writes prometheusrule.yaml, the PrometheusRule for the Prometheus Operator,
# from gputask-rules.yaml, the rule file that Prometheus and promtool read:
# its groups become the resource's spec.groups, unchanged. With --verify it
# writes nothing and fails when prometheusrule.yaml is not what it would write.
set -o errexit
set -o nounset
set -o pipefail

DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SOURCE=${DIR}/gputask-rules.yaml
TARGET=${DIR}/prometheusrule.yaml

render() {
  cat <<'HEADER'
# Generated from gputask-rules.yaml by generate.sh: edit that file and run
# artifacts/monitoring/generate.sh. `make test-alerts` checks that the two agree.
#
# kubectl apply -k artifacts/monitoring
# A Prometheus managed by the Prometheus Operator loads it when the labels
# below match its ruleSelector (kube-prometheus-stack selects release=<its
# release name> by default: add that label in a kustomize patch).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: gputask-controller
  labels:
    app.kubernetes.io/name: gputask-controller
    app.kubernetes.io/component: alerting
spec:
HEADER
  # The rule file without its leading comment, indented under spec. Empty
  # lines stay empty, so that no line ends in spaces.
  sed -e '1,/^groups:/{/^#/d;/^$/d}' -e 's/^\(.\)/  \1/' "${SOURCE}"
}

if [[ "${1:-}" == "--verify" ]]; then
  if ! diff -u "${TARGET}" <(render); then
    echo "${TARGET} differs from what generate.sh makes of ${SOURCE}: run artifacts/monitoring/generate.sh" >&2
    exit 1
  fi
  echo "prometheusrule.yaml agrees with gputask-rules.yaml"
  exit 0
fi
render > "${TARGET}"
