# trnsim: two entry points for a fresh Debian 12 machine (as root): `make demo` and `make test`.
# Each installs what is missing, then builds; a second run reinstalls and rebuilds nothing that is current.

SHELL       := /bin/bash
BUILD_DIR   ?= build
SANITIZE_DIR ?= build-sanitize
FUZZ_SECONDS ?= 60
VENV        := .venv
STAMPS      := .stamps
PYTHON_BASE ?= /usr/bin/python3
JOBS        ?= $(shell nproc)
CMAKE_FLAGS ?=

APT_LIST    := deps/debian-packages.txt
PY_REQS     := deps/requirements.txt
APT_STAMP   := $(STAMPS)/apt.stamp
VENV_STAMP  := $(STAMPS)/venv.stamp

.PHONY: all build demo test test-cpp test-python test-sanitize test-asan golden-update deps clean distclean

all: build

deps: $(APT_STAMP) $(VENV_STAMP)

# Installs only the packages from the list that dpkg does not already report as installed.
$(APT_STAMP): $(APT_LIST)
	@mkdir -p $(STAMPS)
	@missing=$$(grep -v '^\s*#' $(APT_LIST) | xargs -r -n1 | while read p; do \
	  dpkg-query -W -f='$${Status}' "$$p" 2>/dev/null | grep -q 'install ok installed' || echo "$$p"; done); \
	if [ -n "$$missing" ]; then \
	  echo "Installing Debian packages: $$missing"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@touch $@

$(VENV_STAMP): $(PY_REQS) $(APT_STAMP)
	@mkdir -p $(STAMPS)
	@test -x $(VENV)/bin/python || $(PYTHON_BASE) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q -r $(PY_REQS)
	@touch $@

$(BUILD_DIR)/build.ninja: $(APT_STAMP) $(VENV_STAMP)
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DPython3_EXECUTABLE=$(CURDIR)/$(VENV)/bin/python $(CMAKE_FLAGS)

build: $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

