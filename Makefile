# fastsub: `make test` and `make demo` do all the set-up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
PYTEST_ARGS ?=

.PHONY: all venv build test test-engine test-sanitize demo bench bench-check bench-report wheels system-deps clean

all: build

# Debian packages the test suite needs (the MQTT oracle); installed only when missing.
system-deps:
	@if ! command -v mosquitto >/dev/null 2>&1 && [ ! -x /usr/sbin/mosquitto ]; then \
	    echo "installing mosquitto (Debian package)"; \
	    if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	    $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mosquitto >/dev/null; \
	fi

$(VENV)/.deps: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel "Cython>=3.0"
	$(PIP) install -q -e '.[test,bench,spark,wheels]' --no-build-isolation
	touch $@

venv: $(VENV)/.deps

build: venv
	$(PY) setup.py -q build_ext --inplace

# Everything: the suite (brokers and Spark included), then the engine's
# tests again under AddressSanitizer + UndefinedBehaviorSanitizer.
test: system-deps build
	$(PY) -m pytest $(PYTEST_ARGS)
	$(MAKE) --no-print-directory test-sanitize
	$(MAKE) --no-print-directory fuzz-smoke

# The pure engine alone (no brokers, no JVM).
test-engine: build
	$(PY) -m pytest -m "not brokers and not spark" $(PYTEST_ARGS)

# The suite under ASan + UBSan, from a sanitized build in its own directory
# (the normal in-place build is left alone).  Spark is left out: the JVM's
# launcher scripts hang with libasan preloaded.  lsan.supp names only
# CPython's own allocators.
ASAN_DIR := build/asan
SAN_ENV = PYTHONPATH=$(CURDIR)/$(ASAN_DIR)/src PYTHONMALLOC=malloc \
	ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)"
test-sanitize: system-deps venv
	rm -rf $(ASAN_DIR) && mkdir -p $(ASAN_DIR)
	cp -r setup.py pyproject.toml README.md MANIFEST.in csrc src $(ASAN_DIR)/
	rm -f $(ASAN_DIR)/src/fastsub/*.so $(ASAN_DIR)/src/fastsub/_core.c
	cd $(ASAN_DIR) && FASTSUB_SANITIZE=1 $(CURDIR)/$(PY) setup.py -q build_ext --inplace
	$(SAN_ENV) $(PY) -c "import fastsub._core as c; assert '$(ASAN_DIR)' in c.__file__, c.__file__"
	$(SAN_ENV) $(PY) -m pytest -q -p no:cacheprovider -m "not spark" $(PYTEST_ARGS)

demo: build
	$(VENV)/bin/fastsub demo

bench: build
	$(PY) bench/run_engine.py

# The standard workloads' exact totals (bench/README.md), generated in bench/data.
bench-check: build
	cd bench && $(CURDIR)/$(PY) check_totals.py $(BENCH_CHECK_ARGS)

# Runs the benchmarks and writes docs/benchmarks.md with PNG plots (a few
# minutes; BENCH_REPORT_ARGS="--huge" adds 3M and 10M subscriptions,
# "--no-spark" leaves Spark out, "--quick" is a smoke run).
bench-report: build
	$(PY) bench/report.py $(BENCH_REPORT_ARGS)

# Wheels for every CPython 3.9-3.13 that pyenv has (WHEEL_PYTHONS="3.11 3.12"
# to choose), repaired to a manylinux tag and stripped, each installed in a
# fresh venv and tested there with the sdist's tests.  Wheels land in dist/.
WHEEL_PYTHONS ?=
wheels: venv
	$(PY) tools/wheels.py $(if $(WHEEL_PYTHONS),--python $(WHEEL_PYTHONS)) $(WHEELS_ARGS)

# clang with its sanitizer and libFuzzer runtimes (Debian packages), installed
# only when a fuzzer cannot be linked.
clang-deps:
	@if ! printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }\n' | \
	        clang -fsanitize=fuzzer,address,undefined -x c - -o /dev/null >/dev/null 2>&1; then \
	    echo "installing clang and its runtimes (Debian packages)"; \
	    if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	    $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	        clang libclang-rt-14-dev >/dev/null; \
	fi

# libFuzzer harnesses on the C core (fuzz/), built from csrc/ directly with
# ASan + UBSan (pointer-overflow and nullability included; see
# fuzz/known-ubsan.supp for the one known, reported case).  `make fuzz`
# runs each for FUZZ_SECONDS and fails on any finding; `make fuzz-smoke`
# (part of `make test`) runs each for FUZZ_SMOKE_SECONDS.
FUZZ_TARGETS := load ops validate
FUZZ_DIR := build/fuzz
FUZZ_SECONDS ?= 600
FUZZ_SMOKE_SECONDS ?= 20
FUZZ_CFLAGS := -g -O1 -std=c11 -D_GNU_SOURCE -pthread -Wall -Wextra -fno-omit-frame-pointer -Icsrc \
	-fsanitize=fuzzer,address,undefined,nullability -fno-sanitize-recover=all -fsanitize-recover=pointer-overflow
$(FUZZ_DIR)/fuzz_%: fuzz/fuzz_%.c fuzz/oracle.h $(wildcard csrc/*.c csrc/*.h) | clang-deps
	@mkdir -p $(FUZZ_DIR)
	clang $(FUZZ_CFLAGS) $(sort $(wildcard csrc/*.c)) $< -o $@
fuzz-build: $(FUZZ_TARGETS:%=$(FUZZ_DIR)/fuzz_%)
fuzz: fuzz-build
	@for t in $(FUZZ_TARGETS); do fuzz/run.sh $$t $(FUZZ_SECONDS) || exit 1; done
fuzz-smoke: fuzz-build
	@for t in $(FUZZ_TARGETS); do fuzz/run.sh $$t $(FUZZ_SMOKE_SECONDS) || exit 1; done
.PHONY: clang-deps fuzz-build fuzz fuzz-smoke

clean:
	rm -rf build dist src/*.egg-info src/fastsub/_core.c src/fastsub/_core*.so .pytest_cache .hypothesis
