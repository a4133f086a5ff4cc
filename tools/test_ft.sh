#!/usr/bin/env bash
# make test-ft: the threaded tests and the property state machine on a
# free-threaded CPython 3.13t with the GIL off by the module's own
# declaration (no PYTHON_GIL=0).
#
#   1. The interpreter is built once into $FT_CACHE/python3.13t (reused when
#      its .complete marker is there).  Its source is trixie's python3.13
#      source package, fetched through a private apt configuration (its own
#      sources.list, state and cache under $FT_CACHE/apt): the system's
#      sources are never read or changed.  We build the upstream tarball in
#      it (the .orig.tar.xz), with --disable-gil.
#   2. A venv under build/ft-venv gets the cp313t wheels (numpy, pyarrow,
#      hypothesis, pytest, Cython) and an in-place build of topicmatch in a copy
#      of the tree (build/ft), so the normal in-place build is left alone.
#   3. The tests run there; the first checks that importing topicmatch._core
#      leaves sys._is_gil_enabled() False.
#
# FT_CACHE (default ~/.cache/topicmatch), FT_JOBS (make -j, default 2),
# FT_TESTS (the test files), FT_STAGE: deps (install the Debian packages the
# interpreter's build needs, and stop: .ci/run's one apt-get at a time),
# python (stop once the interpreter is ready: `make wheels` builds its
# cp313t wheel with it), venv (once the interpreter and the venv are).  Cold: ~5.5 min for the interpreter, ~25 s for the
# wheels; warm: the build of topicmatch (~1 min) and the tests.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
FT_CACHE=${FT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/topicmatch}
PYVER=3.13
PREFIX=$FT_CACHE/python${PYVER}t
FT_DIR=$ROOT/build/ft
VENV=$ROOT/build/ft-venv
JOBS=${FT_JOBS:-2}
FT_TESTS=${FT_TESTS:-tests/test_ft.py tests/test_threads.py tests/test_cache.py tests/test_properties.py tests/test_match_many.py}
t0=$(date +%s)
say() { echo "test-ft: $* ($(( $(date +%s) - t0 )) s)"; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

build_deps() {
    local missing=()
    for p in build-essential pkg-config libssl-dev zlib1g-dev libffi-dev libbz2-dev liblzma-dev \
             libsqlite3-dev libreadline-dev uuid-dev libexpat1-dev xz-utils; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        say "installing build dependencies (Debian packages): ${missing[*]}"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

fetch_source() {
    # A private apt: only trixie's deb-src line, its own lists and archives.
    local apt=$FT_CACHE/apt
    mkdir -p "$apt/etc/sources.list.d" "$apt/etc/preferences.d" "$apt/state/lists/partial" \
             "$apt/cache/archives/partial" "$FT_CACHE/src"
    echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
        > "$apt/etc/sources.list"
    local opts=(-o "Dir::Etc::SourceList=$apt/etc/sources.list" -o "Dir::Etc::SourceParts=$apt/etc/sources.list.d"
                -o "Dir::Etc::PreferencesParts=$apt/etc/preferences.d"
                -o "Dir::State=$apt/state" -o "Dir::Cache=$apt/cache" -o "Debug::NoLocking=1"
                -o "APT::Sandbox::User=$(id -un)")
    say "apt-get update (private configuration: trixie deb-src only)"
    apt-get "${opts[@]}" -qq update
    (cd "$FT_CACHE/src" && apt-get "${opts[@]}" -qq source --download-only "python${PYVER}")
    ls "$FT_CACHE/src"/python${PYVER}_*.orig.tar.* >/dev/null 2>&1 \
        || { echo "test-ft: no python${PYVER} .orig tarball was downloaded into $FT_CACHE/src" >&2; exit 1; }
}

build_python() {
    build_deps
    ls "$FT_CACHE/src"/python${PYVER}_*.orig.tar.* >/dev/null 2>&1 || fetch_source
    local tarball; tarball=$(ls "$FT_CACHE/src"/python${PYVER}_*.orig.tar.* | head -n1)
    local work=$FT_CACHE/build-python${PYVER}t
    rm -rf "$work" "$PREFIX" && mkdir -p "$work"
    say "building CPython from $(basename "$tarball") with --disable-gil (make -j$JOBS)"
    tar -xf "$tarball" -C "$work" --strip-components=1
    (cd "$work" && ./configure -q --disable-gil --prefix="$PREFIX" --with-ensurepip=install >"$work/configure.log" 2>&1 \
        || { tail -n 30 "$work/configure.log"; exit 1; })
    (cd "$work" && make -s -j"$JOBS" >"$work/make.log" 2>&1 || { tail -n 40 "$work/make.log"; exit 1; })
    (cd "$work" && make -s install >"$work/install.log" 2>&1 || { tail -n 40 "$work/install.log"; exit 1; })
    "$PREFIX/bin/python${PYVER}t" -c 'import sys, ssl, zlib, ctypes; assert not sys._is_gil_enabled()'
    touch "$PREFIX/.complete"
    rm -rf "$work"
    say "interpreter ready: $PREFIX/bin/python${PYVER}t"
}

if [ "${FT_STAGE:-}" = deps ]; then
    [ -f "$PREFIX/.complete" ] || build_deps
    exit 0
fi
[ -f "$PREFIX/.complete" ] || build_python
[ "${FT_STAGE:-}" = python ] && { echo "$PREFIX/bin/python${PYVER}t"; exit 0; }
PY=$VENV/bin/python
if [ ! -f "$VENV/.deps" ]; then
    say "venv $VENV with the cp313t wheels"
    rm -rf "$VENV"
    "$PREFIX/bin/python${PYVER}t" -m venv "$VENV"
    "$PY" -m pip install -q --upgrade pip
    # Wheels only (tools/ft-requirements.txt says why), and the build's own.
    "$PY" -m pip install -q --only-binary :all: -r "$ROOT/tools/ft-requirements.txt" \
        "Cython>=3.1" "setuptools>=77" wheel 2>&1 | grep -v "is ignored: it is neither" || true
    "$PY" -c "import numpy, pyarrow, hypothesis, pytest, Cython"
    touch "$VENV/.deps"
fi
[ "${FT_STAGE:-}" = venv ] && { say "interpreter and venv ready"; exit 0; }
rm -rf "$FT_DIR" && mkdir -p "$FT_DIR"
cp -r "$ROOT"/setup.py "$ROOT"/pyproject.toml "$ROOT"/README.md "$ROOT"/MANIFEST.in "$ROOT"/csrc "$ROOT"/src "$ROOT"/tests "$FT_DIR"/
rm -f "$FT_DIR"/src/topicmatch/*.so "$FT_DIR"/src/topicmatch/_core.c
rm -rf "$FT_DIR"/tests/__pycache__
say "building topicmatch for $("$PY" -c 'import sys; print(sys.implementation.cache_tag, "free-threaded" if not sys._is_gil_enabled() else "GIL")')"
(cd "$FT_DIR" && "$PY" setup.py -q build_ext --inplace >build.log 2>&1 || { tail -n 40 build.log; exit 1; })
# Never PYTHON_GIL=0: the module must keep the GIL off by its own declaration.
cd "$FT_DIR"
env -u PYTHON_GIL PYTHONPATH=src "$PY" -W error::RuntimeWarning -c \
    'import sys, topicmatch._core as c; assert not sys._is_gil_enabled(), "importing topicmatch re-enabled the GIL"; print("test-ft: GIL off after import:", c.__file__)'
env -u PYTHON_GIL PYTHONPATH=src "$PY" -m pytest -q -p no:cacheprovider -W error::RuntimeWarning $FT_TESTS "$@"
say "done"
