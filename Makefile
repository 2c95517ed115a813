# gputask-controller
#   make demo   the controller on a local control plane with fake GPU nodes
#   make test   unit, integration and end-to-end tests (builds the control plane first)

SHELL := /usr/bin/env bash
GO ?= go
BIN_DIR := $(CURDIR)/bin
IMAGE ?= gputask-controller:dev
# docker, or podman where there is no Docker engine.
CONTAINER_TOOL ?= $(shell command -v docker >/dev/null 2>&1 && echo docker || echo podman)
KUBECONFIG ?= $(HOME)/.kube/config
# Packages that need no control plane.
UNIT_PKGS = $$($(GO) list ./... | grep -v '/test/')
export GPUTASK_BIN_DIR := $(BIN_DIR)
# Every Go command here (vet, the tests, the binaries, the tools of
# hack/tools and what the tests build) compiles with cgo off and -trimpath,
# as the released binaries are: the libraries they share (client-go,
# apimachinery, apiserver...), at the same versions in go.mod and
# hack/tools/go.mod, are then compiled once, not once per setting. What they
# link has no DWARF (-w), as the tools of hack/tools are linked: nothing
# here runs a debugger, and a test binary then links in about two thirds of
# the CPU time. Stack traces keep their files and lines.
export CGO_ENABLED := 0
export GOFLAGS := $(strip $(filter-out -trimpath -ldflags=%,$(shell $(GO) env GOFLAGS)) -trimpath -ldflags=-w)

.PHONY: all
all: build

.PHONY: generate
generate: ## Regenerate deepcopy, clientset, listers, informers, CRDs and the code map of docs/architecture.md.
	hack/update-codegen.sh
	hack/update-codemap.sh

.PHONY: verify
verify: ## Fail if generated code or the code map of docs/architecture.md is stale, or vet finds a problem.
	hack/verify-codegen.sh
	hack/verify-codemap.sh
	$(GO) vet -tags realnode,image ./...

.PHONY: build
build: ## Build the controller and gputask-replay into bin/.
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN_DIR)/gputask-controller .
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN_DIR)/gputask-replay ./cmd/gputask-replay

.PHONY: tools
tools: ## Build etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kubectl, kwok, prometheus, promtool, helm, kueue and karpenter into bin/ (only what is missing).
	hack/tools/build.sh

.PHONY: control-plane
control-plane: ## Build only what the benchmarks run: the control plane, kwok and helm (only what is missing).
	hack/tools/build.sh control-plane

.PHONY: demo-tools
demo-tools: ## Build what the demo runs: the control plane, kwok, helm and Prometheus (only what is missing).
	hack/tools/build.sh demo

# GOGC of the tests and of what they start (the control planes, the
# controller, the kubelet), and of `make verify` beside them: the replays of
# the unit tests allocate about 27 GB over live heaps of tens of megabytes,
# so at Go's default of 100 the collector took a third of their CPU time;
# at 400 the unit tests take 120 s of CPU instead of 174 s (at a peak of
# 280 MB a test binary), and the end-to-end package about 330 s instead of
# about 370 s. The tests count pods, writes and requests, none of which the
# collector's pace changes; `make bench` keeps Go's default. Under `make
# test` the builds before the tests run at it too (the control plane, Kueue,
# Karpenter, Prometheus and the kubelet, from hack/tools): the compiler then
# spends about 11 % less CPU (measured on client-go's clientset and the
# apiserver's server package from an empty build cache: 597 s of CPU at 400
# against 671 s at 100, at a peak of 607 MB a compile against 445 MB).
TEST_GOGC ?= 400

.PHONY: test-unit
test-unit: ## Unit tests: pure logic and fake-clientset controller tests.
	GOGC=$(TEST_GOGC) $(GO) test $(TEST_VET) -count=1 $(UNIT_PKGS)

