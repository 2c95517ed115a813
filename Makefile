# gputask-controller
#   make demo   the controller on a local control plane with fake GPU nodes
#   make test   unit, integration and end-to-end tests (builds the control plane first)

SHELL := /usr/bin/env bash
GO ?= go
BIN_DIR := $(CURDIR)/bin
IMAGE ?= gputask-controller:dev
KUBECONFIG ?= $(HOME)/.kube/config
# Packages that need no control plane.
UNIT_PKGS = $$($(GO) list ./... | grep -v '/test/')
export GPUTASK_BIN_DIR := $(BIN_DIR)

.PHONY: all
all: build

.PHONY: generate
generate: ## Regenerate deepcopy, clientset, listers, informers and CRDs.
	hack/update-codegen.sh

.PHONY: verify
verify: ## Fail if generated code is stale or vet finds a problem.
	hack/verify-codegen.sh
	$(GO) vet ./...

.PHONY: build
build: ## Build the controller into bin/.
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN_DIR)/gputask-controller .

.PHONY: tools
tools: ## Build etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kubectl and kwok into bin/ (only what is missing).
	hack/tools/build.sh

.PHONY: test-unit
test-unit: ## Unit tests: pure logic and fake-clientset controller tests.
	$(GO) test -count=1 $(UNIT_PKGS)

.PHONY: test-integration
test-integration: tools build ## Integration and end-to-end tests on a real local control plane.
	$(GO) test -count=1 -p 1 -timeout 45m ./test/...

.PHONY: test
test: verify test-unit test-integration ## Everything CI runs.

# The side-by-side run of `make bench`: BENCH_N tasks (10000 for the large
# run), BENCH_QPS pairs such as 500/1000, BENCH_STEADY such as 10s; see
# test/bench/sidebyside for the rest. The table goes to _output/bench.md.
BENCH_N ?= 1000
export BENCH_N

.PHONY: bench
bench: tools build ## Benchmarks: decision, ranking, sources, throughput, and the GPUTaskSet against the ReplicaSet controller on the real control plane.
	$(GO) test -run '^$$' -bench . -benchmem $(UNIT_PKGS)
	$(GO) test -run '^$$' -bench . -benchtime 3x ./test/bench/
	$(GO) run ./test/bench/sidebyside

.PHONY: demo
demo: tools build ## Local control plane with fake GPU nodes, the controller, the examples and a live view.
	$(GO) run ./hack/demo

.PHONY: run
run: build ## Run the controller against the cluster in $KUBECONFIG.
	$(BIN_DIR)/gputask-controller --kubeconfig=$(KUBECONFIG) -v=2

.PHONY: install
install: ## Install the CRDs into the cluster in $KUBECONFIG.
	kubectl apply -k artifacts/crds

.PHONY: image
image: ## Build the container image.
	docker build -t $(IMAGE) .

.PHONY: clean
clean:
	rm -rf $(BIN_DIR)
