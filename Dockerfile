# Build:  docker build -t gputask-controller:latest .   (or podman build)
#
# The base images are build arguments, so that a host without a registry can
# supply its own (`make test-image` assembles both from scratch): the builder
# needs a Go toolchain, the runtime only CA certificates and a nonroot user.
# The RUN steps use the exec form, so the builder needs no shell either.
ARG BUILDER_IMAGE=golang:1.26
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${BUILDER_IMAGE} AS build
# Empty unless given: GOPROXY=off with a module cache mounted at /go/pkg/mod
# builds without network.
ARG GOPROXY
ARG GOFLAGS
ENV CGO_ENABLED=0 GOOS=linux
WORKDIR /src
COPY go.mod go.sum ./
RUN ["go", "mod", "download"]
COPY . .
RUN ["go", "build", "-trimpath", "-ldflags=-s -w", "-o", "/out/gputask-controller", "."]

FROM ${RUNTIME_IMAGE}
COPY --from=build /out/gputask-controller /gputask-controller
USER 65532:65532
ENTRYPOINT ["/gputask-controller"]