# Packages that run beside the end-to-end package, one after another, each
# on a control plane of its own, with their output printed after: the HPA's
# fidelity spends its run waiting on a real controller's clock (the HPA's
# sync period) rather than on the CPU, and the others take a minute or less
# each, where the end-to-end package takes ten.
BESIDE_PKGS = ./test/hpafidelity ./test/e2e/tenancy ./test/helm ./test/integration ./test/framework
# The real node's tests (root, containerd, a kubelet; docs/node.md) run beside
# too, on their own control plane: they wait on the image build and the
# kubelet more than on the CPU.
NODE_PKGS = ./test/node
# The end-to-end tests mostly wait on controllers' clocks (the load average
# stays near 1 on 2 cores), so more of them run at once than there are cores:
# eight at once took the package from 528 s to 355 s on 2 cores when it ran
# alone.
E2E_PARALLEL ?= 8

# `make test` runs `make verify` beside the tests too (VERIFY_BESIDE), at a
# lower CPU priority than they: what verify compiles that nothing else does
# (the code generators) and vet's analysis of every package and of each
# dependency (the facts it checks calls against) take about 5 minutes of
# both cores on a fresh machine, which the tests, waiting on controllers'
# clocks, leave mostly idle. Its output is printed after theirs.
VERIFY_BESIDE ?=
# With verify beside, `make test` turns off the subset of vet checks that
# `go test` runs before each package's tests (TEST_VET): verify's `go vet`
# runs every one of them on the same packages and test files, and the
# subset's own analysis of every dependency took 2 min 40 s more of CPU on
# a fresh build cache for the unit packages alone.
TEST_VET ?=

.PHONY: test-integration
test-integration: tools node-tools build ## Integration and end-to-end tests on a real local control plane and a real node.
	@mkdir -p _output
	@set -uo pipefail; verify=; export GOGC=$(TEST_GOGC); \
	$(if $(VERIFY_BESIDE),nice -n 10 $(MAKE) --no-print-directory verify > _output/verify.log 2>&1 & verify=$$!;) \
	$(GO) test $(TEST_VET) -count=1 -p 1 -timeout 20m $(BESIDE_PKGS) > _output/test-beside.log 2>&1 & beside=$$!; \
	$(GO) test $(TEST_VET) -tags realnode -count=1 -timeout 30m $(NODE_PKGS) > _output/test-node.log 2>&1 & node=$$!; \
	$(GO) test $(TEST_VET) -count=1 -p 1 -parallel $(E2E_PARALLEL) -timeout 45m $$($(GO) list ./test/... | grep -vxF "$$($(GO) list $(BESIDE_PKGS))"); rc=$$?; \
	wait $$beside; beside_rc=$$?; cat _output/test-beside.log; \
	wait $$node; node_rc=$$?; cat _output/test-node.log; \
	verify_rc=0; if [[ -n $$verify ]]; then wait $$verify; verify_rc=$$?; cat _output/verify.log; fi; \
	for r in $$rc $$beside_rc $$node_rc $$verify_rc; do if [[ $$r -ne 0 ]]; then exit $$r; fi; done

.PHONY: node-tools
node-tools: ## What the real node's tests need: containerd, runc, CNI plugins, iptables, podman and buildah (Debian packages, when missing) and the kubelet.
	hack/node/install.sh
	hack/image/ensure-tools.sh
	hack/tools/build.sh node

.PHONY: test-alerts
test-alerts: tools ## Alert rules in artifacts/monitoring: promtool check and unit tests, PrometheusRule in step.
	artifacts/monitoring/test.sh $(BIN_DIR)/promtool

.PHONY: test
test: test-unit test-alerts test-integration ## Everything CI runs: the tests, and `make verify` beside the integration tests.
test: VERIFY_BESIDE := yes
test: TEST_VET := -vet=off
test: export GOGC := $(TEST_GOGC)

# The side-by-side run of `make bench`: BENCH_N tasks (10000 for the large
# run), BENCH_QPS pairs such as 500/1000, BENCH_STEADY such as 10s; see
# test/bench/sidebyside for the rest. The table goes to _output/bench.md.
BENCH_N ?= 1000
export BENCH_N

.PHONY: bench
bench: control-plane build ## Benchmarks: decision, ranking, sources, throughput, and the GPUTaskSet against the ReplicaSet controller on the real control plane.
	$(GO) test -run '^$$' -bench . -benchmem $(UNIT_PKGS)
	$(GO) test -run '^$$' -bench . -benchtime 3x ./test/bench/
	$(GO) run ./test/bench/sidebyside

