# tigon: `make test` and `make demo` set the machine up (scripts/setup.sh: apt packages, Rust,
# cargo-nextest, hugepages or the --no-huge fallback), build, and run.
SHELL := /bin/bash
CARGO ?= cargo
JOBS ?= 2
export CARGO_TARGET_DIR ?= $(CURDIR)/target
# Runs scripts/setup.sh and imports its environment (PATH, TIGON_NO_HUGE) into the recipe.
SETUP = env_out=$$(scripts/setup.sh) && eval "$$env_out"

.PHONY: bench-instr fuzz help test demo bench setup build release nextest clippy fmt fmt-check doc-test clean-netns mpi4py-suite

help:
	@echo "make test   - set up, then run every test (nextest), clippy -D warnings, fmt --check"
	@echo "make demo   - set up, build release, run 'tigon demo $(DEMO_ARGS)' (NetPIPE over tigon and over ob1/tcp)"
	@echo "make bench  - set up, build release, run 'tigon bench mpi', 'bench dma', 'bench engine'"
	@echo "              (BENCH_MPI_ARGS=--quick for a few minutes instead of ~15)"
	@echo "make bench-instr - instructions per small message in the engine (callgrind); for one engine"
	@echo "              serving many peers: scripts/bench-instr.sh --peers 65536 (after make bench-instr)"
	@echo "make soak   - set up, build release, run 'tigon soak' (10 min: stress jobs on a 5% lossy wire,"
	@echo "              a rank killed every 30 s; SOAK_SECONDS=120 for a shorter run); not in make test"
	@echo "make mpi4py-suite - mpi4py's own test suite over tigon run, on the memif fabric and across the"
	@echo "              routed one with 5% loss (fetches mpi4py's source from PyPI once); not in make test"
	@echo "make fuzz   - run each fuzz target (engine/fuzz) FUZZ_SECONDS (default 180) on nightly; not in make test"
	@echo "make setup  - only the machine set-up (idempotent)"
	@echo "make build | release | nextest | clippy | fmt | fmt-check | doc-test | clean-netns"

setup:
	@$(SETUP) && echo "setup done$${TIGON_NO_HUGE:+ (TIGON_NO_HUGE=$$TIGON_NO_HUGE)}"

test:
	@$(SETUP) && \
	$(CARGO) build -j$(JOBS) -q -p tigon-ompi-mtl && \
	$(CARGO) nextest run --workspace --cargo-quiet --build-jobs $(JOBS) && \
	$(CARGO) test -j$(JOBS) --workspace --doc -q && \
	$(CARGO) clippy -j$(JOBS) --workspace --all-targets -q -- -D warnings && \
	$(CARGO) fmt --all --check && \
	echo "make test: all tests, clippy and rustfmt passed"

demo:
	@$(SETUP) && \
	$(CARGO) build -j$(JOBS) --release -q -p tigon -p tigon-ompi-mtl && \
	"$(CARGO_TARGET_DIR)/release/tigon" demo $(DEMO_ARGS)

# Instructions per small message in the engine (callgrind; ~1 minute). Built always this one
# way, with its own profile (Cargo.toml `bench-instr`: release with one codegen unit), so that
# the count follows the source only, not how a release binary happened to be built.
bench-instr:
	@$(SETUP) && \
	$(CARGO) build -j$(JOBS) --profile bench-instr -q -p tigon && \
	scripts/bench-instr.sh

# All three benchmarks, even when one fails; results under $(CARGO_TARGET_DIR)/bench/.
BENCH_MPI_ARGS ?=
bench:
	@$(SETUP) && \
	$(CARGO) build -j$(JOBS) --release -q -p tigon -p tigon-ompi-mtl && \
	tigon="$(CARGO_TARGET_DIR)/release/tigon" && failed="" && \
	{ "$$tigon" bench mpi $(BENCH_MPI_ARGS) || failed="$$failed mpi"; } && \
	{ "$$tigon" bench dma || failed="$$failed dma"; } && \
	{ "$$tigon" bench engine || failed="$$failed engine"; } && \
	if [ -n "$$failed" ]; then echo "make bench: failed:$$failed"; exit 1; fi && \
	echo "make bench: results in $(CARGO_TARGET_DIR)/bench/"

# A soak: MPI stress jobs across two emulated nodes with 5% wire loss, a rank SIGKILLed every
# 30 s while the other jobs run on; fails on any lost message or agent RSS growth. Not in make test.
SOAK_SECONDS ?= 600
soak:
	@$(SETUP) && \
	$(CARGO) build -j$(JOBS) --release -q -p tigon -p tigon-ompi-mtl && \
	"$(CARGO_TARGET_DIR)/release/tigon" soak --seconds $(SOAK_SECONDS)

# mpi4py's test suite (1,358 tests) over tigon run: 4 ranks on memif, then 3 across the routed
# fabric (UDP through a router namespace) with 5% loss. A few minutes; needs PyPI the first
# time. Not in make test.
mpi4py-suite:
	@$(SETUP) && \
	$(CARGO) build -j$(JOBS) --release -q -p tigon -p tigon-ompi-mtl && \
	scripts/mpi4py-suite.sh 4 && \
	scripts/mpi4py-suite.sh 3 --fabric routed --loss 5

# The engine's fuzz targets, one after the other (scripts/fuzz.sh: cargo-fuzz if installed,
# else an offline build with its flags); fails on any crash. Not in make test.
FUZZ_SECONDS ?= 180
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) JOBS=$(JOBS) scripts/fuzz.sh $(FUZZ_TARGETS)

build:
	$(CARGO) build -j$(JOBS) --workspace --all-targets

release:
	$(CARGO) build -j$(JOBS) --release --workspace

nextest:
	$(CARGO) nextest run --workspace --build-jobs $(JOBS)

doc-test:
	$(CARGO) test -j$(JOBS) --workspace --doc

clippy:
	$(CARGO) clippy -j$(JOBS) --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

fmt-check:
	$(CARGO) fmt --all --check

# Removes the network namespaces, veths and scratch directories a killed test, demo or tigon run
# left, only those whose owner process (the pid in their names) is dead.
clean-netns:
	@scripts/clean-leftovers.sh
