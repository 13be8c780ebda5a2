# airlock: the two commands that matter on a fresh Debian bookworm machine:
#   make demo   installs, builds, builds the guest image, runs the agent tasks in microVMs
#   make test   installs, builds, builds the guest image, passes every test
BUILD ?= build
STATE_DIR ?= /var/lib/airlock
JOBS ?= $(shell nproc)
# Tests that boot guests, at once (tests/schedule/schedule.cmake); 1: one at a time.
VM_JOBS ?= 2
# Test: -O0, no debug info, half the compile time of RelWithDebInfo (-O2 -g);
# what `make test`, `make demo` and CI build (docs/build.md). Benchmarks
# build RelWithDebInfo in build-release/; for a release build by hand:
# make build BUILD_TYPE=RelWithDebInfo BUILD=build-release
BUILD_TYPE ?= Test

.PHONY: all setup build image demo test unit-test bench bench-desktop bench-burst bench-loops bench-workspaces bench-multinode bench-tti bench-egress bench-snapshot bench-density bench-interpreter bench-templates bench-runtimes bench-console clean format

all: build

setup:
	scripts/setup

# The guest image's boot files and Debian base layers (mmdebstrap: minutes
# of mostly one core) need nothing of airlock but src/image: the small
# airlock-image-tool is built first and makes them while the rest compiles
# (as root; a no-op once they are made; a failure is only reported, since
# `make image` builds whatever is missing).
build: setup
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)
	@t0=$$(date +%s); base=; \
	if [ "$$(id -u)" = 0 ] && cmake --build $(BUILD) -j $(JOBS) --target airlock-image-tool >/dev/null; then \
	  $(BUILD)/src/image/airlock-image-tool base --template all --state-dir $(STATE_DIR) >$(BUILD)/base-layers.log 2>&1 & base=$$!; \
	fi; \
	cmake --build $(BUILD) -j $(JOBS); b=$$?; \
	if [ -n "$$base" ]; then \
	  if wait $$base; then echo "==> base layers ready (at $$(( $$(date +%s) - t0 )) s)"; \
	  else echo "==> base layers failed (make image retries); $(BUILD)/base-layers.log ends:"; tail -n 20 $(BUILD)/base-layers.log; fi; \
	fi; \
	[ $$b -eq 0 ] && echo "==> build ($(BUILD_TYPE)) wall time: $$(( $$(date +%s) - t0 )) s"

image: build
	$(BUILD)/airlock image build --template all --state-dir $(STATE_DIR)

demo: image
	scripts/demo $(BUILD)/airlock

# Unit tests (no microVM, no shared state) run $(JOBS) at a time; the rest
# two at a time, costliest first, as tests/schedule/schedule.cmake says
# (which run alone, which never run beside each other: a test uses under one
# of 2 cores on average under TCG). Tests labelled "light" (mostly waiting:
# e2e_idle's 150 s idle) run in a lane of their own beside those two, so a
# wait holds no lane. Every set always runs; any failing fails the target.
# Each run's log (ctest -O) is kept in $(BUILD); scripts/test-costs prints
# the 20 costliest tests at the end. A test of the guest sets that fails is
# run once more, by name from its log ("==> flaky"), and fails the target
# only if it fails again: some guest timings under TCG on 2 cores still race
# (docs/build.md "Flaky tests"). Unit tests are never retried. (Names, not
# --rerun-failed: the two ctest runs share Testing/Temporary.)
FAILED_IN = sed -n '/^The following tests FAILED:/,$$ { /(Skipped)$$/d; /(Disabled)$$/d; s/^[[:space:]]*[0-9]* - \(.*\) (.*)$$/\1/p; }'
test: image
	cd $(BUILD) && { ctest --output-on-failure -L unit -j $(JOBS) --timeout 1200 -O ctest-unit.log; u=$$?; \
	  ctest --output-on-failure -L light -j 4 --timeout 1200 -O ctest-light.log >ctest-light.out 2>&1 & light=$$!; \
	  ctest --output-on-failure -LE 'unit|light' -j $(VM_JOBS) --timeout 1200 -O ctest-vm.log; r=$$?; \
	  wait $$light; l=$$?; cat ctest-light.out; \
	  if [ $$r -ne 0 ] || [ $$l -ne 0 ]; then \
	    failed=$$( { [ $$r -eq 0 ] || $(FAILED_IN) ctest-vm.log; [ $$l -eq 0 ] || $(FAILED_IN) ctest-light.log; } | paste -sd'|'); \
	    echo "==> flaky? running the failed tests once more: $$failed"; \
	    if [ -n "$$failed" ]; then ctest --output-on-failure -R "^($$failed)$$" -j 1 --timeout 1200 -O ctest-vm-retry.log; r=$$?; l=0; \
	    [ $$r -eq 0 ] && echo "==> flaky: each failed test passed when run again (named above)"; fi; fi; \
	  $(CURDIR)/scripts/test-costs ctest-unit.log ctest-vm.log ctest-light.log; [ $$u -eq 0 ] && [ $$r -eq 0 ] && [ $$l -eq 0 ]; }