# The autoscaling benchmark, on the engine model (docs/replay.md, The engine
# model): every worker one vLLM engine on the measured H100 profile
# (REPLAY_ENGINE, a Llama-3.1-8B-shaped decoder in bf16), continuous batching
# bounded by its KV cache, requests routed least-outstanding to per-worker
# queues, and the SLO users state: p95 TTFT within 2 s and p95 ITL within
# 50 ms (REPLAY_SLO_FLAGS). Start-ups are drawn per worker, log-normal with a
# 2-minute median and sigma 0.3 (floor: half the median), so a tenth of the
# starts take over 2m55s and one in a hundred over 4 minutes, as image pulls
# and weight downloads spread them; no policy is told them, ours learns them
# from the starts it sees. Policies: ours (REPLAY_SET: the inference pool on
# the SLO policy with the same TTFT and ITL objectives, each task's capacity
# from the same engine profile), ours on the load index (target 0.7), an HPA with and without a
# behavior, hpa-best (the best fixed target per trace, 0.30-1.50) and
# hpa-best-one (one target for every trace of the run), KEDA on the load
# index and on the queue, the seed's step script, a static pool, the
# zero-wait oracle and oracle-slo (the fewest workers per minute that meet
# the SLO, in hindsight); pods get a 30 s grace; no nodes are modelled
# (--gpus-per-node 0): `make bench-cost` does.
#
# REPLAY_CONCURRENCY (64) is the per-worker capacity the load index (and so
# ours on it, the HPA and KEDA rows) counts. An H100
# runs up to 256 sequences (max-num-seqs); at 64 its ITL is about 10 ms, 1.4
# times the batch-1 ITL while its output rate is 45 times higher, which
# leaves the 50 ms ITL target and the KV cache (465 k tokens, 7 k per
# sequence at 64) room for a burst: the count a vLLM operator would size a
# pool by. Ours and the oracles count no slots: ours reads each task's
# capacity from the engine profile at the ITL objective, oracle-slo finds
# what the engines serve, and the zero-wait oracle runs each request in the
# largest batch of its context that keeps the ITL objective.
#
# The synthetic shapes are drawn in the replay (--shape) REPLAY_SEEDS times,
# arrivals and start-ups seeded anew each time, at REPLAY_RATE_SCALE times
# their rate (resampled, seeded): at their own rate a 64-sequence worker is
# one worker. Tables show the mean and min-max. ServeGen's models are drawn at
# their own scale (SERVEGEN_MODELS, MODEL:RATE_SCALE) and replayed once,
# in a run of their own, so hpa-best-one is one target over the synthetic
# shapes and one over the ServeGen models. The scales were chosen with the
# zero-wait oracle counting 64 sequences a worker, which peaked at: diurnal
# x30 24 (36 M requests), bursty x30 46 (12 M), step x30 23 (2.6 M; x60:
# 46), flash x30 30 (1.1 M; x60: 60) workers; deepseek-r1 x2.4 24 (3.3 M
# requests; x1.6: 16), mm-image x64 25 (52 M; x10: 7, x32: 14), m-small
# x2.6 23 (86 M; x0.5: 7, x1.6: 15). On the engine it peaks at 26, 41, 25,
# 26, 31, 7 and 62 workers at these scales (`--policies oracle
# --startup lognormal:2m,0.3`; the diurnal shape on seed 1, the other
# shapes the means of 5 seeds).
#
# CPU: every policy replays each trace, hpa-best's search 25 times and
# oracle-slo's trials about 14 more, so the run costs about 75 us of CPU
# per request per seed (mm-image's 52 M requests: 65 minutes of CPU):
# step and flash at x30 (3.7 M requests) about 5 minutes of CPU a seed,
# the diurnal shape (36 M) about 45, and the whole default run (about 400 M
# requests replayed) about eight hours, which is why the 5-minute
# start-ups are not in it. About half an hour of CPU:
# REPLAY_SHAPES='step flash' REPLAY_SEEDS=3 SERVEGEN_MODELS=deepseek-r1:2.4.
# A 5-minute start-up run: REPLAY_STARTUPS='lognormal:2m,0.3 lognormal:5m,0.3'.
# Tables (Markdown) go to standard output and
# _output/replay/{synthetic,servegen,traces}-STARTUP.md, figures to .json
# beside them; each run ends with ours against the targets over its traces
# (every trace meeting the SLO with no request lost, GPU-hours within 1.0
# times hpa-best's, 0.85 times hpa-best-one's and 1.15 times oracle-slo's
# summed over the traces, the peak within 1.5 times the zero-wait oracle's
# plus 2), each target met, not met or not measured where its row did not
# run. Add flags with REPLAY_FLAGS+='--grace 120s'. See docs/replay.md.
# oracle-lag, oracle-slo's schedule learned a start-up late (what a pool
# that does not know the future spends, about 30 replays more a trace),
# plays only where named, and then the verdict sets it beside ours and
# oracle-slo: REPLAY_FLAGS+=' --policies ours,oracle,oracle-slo,oracle-lag'.
# oracle-lag-drawn is the same with each start-up drawn as its worker is
# asked for, as any pool's is, where oracle-lag's are known ahead.
REPLAY_SHAPES ?= diurnal bursty step flash
REPLAY_ENGINE ?= h100-llama-3.1-8b
REPLAY_CONCURRENCY ?= 64
REPLAY_RATE_SCALE ?= 30
REPLAY_SEEDS ?= 5
REPLAY_STARTUPS ?= lognormal:2m,0.3
REPLAY_SLO_FLAGS ?= --slo-ttft 2s --slo-itl 50ms --slo-percentile 95
REPLAY_COLUMN_FLAGS = --time-column Timestamp \
	--input-tokens-column 'Request tokens' --output-tokens-column 'Response tokens'