demo: build
	@$(BUILD_DIR)/bin/trnsim config validate configs/*.yaml configs/whatif/*.yaml
	@echo
	@$(BUILD_DIR)/bin/trnsim config summary trn1 trn2 trn3
	@echo
	@echo "Kernel library on the timing model (one NeuronCore unless --cores):"
	@for c in trn1 trn2 trn3; do $(BUILD_DIR)/bin/trnsim bench matmul --m 4096 --k 8192 --n 8192 --transpose-a --config $$c; done
	@$(BUILD_DIR)/bin/trnsim bench matmul --m 4096 --k 8192 --n 8192 --transpose-a --config trn2 --cores 2
	@for c in trn2 trn3; do $(BUILD_DIR)/bin/trnsim bench attention --seq 4096 --head-dim 128 --causal --config $$c; done
	@echo
	@echo "All-reduce across the shipped multi-chip systems, every algorithm (plots: $(BUILD_DIR)/demo/collectives_*.png):"
	@mkdir -p $(BUILD_DIR)/demo
	@for s in trn2-16 trn2-32 trn2-64 trn3-64 trn3-144; do $(BUILD_DIR)/bin/trnsim bench collective --system $$s --op all_reduce \
	  --sizes 1K:1G:32 --algorithm auto,mesh,recursive,ring,kangaring,hierarchical --force \
	  --csv $(BUILD_DIR)/demo/collectives_$$s.csv --plot $(BUILD_DIR)/demo/collectives_$$s.png; done
	@echo
	@echo "A decoder-only transformer in plain PyTorch trained on the device 'neuron', trn2 vs trn3 (examples/transformer_demo.py):"
	@$(VENV)/bin/python examples/transformer_demo.py --out $(BUILD_DIR)/demo
	@echo
	@echo "Timing-only mode: a Llama-3-8B training step (forward, backward, AdamW) on one trn2 logical core (tools/bench/timing_only_step.py):"
	@$(VENV)/bin/python tools/bench/timing_only_step.py --model llama3-8b --config trn2 --top 10 \
	  --json $(BUILD_DIR)/demo/timing_only_llama3-8b_trn2.json

test: build
	@$(MAKE) --no-print-directory test-cpp test-python

test-cpp: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600

# pytest exits 5 when it collects nothing; tools/run_pytest.sh turns that into a failure only
# when test files exist (a suite that silently collects nothing is a defect, not a pass).
test-python: build
	@TRNSIM_BUILD_DIR=$(CURDIR)/$(BUILD_DIR) tools/run_pytest.sh $(VENV)/bin/python tests

# Reruns the golden-timing cases (tools/golden_update.py), prints each changed timing (old, new,
# ratio) and rewrites traces/golden/kernels.json; re-records the demo step (traces/demo_step_*.trnrec)
# and prints the per-launch diff of what moved: commit them with the change that moved the times.
golden-update: build
	@TRNSIM_BUILD_DIR=$(CURDIR)/$(BUILD_DIR) $(VENV)/bin/python tools/golden_update.py

# The sanitizer tier (issue 42 item 3), the pre-release check, not part of `make test` (slow on 2 cores; see
# README "Sanitizer tier" for its last run's figures): the C++ core and the CLI built with clang, AddressSanitizer
# and UndefinedBehaviorSanitizer (every UB finding fatal) and libFuzzer coverage, in $(SANITIZE_DIR)/ without the
# PyTorch front-end; then ctest (the fuzz smoke runs replay their corpora), the CLI tests, and FUZZ_SECONDS of
# libFuzzer on each of the .tasm parser, the config loader and the recording reader (from a scratch copy of the
# seed corpus: libFuzzer adds what it finds to it). Leak detection is off: LeakSanitizer's stop-the-world tracer
# crashes on SystemC's coroutine stacks at exit.
$(SANITIZE_DIR)/build.ninja: $(APT_STAMP) $(VENV_STAMP)
	CXX=clang++ cmake -S . -B $(SANITIZE_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Asan -DTRNSIM_FRONTEND=OFF \
	  -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link -DPython3_EXECUTABLE=$(CURDIR)/$(VENV)/bin/python $(CMAKE_FLAGS)

SANITIZE_ENV := ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

test-sanitize: $(SANITIZE_DIR)/build.ninja
	cmake --build $(SANITIZE_DIR) -j $(JOBS)
	cd $(SANITIZE_DIR) && $(SANITIZE_ENV) ctest --output-on-failure -j $(JOBS) --timeout 1200
	@$(SANITIZE_ENV) TRNSIM_BUILD_DIR=$(CURDIR)/$(SANITIZE_DIR) tools/run_pytest.sh $(VENV)/bin/python tests/cli
	@set -e; for spec in tasm:corpus:tasm config:config_corpus:yaml recording:recording_corpus:jsonl; do \
	  IFS=: read -r name corpus ext <<< "$$spec"; \
	  scratch=$(SANITIZE_DIR)/fuzz-$$name; rm -rf $$scratch; mkdir -p $$scratch; \
	  cp tests/fuzz/$$corpus/*.$$ext $$scratch/; \
	  echo "libFuzzer: $$name for $(FUZZ_SECONDS) s"; \
	  if ! $(SANITIZE_ENV) $(SANITIZE_DIR)/bin/$${name}_fuzzer $$scratch -max_total_time=$(FUZZ_SECONDS) \
	      -max_len=8192 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 > $$scratch.log 2>&1; then \
	    tail -n 60 $$scratch.log; echo "libFuzzer: $$name failed (log: $$scratch.log)"; exit 1; \
	  fi; \
	  grep -E "^stat::(number_of_executed_units|new_units_added)" $$scratch.log; \
	done

# The former name of the sanitizer tier.
test-asan: test-sanitize

clean:
	rm -rf $(BUILD_DIR) $(SANITIZE_DIR)

distclean: clean
	rm -rf $(VENV) $(STAMPS)
