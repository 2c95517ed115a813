#!/usr/bin/env bash
# make test-alerts: checks the alert rules with promtool (from make tools):
#   - prometheusrule.yaml agrees with gputask-rules.yaml (generate.sh --verify);
#   - the rules parse and their templates compile (promtool check rules);
#   - the unit tests in gputask-rules_test.yaml pass (promtool test rules);
#   - every alert has a unit test in which it fires, and a section in
#     docs/alerts.md.
# Usage: artifacts/monitoring/test.sh [path/to/promtool]
set -o errexit
set -o nounset
set -o pipefail

DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "${DIR}/../.." && pwd)
PROMTOOL=${1:-${ROOT}/bin/promtool}
if [[ ! -x "${PROMTOOL}" ]]; then
  echo "${PROMTOOL} not found: run make tools" >&2
  exit 1
fi

"${DIR}/generate.sh" --verify
"${PROMTOOL}" check rules "${DIR}/gputask-rules.yaml"
(cd "${DIR}" && "${PROMTOOL}" test rules gputask-rules_test.yaml)

status=0
alerts=$(sed -n 's/^ *- alert: *//p' "${DIR}/gputask-rules.yaml")
for alert in ${alerts}; do
  # A test in which the alert fires names it, then gives a non-empty exp_alerts.
  if ! awk -v a="${alert}" '
      $0 ~ "alertname: " a "$" { found = 1; next }
      found && /exp_alerts:/ { if ($0 !~ /\[\]/) fires = 1; found = 0 }
      END { exit !fires }
    ' "${DIR}/gputask-rules_test.yaml"; then
    echo "alert ${alert} has no unit test in which it fires" >&2
    status=1
  fi
  if ! grep -q "^## ${alert}\$" "${ROOT}/docs/alerts.md"; then
    echo "alert ${alert} has no section '## ${alert}' in docs/alerts.md" >&2
    status=1
  fi
done
if [[ ${status} -ne 0 ]]; then
  exit 1
fi
echo "$(wc -w <<< "${alerts}") alerts: each unit-tested and documented"