unit-test: build
	cd $(BUILD) && ctest --output-on-failure -L unit

# Benchmarks measure optimised code: their own RelWithDebInfo build.
bench bench-tti bench-burst bench-loops bench-egress bench-snapshot bench-density bench-runtimes bench-multinode: BUILD = build-release
bench bench-tti bench-burst bench-loops bench-egress bench-snapshot bench-density bench-runtimes bench-multinode: BUILD_TYPE = RelWithDebInfo

bench: image
	$(BUILD)/bench/airlock-bench --state-dir $(STATE_DIR)

# Time to interactive through the official SDK; N=100 takes a while under TCG.
bench-tti: image
	AIRLOCK_BIN=$(BUILD)/airlock AIRLOCK_STATE_DIR=$(STATE_DIR) node bench/tti.mjs $(or $(N),100)

# Egress proxy throughput and added latency (hermetic fake internet; root).
# Bursts of B creates at once beside the pool-empty TTI alone, and GET /sandboxes/{id}
# and the list while they run (issue 36; docs/performance.md).
bench-burst: image
	AIRLOCK_BIN=$(BUILD)/airlock AIRLOCK_STATE_DIR=$(STATE_DIR) node bench/burst.mjs $(or $(B),16,32)

# Agent loops (create, write, run python, read the artefact, kill) at 1, 4, 8 and 32
# clients: loops/s against 1 client, failures, the daemon's RSS (issue 36).
bench-loops: image
	AIRLOCK_BIN=$(BUILD)/airlock AIRLOCK_STATE_DIR=$(STATE_DIR) node bench/loops.mjs $(or $(C),1,4,8,32) $(LOOPS)

bench-egress: build
	$(BUILD)/bench/egress-bench --mb 100 --n 20

# Snapshot table (docs/snapshots.md, docs/performance.md): cold vs snapshot TTI, pause, resume, fork, disk.
bench-snapshot: image
	$(BUILD)/bench/airlock-snapshot-bench --state-dir $(STATE_DIR) --n $(or $(N),10)

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD)

# Pool hit, fork, checkpoint/rollback, pause/resume of 10 MiB dirtied,
# memory per idle sandbox with IDLE (default 100) side by side.
bench-density: image
	$(BUILD)/bench/airlock-density-bench --state-dir $(STATE_DIR) --n $(or $(N),10) --idle $(or $(IDLE),100)

# runCode vs commands.run through the
# official packages, the first runCode after create, a 1 MB PNG result. Its numbers are the
# guest's (TCG here): it runs on the build `make image` made the template from, so no second
# code-interpreter image and snapshot are made for it.
bench-interpreter: image
	AIRLOCK_BIN=$(BUILD)/airlock AIRLOCK_STATE_DIR=$(STATE_DIR) node bench/code_interpreter.mjs $(or $(N),20)

# Computer use and containers: @e2b/desktop create -> first screenshot beside a base create, the
# screenshot round trip beside commands.run, docker run first and second (docs/desktop.md, docs/docker.md).
bench-desktop: image
	AIRLOCK_BIN=$(BUILD)/airlock AIRLOCK_STATE_DIR=$(STATE_DIR) node bench/desktop.mjs $(or $(N),5)

bench-templates: image
	AIRLOCK_BIN=$(BUILD)/airlock AIRLOCK_STATE_DIR=$(STATE_DIR) node bench/templates.mjs $(or $(N),20)

# The runtimes side by side (qemu under TCG here, gVisor on ptrace) through the official SDK:
# TTI, exec, a CPU loop beside the host's, untar of 10,000 files, host PSS per idle sandbox,
# pause/resume; N iterations each (N_SLOW, default min(N, 5), for the CPU, untar and pause rows).
bench-runtimes: image
	AIRLOCK_BIN=$(BUILD)/airlock AIRLOCK_STATE_DIR=$(STATE_DIR) N_SLOW=$(N_SLOW) node bench/runtimes.mjs $(or $(N),10)

# Volumes and idle sleep: volume vs guest-disk throughput (MB MiB), wake on request vs a pool hit,
# disk per sleeping sandbox (docs/volumes.md, docs/performance.md).
bench-workspaces: image
	AIRLOCK_BIN=$(BUILD)/airlock AIRLOCK_STATE_DIR=$(STATE_DIR) node bench/workspaces.mjs $(or $(N),10) $(or $(MB),1024)

# The console's sandbox list at 500 sandboxes in chromium, beside a plain DOM table (docs/performance.md).
bench-console: build
	AIRLOCK_BIN=$(BUILD)/airlock AIRLOCK_STATE_DIR=$(STATE_DIR) node bench/console.mjs $(or $(N),20)

# docs/multinode.md, docs/performance.md: create TTI through a front vs a single-node daemon,
# and placements per second of two fronts against one PostgreSQL (creates stubbed out).
bench-multinode: image
	AIRLOCK_BIN=$(BUILD)/airlock AIRLOCK_STATE_DIR=$(STATE_DIR) node bench/multinode.mjs $(or $(N),20)
