#!/usr/bin/env bash
# Installs what a real node needs besides the kubelet (hack/tools/build.sh
# node builds that): containerd, runc, the CNI plugins and iptables, from
# Debian's packages, only when one is missing, so a second run does nothing.
# Needs root, as the node itself does. See docs/node.md.
set -euo pipefail

# command=package: the command whose absence means the package is missing.
need=(containerd=containerd ctr=containerd runc=runc iptables=iptables)
missing=()
for pair in "${need[@]}"; do
  if ! command -v "${pair%%=*}" >/dev/null 2>&1; then
    missing+=("${pair#*=}")
  fi
done
# Debian puts the CNI plugins outside PATH.
if [[ ! -x /usr/lib/cni/bridge && ! -x /opt/cni/bin/bridge ]]; then
  missing+=(containernetworking-plugins)
fi
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
# Sorted and unique: containerd is named by two commands.
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
echo ">> installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# --no-install-recommends: containerd would bring no service manager here, and
# nothing else it recommends is used.
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
