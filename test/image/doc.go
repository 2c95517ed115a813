// Package image proves the shipped container image and Deployment. It builds
// the image from the Dockerfile with podman, on base images assembled from
// scratch, and runs it the way artifacts/deploy/deployment.yaml would against
// a local control plane.
//
// That test needs podman, buildah and runc, builds images and runs a
// container, so it has the build tag "image" and runs with `make
// test-image`, not with `make test`. The translation of the Deployment into
// podman flags has no tag: `make test` checks it on the shipped Deployment.
package image
