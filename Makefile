# topicmatch: `make test` and `make demo` do all the set-up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
PYTEST_ARGS ?=

# The C core: one folder per layer (docs/design.md), each on the include
# path, as in setup.py.
CORE_C := $(sort $(wildcard csrc/*/*.c))
CORE_H := $(sort $(wildcard csrc/*/*.h))
CORE_INC := $(patsubst %/,-I%,$(sort $(dir $(CORE_C) $(CORE_H))))

.PHONY: mingw-deps valgrind ccache callgrind bench-instructions bench-instructions-update all venv build test test-plain test-engine test-sanitize demo bench bench-check bench-report wheels system-deps clean cross-windows test-steps

all: build

# The venv is installed without bytecode (--no-compile, below): Python writes
# the bytecode of what is imported, as it is imported.
unexport PYTHONDONTWRITEBYTECODE

# $(call apt_install,PACKAGES,WHAT): a shell command that installs the Debian
# PACKAGES (as root, or through sudo), saying so.  RUNLEVEL=1: a package's
# service is not started by its install (rabbitmq-server's would be).
apt_install = echo "installing $(2) (Debian packages)"; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	$$SUDO env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -qq --no-install-recommends $(1) >/dev/null

# Debian packages the test suite needs (the MQTT and AMQP oracles); installed only when missing.
system-deps:
	@if ! command -v mosquitto >/dev/null 2>&1 && [ ! -x /usr/sbin/mosquitto ]; then \
	    $(call apt_install,mosquitto,mosquitto); \
	fi
	@if ! command -v rabbitmq-server >/dev/null 2>&1 && [ ! -x /usr/sbin/rabbitmq-server ] && [ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then \
	    $(call apt_install,rabbitmq-server,rabbitmq-server (the AMQP oracle)); \
	    if command -v service >/dev/null 2>&1; then $$SUDO service rabbitmq-server stop >/dev/null 2>&1 || true; fi; \
	fi

# --no-compile: pip would byte-compile every module of every package (PySpark,
# botocore and pandas are thousands of files), most of which no test imports;
# Python compiles what is imported on first use.  164 s -> 102 s for this
# install on a fresh venv here (the set-up's critical path in CI).  That
# needs Python free to write the bytecode it compiles, once (unexport
# below): with PYTHONDONTWRITEBYTECODE set, as on this machine, every
# process -- each test's subprocess, each Spark worker -- compiled its
# imports again (CI's plain pass: 647 s, against 556 s before).
$(VENV)/.deps: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --no-compile --upgrade pip setuptools wheel "Cython>=3.1"
	$(PIP) install -q --no-compile -e '.[test,bench,spark,wheels]' --no-build-isolation
	touch $@

venv: $(VENV)/.deps

build: venv
	$(PY) setup.py -q build_ext --inplace

# Everything: the Windows cross-build, the suite (brokers and Spark
# included), then the suite again under AddressSanitizer +
# UndefinedBehaviorSanitizer (clang's),
# the threaded tests under ThreadSanitizer, then a short run of each fuzzer.
# `make test-steps` lists the steps; each prints its time when it ends.
#
# The first, plain run draws every test's full Hypothesis examples.  The
# runs after it repeat the suite on another build of the same code, to check
# that build, not to search new inputs: they draw a tenth of the examples
# (REPEAT_ENV: the ci-repeat profile, tests/conftest.py), and the brokers'
# differential tests (seeded, deterministic) run in the plain pass only.
#
# Two lanes at once (tools/test_lanes.sh): the plain pass is run as two
# complementary halves.  The tests that start servers (SERVER_MARKS: Spark's
# JVMs, Connect server and standalone cluster; the brokers; amqtt), some
# three quarters of the plain pass's time, run in the background, niced, while
# the other steps run one after another beside them, as before.  The lanes
# need nothing from each other: every other step builds in its own directory
# (build/asan-clang, build/tsan, build/fuzz, ...), and the halves share only the
# in-place build, which neither writes.  Nothing runs twice and nothing is
# left out: the halves' markers are complements.  The background lane's
# output is printed when it ends (and kept in build/test-logs/).
# `make test TEST_BG_STEPS= TEST_STEPS="cross-windows test-plain ..."` runs
# everything in one lane; a background step "a+b" is a chain, run one after
# the other in the background lane (.ci/run adds the release checks after
# the servers' half this way).
TEST_BG_STEPS := test-plain-servers
TEST_STEPS := cross-windows test-plain-rest test-sanitize test-tsan fuzz-smoke
REPEAT_ENV := HYPOTHESIS_PROFILE=ci-repeat
test: system-deps build
	@MAKE="$(MAKE)" bash tools/test_lanes.sh build/test-logs "$(TEST_BG_STEPS)" "$(TEST_STEPS)"
test-steps:
	@echo $(TEST_BG_STEPS) $(TEST_STEPS)

# The whole suite once, brokers and Spark included, with all its examples.
test-plain: system-deps build
	$(PY) -m pytest $(PYTEST_ARGS)

# The plain pass in two halves (`make test` runs them at the same time):
# the tests that start servers (Spark, the brokers, amqtt), and the rest.
# The servers' half leaves .pytest_cache alone (the rest's pytest, running
# at the same time, keeps it).  It runs the brokers' and amqtt's tests
# first, which mostly wait on sockets, and Spark's last, whose JVMs can use
# both cores once the foreground lane is done; both runs always run, and the
# target fails if either does.
SERVER_MARKS := spark or brokers or amqtt
test-plain-servers: system-deps build
	$(PY) -m pytest -p no:cacheprovider -m "($(SERVER_MARKS)) and not spark" $(PYTEST_ARGS); \
	    rc=$$?; $(PY) -m pytest -p no:cacheprovider -m spark $(PYTEST_ARGS) && exit $$rc
# PLAIN_SKIP: test files to leave out (CI: what its wheel round trip runs
# against the installed wheel anyway).
test-plain-rest: build
	$(PY) -m pytest -m "not ($(SERVER_MARKS))" $(addprefix --ignore=,$(PLAIN_SKIP)) $(PYTEST_ARGS)
.PHONY: test-plain-servers test-plain-rest

# The pure engine alone (no brokers, no JVM).
test-engine: build
	$(PY) -m pytest -m "not brokers and not spark" $(PYTEST_ARGS)

# The suite under clang's ASan + UBSan, from a sanitized build in its own
# directory (the normal in-place build is left alone): every test file,
# once, on one sanitized build.  clang's UBSan also checks pointer
# arithmetic on NULL and nullability (gcc's cannot).  The extension links
# the shared ASan runtime, preloaded into python.  This was two passes, gcc's
# and clang's, each taking half of the files: the same checks, with a second
# sanitized build (about a minute of CI) for nothing.
# Left out:
# - Spark (the JVM's launcher scripts hang with an ASan runtime preloaded)
#   and the brokers' tests (seeded and deterministic: the plain pass runs them);
# - the tests that start amqtt (test_amqtt*.py, test_docs_embedding.py):
#   amqtt's own threads crash under a preloaded ASan runtime, outside
#   topicmatch's code (gcc 12: its authentication plugin's crypt probe, in
#   the crypt interceptor, before any topicmatch code runs; clang 14: a
#   SEGV in pthread_kill, raised on one of its threads).  The plain pass and
#   the wheel round trip run them;
# - the files that run no code of the extension's (the source layout, the
#   docs' links, make's recipes, the gate's arithmetic): a sanitized build
#   has nothing to check there (test_typing.py skips itself there).
# lsan.supp names only CPython's own allocators; tests/ubsan.supp is for
# known, reported cases (none now: F3 is fixed); every other report stops
# the run.
NO_NATIVE_TESTS := tests/test_layout.py tests/test_docs_links.py tests/test_make_demo.py \
	tests/test_instructions_gate.py
SAN_SKIP := tests/test_amqtt.py tests/test_amqtt_hostile.py tests/test_docs_embedding.py tests/test_amqtt_image.py \
	$(NO_NATIVE_TESTS)
SAN_DIR := build/asan-clang
# pytest captures fd 2, so the report of a process the sanitizer stops would
# be lost with it: reports go to files (log_path), and those that report an
# error are printed when the run fails (not the clean exits' suppression
# tallies, nor the leaks of git and coreutils run under the preloaded
# runtime, which crowded the one that mattered out of the CI log).
# intercept_tls_get_addr=0: clang 14's __tls_get_addr interceptor takes a
# malloc'd dynamic TLS block that happens to start 16 bytes into a page for
# a pre-2.25 glibc header and reads the words before it, and LSan's tracer
# then dies at exit ("Tracer caught signal 11 ... LeakSanitizer has
# encountered a fatal error": 2 of 8 loaded runs of test_no_leak here, none
# of 8 with it off).  Our own thread-locals are initial-exec (static TLS,
# FS_THREAD_LOCAL), which the option does not touch.
SAN_REPORTS = sh -c 'for f in "$$0"/report.*; do [ -f "$$f" ] && grep -q -E "ERROR|runtime error|fatal error" "$$f" \
	&& ! grep -q -E "\(/usr/bin/(git|tail|sort|head|cat)\+" "$$f" && { echo "== $$f"; head -c 20000 "$$f"; }; done; true'
SAN_ENV = PYTHONPATH=$(CURDIR)/$(SAN_DIR)/src PYTHONMALLOC=malloc \
	ASAN_OPTIONS=detect_leaks=1:intercept_tls_get_addr=0:log_path=$(CURDIR)/$(SAN_DIR)/report \
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$(CURDIR)/tests/ubsan.supp:log_path=$(CURDIR)/$(SAN_DIR)/report \
	LD_PRELOAD="$$(clang -print-file-name=libclang_rt.asan-x86_64.so)"
test-sanitize: venv clang-deps
	rm -rf $(SAN_DIR) && mkdir -p $(SAN_DIR)
	cp -r setup.py pyproject.toml README.md MANIFEST.in csrc src $(wildcard LICENSE) $(SAN_DIR)/
	rm -f $(SAN_DIR)/src/topicmatch/*.so $(SAN_DIR)/src/topicmatch/_core.c
	cd $(SAN_DIR) && CC=clang LDSHARED="clang -shared" TOPICMATCH_SANITIZE=1 \
	    $(CURDIR)/$(PY) setup.py -q build_ext --inplace
	$(SAN_ENV) $(PY) -c "import topicmatch._core as c; assert '$(SAN_DIR)' in c.__file__, c.__file__"
	$(SAN_ENV) $(REPEAT_ENV) $(PY) -m pytest -q -p no:cacheprovider -m "not spark and not brokers" \
	    $(addprefix --ignore=,$(SAN_SKIP)) $(PYTEST_ARGS) \
	    || { $(SAN_REPORTS) $(SAN_DIR); exit 1; }

# The threaded tests (threads, the cache, match_many on native threads,
# writers during batches and during serialization) under ThreadSanitizer:
# a TSan build of the extension (gcc, TOPICMATCH_TSAN=1) in its own directory,
# libtsan preloaded into the (uninstrumented) python.  Any report fails the
# run (exit code 66).  tests/tsan.supp is for CPython-internal reports only
# (none so far).  First a self-check: a deliberate race in a small library
# called from Python must be reported, or the set-up is blind.  Then the
# thread layer's C smoke test (tests/sys_smoke.c, pthread side: the index
# lock, the pool, and match() from 16 threads beside inserts and removes
# with the cache on) under TSan.
TSAN_DIR := build/tsan
TSAN_ENV = PYTHONPATH=$(CURDIR)/$(TSAN_DIR)/src PYTHONMALLOC=malloc \
	TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp exitcode=66 second_deadlock_stack=1" \
	LD_PRELOAD="$$(gcc -print-file-name=libtsan.so)"
TSAN_TESTS := tests/test_threads.py tests/test_cache.py tests/test_ft.py \
	tests/test_match_many.py::test_threads_give_identical_arrays_on_big_batches \
	tests/test_serial.py::test_dump_while_others_write tests/test_memory.py::test_threads_hammering_one_index \
	tests/test_image.py::test_full_check_on_threads_gives_the_one_thread_verdict \
	tests/test_image_write_threads.py::test_threaded_writer_writes_the_one_thread_bytes \
	tests/test_image_checksum.py::test_version_4_blocks_on_threads_find_a_flip_in_any_block
test-tsan: venv
	rm -rf $(TSAN_DIR) && mkdir -p $(TSAN_DIR)
	cp -r setup.py pyproject.toml README.md MANIFEST.in csrc src $(wildcard LICENSE) $(TSAN_DIR)/
	rm -f $(TSAN_DIR)/src/topicmatch/*.so $(TSAN_DIR)/src/topicmatch/_core.c
	cd $(TSAN_DIR) && TOPICMATCH_TSAN=1 $(CURDIR)/$(PY) setup.py -q build_ext --inplace
	gcc -fsanitize=thread -fPIC -shared -O1 -g tests/tsan_canary.c -o $(TSAN_DIR)/canary.so
	@if $(TSAN_ENV) $(PY) -c "import ctypes; ctypes.CDLL('$(TSAN_DIR)/canary.so').tsan_canary()" \
	        2>$(TSAN_DIR)/canary.log || ! grep -q "ThreadSanitizer: data race" $(TSAN_DIR)/canary.log; then \
	    echo "test-tsan: the deliberate race was not reported: the set-up is blind"; exit 1; \
	else echo "test-tsan: self-check ok (the deliberate race was reported)"; fi
	# (linked with the core library the extension's build just compiled,
	# with the same flags: the core is not compiled a second time)
	gcc -std=c11 -D_GNU_SOURCE -pthread -fsanitize=thread -O1 -g $(CORE_INC) tests/sys_smoke.c \
	    $(TSAN_DIR)/build/temp.*/libtopicmatch_core.a -o $(TSAN_DIR)/sys_smoke
	# (a bound, so that a lock that never lets go fails the step by name
	# rather than stalling CI: the smoke takes 4-7 s here, and up to about
	# 2 minutes beside CI's other lanes)
	@TSAN_OPTIONS="exitcode=66" timeout 600 $(TSAN_DIR)/sys_smoke || { rc=$$?; \
	    [ $$rc -ne 124 ] || echo "test-tsan: sys_smoke still running after 600 s: a hang"; exit $$rc; }
	$(TSAN_ENV) $(PY) -c "import topicmatch._core as c; assert '$(TSAN_DIR)' in c.__file__, c.__file__"
	$(TSAN_ENV) $(REPEAT_ENV) $(PY) -m pytest -q -p no:cacheprovider $(TSAN_TESTS) $(PYTEST_ARGS)
.PHONY: test-tsan

# The threaded tests, the cache's, the batch's and the property state
# machine on a free-threaded CPython 3.13t, with the GIL off by the module's
# own declaration (never PYTHON_GIL=0): tools/test_ft.sh builds that
# interpreter once into FT_CACHE (trixie's python3.13 source package,
# fetched through a private apt configuration; about 5.5 minutes on 2
# cores), a venv with the cp313t wheels in build/ft-venv, and topicmatch in a
# copy of the tree (build/ft).  FT_TESTS="tests/..." to choose the tests.
FT_CACHE ?= $(HOME)/.cache/topicmatch
test-ft:
	FT_CACHE=$(FT_CACHE) bash tools/test_ft.sh $(PYTEST_ARGS)
# The Debian packages the interpreter's build needs (when it is not built
# yet): .ci/run installs them with the others, one apt-get at a time.
ft-deps:
	@FT_CACHE=$(FT_CACHE) FT_STAGE=deps bash tools/test_ft.sh
# The free-threaded interpreter alone, built when missing; prints its path.
FT_PYTHON = $(FT_CACHE)/python3.13t/bin/python3.13t
ft-python:
	@FT_CACHE=$(FT_CACHE) FT_STAGE=python bash tools/test_ft.sh >/dev/null
.PHONY: test-ft ft-deps ft-python

# The C core built for Windows with mingw-w64 (a Debian package, installed
# when missing), under the same warnings as setup.py's `strict` flags plus
# what MSVC's C would reject (-Wvla; -Wpedantic for GNU extensions).  Every
# csrc/*/*.c is compiled twice: as gcc/clang see it, and with FS_BITS_PORTABLE
# (fs_bits.h's MSVC side, on mingw's intrinsic headers).  Then: only
# csrc/base/fs_sys.[ch] may name pthreads or Win32 (a grep, and no POSIX thread
# header among any file's includes), and tests/sys_smoke.c (the thread
# layer's Win32 side, and a threaded batch with writers) is linked with
# each set of objects and, when Wine is installed, run.  Two compiles at a time.  Wine is optional (a large install): without
# it the target says the smoke test was not run.  Its prefix, slow to
# create, is kept in build/wine-prefix.
XWIN_CC := x86_64-w64-mingw32-gcc
XWIN_DIR := build/cross-windows
XWIN_CFLAGS := -std=c11 -Wall -Wextra -Wconversion -Wshadow -Werror -Wvla -Wpedantic -O2 $(CORE_INC)
XWIN_OS_NAMES := pthread|sched_yield|clock_gettime|sysconf|<windows\.h>|<unistd\.h>|SRWLock|ConditionVariable|CreateThread|_beginthread|WaitForSingleObject|InitOnce|Fls[A-Z]|Tls[A-Z]|SwitchToThread
WINE ?= $(firstword $(shell command -v wine64 wine 2>/dev/null) $(wildcard /usr/lib/wine/wine64))
mingw-deps:
	@if ! command -v $(XWIN_CC) >/dev/null 2>&1; then \
	    $(call apt_install,mingw-w64,mingw-w64); \
	fi
cross-windows: mingw-deps
	@rm -rf $(XWIN_DIR) && mkdir -p $(XWIN_DIR)/builtin $(XWIN_DIR)/portable
	@printf '%s\n' $(CORE_C) | xargs -P 2 -I{} sh -c 'o=$$(basename {} .c).o; \
	    $(XWIN_CC) $(XWIN_CFLAGS) -MMD -MF $(XWIN_DIR)/$$o.d -c {} -o $(XWIN_DIR)/builtin/$$o && \
	    $(XWIN_CC) $(XWIN_CFLAGS) -DFS_BITS_PORTABLE -c {} -o $(XWIN_DIR)/portable/$$o' \
	    || { echo "cross-windows: a file does not compile (above)"; exit 1; }
	@if grep -nE '$(XWIN_OS_NAMES)' $(filter-out csrc/base/fs_sys.c csrc/base/fs_sys.h,$(CORE_C) $(CORE_H)); then \
	    echo "cross-windows: only csrc/base/fs_sys.[ch] may name pthreads or Win32 (above)"; exit 1; fi
	@$(XWIN_CC) $(XWIN_CFLAGS) -M $(CORE_C) | grep -E '(pthread|sched|unistd)[^ ]*\.h' \
	    && { echo "cross-windows: a POSIX thread header is included (above)"; exit 1; } || true
	@$(XWIN_CC) $(XWIN_CFLAGS) -static $(XWIN_DIR)/builtin/*.o tests/sys_smoke.c -o $(XWIN_DIR)/sys_smoke.exe
	@$(XWIN_CC) $(XWIN_CFLAGS) -DFS_BITS_PORTABLE -static $(XWIN_DIR)/portable/*.o tests/sys_smoke.c \
	    -o $(XWIN_DIR)/sys_smoke_portable.exe
	@echo "cross-windows: $(words $(CORE_C)) files x 2 compiled for x86_64 Windows, smoke test linked"
	@if [ -n "$(WINE)" ]; then \
	    for exe in sys_smoke sys_smoke_portable; do \
	        WINEPREFIX=$(CURDIR)/build/wine-prefix WINEDEBUG=-all $(WINE) $(XWIN_DIR)/$$exe.exe 2>$(XWIN_DIR)/$$exe.log \
	            | tr -d '\r' | grep -qx ok || { echo "cross-windows: $$exe.exe failed under Wine:"; cat $(XWIN_DIR)/$$exe.log; exit 1; }; \
	    done; echo "cross-windows: the smoke test passed under Wine ($(WINE))"; \
	else echo "cross-windows: Wine is not installed: the smoke test was linked, not run (apt-get install wine64 to run it)"; fi

# `make demo` installs only what the demo runs, in the same .venv: the
# [spark] extra (PySpark, pyarrow, pandas), numpy and the build tools of
# pyproject.toml's [build-system] -- not the test, bench and wheel tools that
# `make test` adds (a later `make test` upgrades this venv to the full one;
# a full venv already there is used as it is).  The extension is compiled
# once, in place (setup.py build_ext --inplace, incremental on later runs),
# and the demo imports it from src/.  Each step says what it does.  pip
# writes no .pyc files (--no-compile: a fifth of the install's time with its
# cache empty); Python writes those of the modules the demo imports.
DEMO_STAMP := $(VENV)/.demo-deps
DEMO_REQS := $(VENV)/demo-requirements.txt
# The requirements read from pyproject.toml: [build-system] requires, the
# dependencies and the [spark] extra (tomllib; pip's own tomli before 3.11).
DEMO_READ_REQS := import importlib, sys; \
    t = importlib.import_module('tomllib' if sys.version_info >= (3, 11) else 'pip._vendor.tomli'); \
    d = t.load(open('pyproject.toml', 'rb')); p = d['project']; \
    print('\n'.join(d['build-system']['requires'] + p['dependencies'] + p['optional-dependencies']['spark']))
$(DEMO_STAMP): pyproject.toml
	@if [ -f $(VENV)/.deps ] && [ $(VENV)/.deps -nt pyproject.toml ]; then \
	    echo "== make demo: [1/4] $(VENV) has make test's full set-up: nothing to install"; \
	else \
	    echo "== make demo: [1/4] a virtual environment in $(VENV), with pip up to date" && \
	    { [ -x $(PY) ] || $(PYTHON) -m venv $(VENV); } && \
	    $(PIP) install -q --upgrade pip && \
	    $(PY) -c "$(DEMO_READ_REQS)" > $(DEMO_REQS) && \
	    echo "== make demo: [2/4] installing the build tools and the [spark] extra (PySpark is" \
	         "the large one: a minute or two with pip's cache empty): $$(tr '\n' ' ' < $(DEMO_REQS))" && \
	    t=$$(date +%s) && $(PIP) install -q --no-compile -r $(DEMO_REQS) && \
	    echo "   installed in $$(( $$(date +%s) - t )) s" || exit 1; \
	fi
	@touch $@

demo: $(DEMO_STAMP)
	@echo "== make demo: [3/4] compiling the extension in place (the C core, then topicmatch._core)"
	@t=$$(date +%s) && $(PY) setup.py -q build_ext --inplace && echo "   compiled in $$(( $$(date +%s) - t )) s"
	@echo "== make demo: [4/4] topicmatch demo: a generated IoT sample fanned out on local Spark"
	PYTHONPATH=$(CURDIR)/src$${PYTHONPATH:+:$$PYTHONPATH} $(PY) -m topicmatch demo

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
# to choose), and a cp313t one with test-ft's free-threaded 3.13 (built
# first when missing, ~5.5 min once), repaired to a manylinux tag and
# stripped, each installed in a fresh venv and tested there with the
# sdist's tests.  Wheels land in dist/.
WHEEL_PYTHONS ?=
wheels: venv $(if $(WHEEL_PYTHONS),,ft-python)
	$(PY) tools/wheels.py $(if $(WHEEL_PYTHONS),--python $(WHEEL_PYTHONS),--also $(FT_PYTHON)) $(WHEELS_ARGS)

# The round trip as .ci/run runs it (in make test's background lane, after
# the servers' half): the venv's Python only, drawing the repeat profile's
# examples (the plain pass drew the full ones), WHEELS_ARGS from .ci/run.
wheels-ci: venv
	$(REPEAT_ENV) $(PY) tools/wheels.py --python "$$($(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
	    $(WHEELS_ARGS)
.PHONY: wheels-ci

# clang with its sanitizer and libFuzzer runtimes (Debian packages), installed
# only when a fuzzer cannot be linked.
clang-deps:
	@if ! printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }\n' | \
	        clang -fsanitize=fuzzer,address,undefined -x c - -o /dev/null >/dev/null 2>&1; then \
	    $(call apt_install,clang libclang-rt-14-dev,clang and its runtimes); \
	fi

# valgrind (Debian) for bench/callgrind.py's instruction counts; installed
# only when missing.  `make callgrind` prints them for the standard workloads.
valgrind:
	@if ! command -v valgrind >/dev/null 2>&1; then \
	    $(call apt_install,valgrind,valgrind); \
	fi
# ccache, for CI (.ci/run): the wheel round trip compiles the same sources
# with the same release flags as the in-place build, from the unpacked sdist.
ccache:
	@if ! command -v ccache >/dev/null 2>&1; then \
	    $(call apt_install,ccache,ccache); \
	fi
callgrind: build valgrind
	$(PY) bench/callgrind.py

# The instruction gate (bench/instructions.py; .ci/run runs it): callgrind's
# instructions per row of match_many, match and insert_many on light, heavy
# and hot1k (rows=3000), the median of three runs of each, against the
# committed baseline bench/instructions.json; fails on a count more than its
# tolerance above the baseline.  It measures the in-place release build of
# `make build` (setup.py's release flags, the wheel's).  A change that needs
# more instructions rewrites the baseline in the same commit with
# `make bench-instructions-update`, the reason in the commit message.
bench-instructions: build valgrind
	$(PY) bench/instructions.py
bench-instructions-update: build valgrind
	$(PY) bench/instructions.py --update

# libFuzzer harnesses on the C core (fuzz/), built from csrc/ directly with
# ASan + UBSan (pointer-overflow and nullability included, every report
# fatal).  `make fuzz`
# runs each for FUZZ_SECONDS and fails on any finding; `make fuzz-smoke`
# (part of `make test`) runs each for FUZZ_SMOKE_SECONDS.
FUZZ_TARGETS := load ops validate image arrow build
FUZZ_DIR := build/fuzz
FUZZ_SECONDS ?= 600
FUZZ_SMOKE_SECONDS ?= 10
FUZZ_CFLAGS := -g -O1 -std=c11 -D_GNU_SOURCE -pthread -Wall -Wextra -fno-omit-frame-pointer $(CORE_INC) \
	-fsanitize=fuzzer,address,undefined,nullability -fno-sanitize-recover=all \
	-DFS_BUILD_PAR_ENTRIES=8u -DFS_BUILD_PAR_CHUNK=3u -DFS_IMAGE_WRITE_PAR_ENTRIES=8u
# (fs_build.c writes tables of 8 entries and more on threads, 3 entries a
# take, and fs_image_write.c those of 8 entries and more: fuzz_build's and
# fuzz_image's few rows reach their threaded paths.)
# The core is compiled once (build/fuzz/obj) and linked into each harness.
FUZZ_OBJS := $(patsubst csrc/%.c,$(FUZZ_DIR)/obj/%.o,$(CORE_C))
$(FUZZ_DIR)/obj/%.o: csrc/%.c $(CORE_H) | clang-deps
	@mkdir -p $(@D)
	clang $(FUZZ_CFLAGS) -c $< -o $@
$(FUZZ_DIR)/fuzz_%: fuzz/fuzz_%.c fuzz/oracle.h fuzz/columns.h $(FUZZ_OBJS) $(CORE_H) | clang-deps
	clang $(FUZZ_CFLAGS) $(FUZZ_OBJS) $< -o $@
.SECONDARY: $(FUZZ_OBJS)
fuzz-build: $(FUZZ_TARGETS:%=$(FUZZ_DIR)/fuzz_%)
fuzz: fuzz-build
	@for t in $(FUZZ_TARGETS); do fuzz/run.sh $$t $(FUZZ_SECONDS) || exit 1; done
fuzz-smoke: fuzz-build
	@for t in $(FUZZ_TARGETS); do fuzz/run.sh $$t $(FUZZ_SMOKE_SECONDS) || exit 1; done
.PHONY: clang-deps fuzz-build fuzz fuzz-smoke

clean:
	rm -rf build dist src/*.egg-info src/topicmatch/_core.c src/topicmatch/_core*.so .pytest_cache .hypothesis
