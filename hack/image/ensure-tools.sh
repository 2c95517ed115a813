#!/usr/bin/env bash
# Installs podman, buildah and runc from the distribution's packages when one
# of them is missing. `make test-image` and `make node-tools` (and so `make
# test`, whose real node runs the image it builds) run it, because a fresh
# machine has none of them and no Docker engine.
set -euo pipefail

missing=()
for tool in podman buildah runc; do
	command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [[ ${#missing[@]} -eq 0 ]]; then
	exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "missing ${missing[*]}: install podman, buildah and runc with your package manager" >&2
	exit 1
fi
sudo=()
if [[ $(id -u) -ne 0 ]]; then
	sudo=(sudo)
fi
echo "installing podman, buildah and runc (missing: ${missing[*]})"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq podman buildah runc
