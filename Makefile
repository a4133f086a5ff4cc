# fastsub: `make test` and `make demo` do all the set-up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
PYTEST_ARGS ?=

.PHONY: all venv build test test-engine test-sanitize demo bench system-deps clean

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
	$(PIP) install -q -e '.[test,bench]' --no-build-isolation
	touch $@

venv: $(VENV)/.deps

build: venv
	$(PY) setup.py -q build_ext --inplace

test: system-deps build
	$(PY) -m pytest $(PYTEST_ARGS)

# The pure engine alone (no brokers, no JVM).
test-engine: build
	$(PY) -m pytest -m "not brokers and not spark" $(PYTEST_ARGS)

# The suite under ASan + UBSan.
test-sanitize: system-deps venv
	FASTSUB_SANITIZE=1 $(PY) setup.py -q build_ext --inplace --force
	ASAN_OPTIONS=detect_leaks=0 PYTHONMALLOC=malloc LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	    $(PY) -m pytest -m "not spark" -x -q -p no:cacheprovider $(PYTEST_ARGS)
	$(PY) setup.py -q build_ext --inplace --force

demo: build
	$(VENV)/bin/fastsub demo

bench: build
	$(PY) bench/run_engine.py

clean:
	rm -rf build dist src/*.egg-info src/fastsub/_core.c src/fastsub/_core*.so .pytest_cache .hypothesis
