# The front door. `make run` starts the daemon with the example plugins;
# `make test` builds everything and passes the whole suite. Both install what
# is missing first (scripts/install-deps.sh is idempotent).
SHELL := /bin/bash
.DEFAULT_GOAL := help

CMAKE ?= cmake
CTEST ?= ctest
JOBS ?= $(shell nproc)
# ccache keyed on paths relative to this checkout (shared across clones).
export CCACHE_BASEDIR ?= $(CURDIR)
export CCACHE_NOHASHDIR ?= 1
SOURCES = $(shell git ls-files '*.h' '*.hpp' '*.cc' '*.cpp' '*.c' '*.proto' 2>/dev/null)

.PHONY: help deps build release test test-dev format-check tsan tsa asan fuzz fuzz-ci fuzz-targets mutate bench bench-report run format tidy package clean

help:
	@echo "make run           build (release) and start tpoold with the example plugins"
	@echo "make test          install deps, build, run every test (unit, stress, model, integration,"
	@echo "                   container: the image and manifests with podman, skipped where it cannot run),"
	@echo "                   check formatting, run the pool's tests under ThreadSanitizer, and"
	@echo "                   make fuzz-ci"
	@echo "make fuzz-ci       the libFuzzer targets (job_request, token_file, config, plugin_descriptor)"
	@echo "                   under the fuzz preset, a bounded seeded number of runs each"
	@echo "                   (TPOOL_FUZZ_RUNS_<target>; about 30 s of runs on 2 cores, plus the"
	@echo "                   fuzz_* build: 40 s in all with ccache, 4 min cold); fails on any finding"
	@echo "make bench         build and run the benchmarks against the peers (bench_*, the daemon's"
	@echo "                   memory per job (bench_daemon --memory), then"
	@echo "                   tpoold against gearmand and beanstalkd: bench/peers/run.sh);"
	@echo "                   make bench-report turns the peers' results into docs/benchmarks.md's"
	@echo "                   tables and plots"
	@echo "make tsan | asan   build and test under ThreadSanitizer | Address+UB sanitizers"
	@echo "make tsa           build with clang -Wthread-safety -Werror (part of make test)"
	@echo "make fuzz          the pool's fuzz harness for longer: FUZZ_SECONDS (default 30) per seed"
	@echo "                   family, 20 families; FUZZ_PRESET=tsan runs it under ThreadSanitizer;"
	@echo "                   then make fuzz-ci, then each libFuzzer target FUZZ_SECONDS more"
	@echo "                   (make fuzz-targets FUZZ_SECONDS=300 for only those, five minutes each)"
	@echo "make mutate        mutation testing of the pool and queues (scripts/mutate.sh; slow)"
	@echo "make format | format-check | tidy | package | clean"

deps:
	@scripts/install-deps.sh

build: deps
	$(CMAKE) --preset dev
	$(CMAKE) --build --preset dev -j $(JOBS)

release: deps
	$(CMAKE) --preset release
	$(CMAKE) --build --preset release -j $(JOBS)

test-dev: build
	$(CTEST) --preset dev

test: test-dev format-check tsan tsa fuzz-ci
	@echo "make test: all checks passed"

format-check:
	@clang-format --dry-run -Werror $(SOURCES) && echo "format-check: $(words $(SOURCES)) files clean"

format:
	clang-format -i $(SOURCES)

tsan: deps
	$(CMAKE) --preset tsan
	$(CMAKE) --build --preset tsan -j $(JOBS)
	$(CTEST) --preset tsan

# clang's thread-safety analysis (-Wthread-safety -Werror) over the pool, the
# daemon and the client: a member read without the mutex its GUARDED_BY names
# fails this build (docs/architecture.md, "Roles the compiler checks").
tsa: deps
	$(CMAKE) --preset tsa
	$(CMAKE) --build --preset tsa -j $(JOBS)
	@echo "tsa: clang thread-safety analysis clean"

asan: deps
	$(CMAKE) --preset asan
	$(CMAKE) --build --preset asan -j $(JOBS)
	$(CTEST) --preset asan

# The fuzz harness with a longer budget than make test's 3 s per seed family
# (docs/algorithms.md, "Fuzz"). A failure names the seed to replay.
FUZZ_SECONDS ?= 30
FUZZ_PRESET ?= dev
fuzz: deps
	$(CMAKE) --preset $(FUZZ_PRESET)
	$(CMAKE) --build --preset $(FUZZ_PRESET) -j $(JOBS) --target pool_fuzz_test
	TPOOL_FUZZ_SECONDS=$(FUZZ_SECONDS) build/$(FUZZ_PRESET)/tests/fuzz/pool/pool_fuzz_test \
	  --gtest_filter='Seeds/*'
	$(MAKE) fuzz-targets

# The libFuzzer targets of tests/fuzz/targets (issue 16, item 7).
# fuzz-ci (part of make test): only the fuzz_* targets of the fuzz preset are
# built, and ctest runs each for TPOOL_FUZZ_RUNS_<target> runs from its seed
# corpus with a fixed seed (tests/fuzz/targets/CMakeLists.txt); any finding
# (crash, sanitizer report, leak, timeout, a broken property) fails it.
# fuzz-targets: then FUZZ_SECONDS more each, one at a time. New inputs stay in
# build/fuzz/tests/fuzz/targets/work/<target>; a finding leaves its reproducer
# in .../work/artifacts/ (copy it into tests/fuzz/corpus/<target>/ once fixed,
# and every build replays it).
FUZZ_TARGETS = job_request token_file config plugin_descriptor
fuzz-ci: deps
	$(CMAKE) --preset fuzz
	$(CMAKE) --build --preset fuzz -j $(JOBS) $(addprefix --target fuzz_,$(FUZZ_TARGETS))
	$(CTEST) --preset fuzz -L fuzz

fuzz-targets: fuzz-ci
	for t in $(FUZZ_TARGETS); do \
	  tests/fuzz/targets/run_fuzz.sh build/fuzz/tests/fuzz/targets/fuzz_$$t \
	    build/fuzz/tests/fuzz/targets/work/$$t tests/fuzz/corpus/$$t -1 \
	    -max_total_time=$(FUZZ_SECONDS) || exit 1; \
	done

# Mutation testing (docs/algorithms.md, "Mutation testing"): not part of make test.
mutate: deps
	scripts/mutate.sh

bench: deps
	$(CMAKE) --preset bench
	$(CMAKE) --build --preset bench -j $(JOBS)
	scripts/run-benchmarks.sh
	build/bench/bench/daemon/bench_daemon --memory | tee bench/results/memory.txt
	bench/peers/run.sh build/bench

bench-report:
	scripts/bench-report.sh

run: release
	@if [ ! -x build/release/daemon/server/tpoold ]; then \
	  echo "make run: the daemon (tpoold) does not exist yet; only the pool library is built."; \
	  echo "make run: see README.md for what works today and the open issues for what comes next."; \
	  exit 1; \
	fi
	scripts/run-daemon.sh build/release

tidy: build
	run-clang-tidy -p build/dev -quiet $(filter %.cc,$(SOURCES)) || \
	  clang-tidy -p build/dev --quiet $(filter %.cc,$(SOURCES))

package: release
	$(CMAKE) --build --preset release --target package

clean:
	rm -rf build
