#!/usr/bin/env bash
# Assembles the two base images the Dockerfile takes as build arguments, from
# scratch and from what this machine has, for hosts that reach no image
# registry:
#
#   base-images.sh BUILDER_TAG RUNTIME_TAG
#
# BUILDER_TAG stands in for golang:1.26: the Go toolchain of `go env GOROOT`
# at /usr/local/go, with GOPATH=/go and GOTOOLCHAIN=local, and no shell (the
# Dockerfile's RUN steps use the exec form). It builds offline when the build
# mounts a module cache at /go/pkg/mod and passes GOPROXY=off.
#
# RUNTIME_TAG stands in for gcr.io/distroless/static:nonroot: the host's CA
# bundle, a passwd and group file with root and nonroot (65532), a /tmp and
# /home/nonroot, and USER 65532:65532. Nothing else, not even a shell.
#
# buildah uses the storage of CONTAINERS_STORAGE_CONF, if set.
set -euo pipefail

if [[ $# -ne 2 ]]; then
	echo "usage: $0 BUILDER_TAG RUNTIME_TAG" >&2
	exit 2
fi
builder_tag=$1
runtime_tag=$2

goroot=$(go env GOROOT)
ca_bundle=/etc/ssl/certs/ca-certificates.crt
if [[ ! -s $ca_bundle ]]; then
	echo "$ca_bundle is missing: install ca-certificates" >&2
	exit 1
fi

work=$(mktemp -d)
containers=()
cleanup() {
	for c in "${containers[@]}"; do
		buildah rm "$c" >/dev/null 2>&1 || true
	done
	rm -rf "$work"
}
trap cleanup EXIT

# The builder.
mkdir -p "$work/builder/tmp" "$work/builder/go/pkg/mod" "$work/builder/root"
chmod 1777 "$work/builder/tmp"
b=$(buildah from scratch)
containers+=("$b")
buildah copy --quiet "$b" "$goroot" /usr/local/go >/dev/null
buildah copy --quiet "$b" "$work/builder" / >/dev/null
buildah config \
	--env PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	--env GOPATH=/go \
	--env HOME=/root \
	--env GOTOOLCHAIN=local \
	--workingdir /go \
	--label "org.opencontainers.image.description=$(go env GOVERSION) from $goroot, assembled locally" \
	"$b"
buildah commit --quiet "$b" "$builder_tag" >/dev/null

# The runtime.
rt=$work/runtime
mkdir -p "$rt/etc/ssl/certs" "$rt/tmp" "$rt/root"
chmod 1777 "$rt/tmp"
chmod 700 "$rt/root"
cp "$ca_bundle" "$rt/etc/ssl/certs/ca-certificates.crt"
cat >"$rt/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
PASSWD
cat >"$rt/etc/group" <<'GROUP'
root:x:0:
nobody:x:65534:
nonroot:x:65532:
GROUP
mkdir -p "$work/home"
r=$(buildah from scratch)
containers+=("$r")
buildah copy --quiet "$r" "$rt" / >/dev/null
buildah copy --quiet --chown 65532:65532 "$r" "$work/home" /home/nonroot >/dev/null
buildah config \
	--env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	--env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
	--user 65532:65532 \
	--workingdir /home/nonroot \
	--label "org.opencontainers.image.description=CA certificates and a nonroot user, assembled locally" \
	"$r"
buildah commit --quiet "$r" "$runtime_tag" >/dev/null