REPLAY_SET ?= pkg/replay/variants/slo-engine.yaml
# A replay holds its traces (40 bytes a request) and each pool it plays
# (about 50 bytes a request, hpa-best's search GOMAXPROCS pools at once):
# a day of m-small is 86 M requests. The Go runtime's soft memory limit
# makes it collect before it outgrows the machine: three quarters of the
# memory by default, off when empty.
REPLAY_MEMORY_LIMIT ?= $(shell awk '/^MemTotal:/ { printf "%dMiB", $$2 * 3 / 4 / 1024 }' /proc/meminfo 2>/dev/null)
REPLAY_FLAGS ?= $(REPLAY_COLUMN_FLAGS) --engine $(REPLAY_ENGINE) --concurrency $(REPLAY_CONCURRENCY) \
	$(REPLAY_SLO_FLAGS) --gpus-per-node 0 --set $(REPLAY_SET) --variant proportional
# The fixed-slot service model of `make bench-cost` (and of the replay's
# figures before the engine model): 8 slots, 4,000 prefill and 40 decode
# tokens/s per request.
REPLAY_TRACE_FLAGS ?= $(REPLAY_COLUMN_FLAGS) \
	--prefill-tokens-per-second 4000 --decode-tokens-per-second 40 --concurrency 8
# Real traffic: ServeGen's production windows (Alibaba Cloud Model Studio,
# Apache-2.0; docs/replay.md, Real traffic), MODEL:RATE_SCALE, the first
# SERVEGEN_DAYS of each. The data are not in the repository: SERVEGEN_DIR
# must hold the model folders, or SERVEGEN_MODELS= runs the synthetic traces
# alone. The scales put the zero-wait oracle's peak at 20-100 workers of
# REPLAY_CONCURRENCY sequences (measured above).
SERVEGEN_DIR ?= ../shared/data/traces/servegen
SERVEGEN_DAYS ?= 1
SERVEGEN_MODELS ?= deepseek-r1:2.4 mm-image:64 m-small:2.6
SERVEGEN_TRACES = $(foreach model,$(SERVEGEN_MODELS),_output/replay/$(firstword $(subst :, ,$(model))).csv)
# Held-out traces: request traces of the replay's format, CSV with the
# columns of REPLAY_COLUMN_FLAGS (as `gputask-replay generate` writes them)
# or Mooncake's .jsonl, for example production windows no policy was tuned
# on. Empty by default. Each start-up of REPLAY_STARTUPS replays them in a
# run of their own with REPLAY_FLAGS, as the ServeGen models are: tables to
# _output/replay/traces-STARTUP.md, figures to .json beside it, and after
# the tables the verdict of ours against the targets over them. They play
# at their own rate: draw them (generate --servegen DIR --rate-scale S) at
# a scale that puts the zero-wait oracle's peak at 20-100 workers, as the
# ServeGen scales do; a run with --policies oracle measures it cheaply.
REPLAY_TRACES ?=
# The run of REPLAY_TRACES in bench-autoscaling's loop over the start-ups.
define REPLAY_TRACES_RUN
echo; echo "== $(strip $(REPLAY_TRACES)), $$startup start-ups"; \
	GOMEMLIMIT=$(REPLAY_MEMORY_LIMIT) $(BIN_DIR)/gputask-replay $(foreach trace,$(REPLAY_TRACES),--trace $(trace)) \
		$(REPLAY_FLAGS) --startup $$startup --markdown \
		--json _output/replay/traces-$$name.json --plot _output/replay/traces-$$name.png \
		| tee _output/replay/traces-$$name.md; \

endef

.PHONY: bench-autoscaling
bench-autoscaling: ## Replay synthetic, ServeGen and held-out (REPLAY_TRACES) request traces on the engine model through every autoscaling policy; tables in _output/replay/.
	@if [ -n "$(strip $(SERVEGEN_MODELS))" ] && [ ! -d "$(SERVEGEN_DIR)" ]; then \
		echo "bench-autoscaling: no ServeGen data at SERVEGEN_DIR=$(SERVEGEN_DIR): set SERVEGEN_DIR to the folder of its model folders, or SERVEGEN_MODELS= for the synthetic traces alone" >&2; \
		exit 1; \
	fi
	$(if $(strip $(REPLAY_TRACES)),@for trace in $(REPLAY_TRACES); do [ -f "$$trace" ] || { echo "bench-autoscaling: no trace at $$trace (REPLAY_TRACES)" >&2; exit 1; }; done)
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN_DIR)/gputask-replay ./cmd/gputask-replay
	@mkdir -p _output/replay
	@set -eo pipefail; began=$$(date +%s); \
	for model in $(SERVEGEN_MODELS); do \
		$(BIN_DIR)/gputask-replay generate --servegen "$(SERVEGEN_DIR)/$${model%%:*}" --days $(SERVEGEN_DAYS) \
			--rate-scale $${model#*:} --out _output/replay/$${model%%:*}.csv; \
	done; \
	for startup in $(REPLAY_STARTUPS); do \
		name=$${startup//[:,]/-}; \
		if [ -n "$(strip $(REPLAY_SHAPES))" ]; then \
			echo; echo "== synthetic shapes x$(REPLAY_RATE_SCALE), $(REPLAY_SEEDS) seeds, $$startup start-ups"; \
			GOMEMLIMIT=$(REPLAY_MEMORY_LIMIT) $(BIN_DIR)/gputask-replay $(foreach shape,$(REPLAY_SHAPES),--shape $(shape)) --rate-scale $(REPLAY_RATE_SCALE) \
				--seeds $(REPLAY_SEEDS) $(REPLAY_FLAGS) --startup $$startup --markdown \
				--json _output/replay/synthetic-$$name.json | tee _output/replay/synthetic-$$name.md; \
		fi; \
		if [ -n "$(strip $(SERVEGEN_MODELS))" ]; then \
			echo; echo "== ServeGen, $$startup start-ups"; \
			GOMEMLIMIT=$(REPLAY_MEMORY_LIMIT) $(BIN_DIR)/gputask-replay $(foreach trace,$(SERVEGEN_TRACES),--trace $(trace)) \
				$(REPLAY_FLAGS) --startup $$startup --markdown \
				--json _output/replay/servegen-$$name.json --plot _output/replay/servegen-$$name.png \
				| tee _output/replay/servegen-$$name.md; \
		fi; \
	$(if $(strip $(REPLAY_TRACES)),$(REPLAY_TRACES_RUN))done; \
	took=$$(( $$(date +%s) - began )); \
	echo; echo "bench-autoscaling: $$((took / 60))m$$((took % 60))s wall, ended $$(date -u +%FT%TZ)"; \
	times > _output/replay/times.txt; \
	tail -n 1 _output/replay/times.txt | { read -r user sys; echo "bench-autoscaling: $$user user and $$sys system CPU in the replays"; }

# What a pool costs in nodes: the same traces on 8-GPU nodes that take 3
# minutes to launch, with 30 s of consolidateAfter (the replay's defaults),
# 2-minute starts: placed by the default scheduler (spread) and by the
# packing profile of artifacts/scheduler (pack) under Karpenter's default
# consolidation, then spread under each consolidation policy with each
# scale-in order for the Deployment rows, so that the saving of the order
# and of the autoscaler can be told apart. Tables go to
# _output/replay/cost-PLACEMENT-CONSOLIDATION-VICTIMS.md. See docs/cost.md.
COST_POLICIES ?= ours,hpa,keda,static,oracle
COST_RUNS ?= spread:when-empty-or-underutilized:replicaset pack:when-empty-or-underutilized:replicaset \
	spread:when-empty:replicaset spread:when-empty:node-aware spread:when-empty-or-underutilized:node-aware

.PHONY: bench-cost
bench-cost: ## Node-hours, peak nodes, evictions and requests lost of every policy on the synthetic traces, under both consolidation policies and both Deployment scale-in orders; tables in _output/replay/.
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN_DIR)/gputask-replay ./cmd/gputask-replay
	@mkdir -p _output/replay
	@set -eo pipefail; for shape in $(REPLAY_SHAPES); do \
		$(BIN_DIR)/gputask-replay generate --shape $$shape --out _output/replay/$$shape.csv; \
	done; \
	for run in $(COST_RUNS); do \
		IFS=: read -r placement consolidation victims <<< "$$run"; \
		echo; echo "== $$placement, $$consolidation, $$victims"; \
		$(BIN_DIR)/gputask-replay $(foreach shape,$(REPLAY_SHAPES),--trace _output/replay/$(shape).csv) \
			$(REPLAY_TRACE_FLAGS) --startup 2m --policies $(COST_POLICIES) --placement $$placement \
			--consolidation $$consolidation --deployment-victims $$victims --markdown \
			| tee _output/replay/cost-$$placement-$$consolidation-$$victims.md; \
	done

# Flags for the demo, for example DEMO_FLAGS='-for=5m -plain'; see bin/gputask-demo -help.
DEMO_FLAGS ?=

# The demo is built, then exec'd rather than run with `go run`: go run exits 1
# when interrupted, however cleanly the demo stops, and make then reports
# "Error 1"; nor does it pass on the SIGTERM that make sends its child. Exec'd,
# the demo is make's own child: it gets make's SIGTERM, and make reports its
# exit status.
.PHONY: demo
demo: demo-tools build ## Local control plane with fake GPU nodes, the controller, the examples and a live view.
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN_DIR)/gputask-demo ./hack/demo
	exec $(BIN_DIR)/gputask-demo $(DEMO_FLAGS)

.PHONY: run
run: build ## Run the controller against the cluster in $KUBECONFIG.
	$(BIN_DIR)/gputask-controller --kubeconfig=$(KUBECONFIG) -v=2

.PHONY: install
install: ## Install the CRDs into the cluster in $KUBECONFIG.
	kubectl apply -k artifacts/crds

.PHONY: image
image: ## Build the container image (docker or podman; CONTAINER_TOOL=...).
	$(CONTAINER_TOOL) build -t $(IMAGE) .

.PHONY: test-image
test-image: control-plane ## Build the image with podman on base images assembled here, and run it as artifacts/deploy does on the local control plane.
	hack/image/ensure-tools.sh
	$(GO) test -tags image -count=1 -v -timeout 40m ./test/image/

.PHONY: clean
clean:
	rm -rf $(BIN_DIR)
