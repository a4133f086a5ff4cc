"""Build script: the C core (csrc/) as its own strictly-warned static library,
then the thin Cython extension topicmatch._core linked against it.

Build switches (environment variables, "1" to enable):
  TOPICMATCH_DEBUG     -O0 -g, C asserts on
  TOPICMATCH_SANITIZE  AddressSanitizer + UndefinedBehaviorSanitizer (implies DEBUG,
                    but the C core at -O1, the optimisation ASan's authors advise);
                    with CC=clang also nullability and NULL-pointer arithmetic
                    checks, linked to the shared ASan runtime (make test-sanitize)
  TOPICMATCH_TSAN      ThreadSanitizer, -O1 (make test-tsan)
  TOPICMATCH_COVERAGE  gcov instrumentation of the C core
  TOPICMATCH_SYMBOLS   keep debug symbols (-g) in an optimized build, for
                    profilers; release builds (wheels) carry none
  TOPICMATCH_BUILD_JOBS=N  compilers run at once for the C core (default:
                    the CPUs this process may use)
  TOPICMATCH_BLOCK_ROWS=N  rows per block of the batch pipeline (csrc/batch/fs_batch.c;
                    default 32), for measuring other sizes

On Windows the C core builds with MSVC (the flags below) or mingw-w64; its
threads go through csrc/base/fs_sys.h, which uses Win32 there.
"""
import glob
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_clib import build_clib
from setuptools.command.build_ext import build_ext


class build_clib_for_compiler(build_clib):
    """The core library with MSVC's flags when MSVC builds it: which compiler
    runs is only known here, not when setup() is called.  Its files are
    compiled on every core (distutils compiles one after another, and the
    core's ~40 files are most of a build: make test builds it five ways)."""

    def build_libraries(self, libraries):
        if self.compiler.compiler_type == "msvc":
            if SANITIZE or TSAN or COVERAGE:
                raise SystemExit("topicmatch: the sanitizer and coverage builds need gcc or clang, not MSVC")
            libraries = [(name, {**info, "cflags": MSVC_CORE}) for name, info in libraries]
        one_by_one = self.compiler.compile
        self.compiler.compile = lambda sources, **kw: compile_in_parallel(one_by_one, sources, **kw)
        try:
            super().build_libraries(libraries)
        finally:
            self.compiler.compile = one_by_one


def compile_in_parallel(compile_files, sources, **kw):
    """compile_files(sources, **kw) on BUILD_JOBS threads, one file per call
    (each call runs the compiler in a process of its own); the objects in
    the sources' order."""
    if BUILD_JOBS < 2 or len(sources) < 2:
        return compile_files(sources, **kw)
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(BUILD_JOBS) as pool:
        return [obj for objs in pool.map(lambda source: compile_files([source], **kw), sources) for obj in objs]


class build_ext_with_core(build_ext):
    """Build the C core library first, whatever command asked for build_ext
    (pip's editable install and `build_ext --inplace` skip build_clib)."""

    def run(self):
        self.run_command("build_clib")
        super().run()

    def build_extension(self, ext):
        if self.compiler.compiler_type == "msvc":
            ext.extra_compile_args = MSVC_EXT
            ext.extra_link_args = []
        super().build_extension(ext)


def flag(name):
    return os.environ.get(name, "0") not in ("", "0", "false", "False")


DEBUG = flag("TOPICMATCH_DEBUG") or flag("TOPICMATCH_SANITIZE")
SANITIZE = flag("TOPICMATCH_SANITIZE")
TSAN = flag("TOPICMATCH_TSAN")
CLANG = "clang" in os.path.basename(os.environ.get("CC", "").split(" ")[0])
COVERAGE = flag("TOPICMATCH_COVERAGE")
SYMBOLS = flag("TOPICMATCH_SYMBOLS")
CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
BUILD_JOBS = int(os.environ.get("TOPICMATCH_BUILD_JOBS") or CPUS)

mode = ", ".join(m for m, on in (("debug", DEBUG), ("sanitize", SANITIZE), ("tsan", TSAN), ("coverage", COVERAGE),
                                 ("symbols", SYMBOLS and not DEBUG)) if on)
print(f"topicmatch build: {mode or 'release'}", file=sys.stderr)

# -g0 last: Python's own CFLAGS often carry -g, which would leave megabytes
# of debug information in a release build.
opt = ["-O0", "-g3"] if DEBUG else ["-O1", "-g"] if TSAN else ["-O3", "-g"] if SYMBOLS else ["-O3", "-g0"]
# A sanitized build compiles the core at -O1 (asserts still on), Cython's C
# at -O0: the sanitizer passes of `make test` ran the core's tests about 28%
# faster so (tests/test_serial.py and test_match_many.py under clang's ASan,
# 67 -> 48 s, two rounds each), for 24 s more of compiling; -O1 for Cython's
# 3.8 MB of C too cost a minute more to build and gained nothing more.
core_opt = ["-O1", "-g"] if SANITIZE else opt
defines = [] if DEBUG or TSAN else [("NDEBUG", "1")]
if os.environ.get("TOPICMATCH_BLOCK_ROWS"):
    defines.append(("FS_BLOCK_ROWS", str(int(os.environ["TOPICMATCH_BLOCK_ROWS"]))))
instrument = []
link_instrument = []
if SANITIZE:
    instrument += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]
    link_instrument += ["-fsanitize=address,undefined"]
    if CLANG:
        # clang's UBSan also sees pointer arithmetic on NULL (gcc's has no
        # such check) and nullability; pointer-overflow stays recoverable
        # only so that a suppressions file can name a known case, while
        # UBSAN_OPTIONS=halt_on_error=1 stops on any other.
        instrument += ["-fsanitize=nullability", "-fsanitize-recover=pointer-overflow"]
        link_instrument += ["-fsanitize=nullability", "-shared-libasan"]
if TSAN:
    instrument += ["-fsanitize=thread", "-fno-omit-frame-pointer"]
    link_instrument += ["-fsanitize=thread"]
if COVERAGE:
    instrument += ["--coverage"]
    link_instrument += ["--coverage"]

# Our own C: strict.  Cython's generated C: the compiler's defaults.
# (`make cross-windows` compiles csrc/ for Windows under the same warnings.)
# No -pthread on Windows: the core's threads are Win32 there (fs_sys.h).
WINDOWS = sys.platform == "win32"
pthread = [] if WINDOWS else ["-pthread"]
# -fvisibility=hidden: the core's functions are the extension's own, not
# exported from it, so the calls between them are direct instead of through
# the PLT (a default-visibility function in a shared object may be
# interposed: every call to one is an indirect jump).
strict = ["-std=c11", "-Wall", "-Wextra", "-Wconversion", "-Wshadow", "-Werror", "-fPIC",
          "-fvisibility=hidden", "-D_GNU_SOURCE"] + pthread
# The core's folders are its layers (docs/design.md, "Layers of the C core"),
# each on the include path: an #include names the file alone, so moving a
# file between layers touches no source, and other branches' edits merge by
# rename.  The layering (includes only go down) is tests/test_layout.py's.
CORE_LAYERS = ["base", "rules", "arrow", "index", "match", "batch", "api", "serial"]
core_dirs = [f"csrc/{layer}" for layer in CORE_LAYERS]
core_sources = sorted(glob.glob("csrc/*/*.c"))

# MSVC (the Windows wheels) takes none of gcc's flags.  C11 with its atomics:
# <stdatomic.h> needs /experimental:c11atomics (Visual Studio 2022 17.5 or
# later), for the core and for the extension too, which includes
# fs_batch.h.  Warnings are shown, not fatal: the -Werror gate is gcc's and
# clang's (and mingw-w64's, in make cross-windows), since MSVC's own cannot
# be checked off Windows.  The sanitizer and coverage builds are gcc/clang's.
MSVC_C = ["/std:c11", "/experimental:c11atomics"]
MSVC_OPT = ["/Od", "/Zi"] if DEBUG else ["/O2"]
MSVC_CORE = MSVC_C + MSVC_OPT + ["/W3"]
MSVC_EXT = MSVC_C + MSVC_OPT

ext = Extension(
    "topicmatch._core",
    sources=["src/topicmatch/_core.pyx"],
    # relink when the core library changes
    depends=sorted(glob.glob("csrc/*/*.[ch]")) + ["src/topicmatch/_pyobjects.h", "src/topicmatch/_pyrows.h"],
    include_dirs=core_dirs,
    define_macros=defines,
    extra_compile_args=opt + instrument,
    extra_link_args=link_instrument + pthread,
)

setup(
    cmdclass={"build_clib": build_clib_for_compiler, "build_ext": build_ext_with_core},
    libraries=[("topicmatch_core", {
        "sources": core_sources,
        # every object depends on every header of the core: a change to a
        # header alone (an inline function) rebuilds the library, where
        # setuptools would keep the old objects
        "obj_deps": {"": sorted(glob.glob("csrc/*/*.h"))},
        "include_dirs": core_dirs,
        "macros": defines,
        # Python's CFLAGS carry -fwrapv, which also turns off UBSan's signed
        # overflow and (clang) pointer-overflow checks: off for our C.
        "cflags": strict + core_opt + instrument + (["-fno-wrapv"] if SANITIZE else []),
    })],
    ext_modules=__import__("Cython.Build", fromlist=["cythonize"]).cythonize(
        [ext],
        language_level=3,
        # freethreading_compatible: the module declares (Py_mod_gil) that it
        # runs without the GIL on a free-threaded CPython; what protects each
        # shared structure is in docs/design.md, "Threads".
        # embedsignature off: each docstring opens with its signature, with
        # the return type (which Cython's embedded one lacks), and
        # inspect.signature reads the parameters from the function itself;
        # embedding gave every docstring its signature twice.
        compiler_directives={"boundscheck": False, "wraparound": False, "embedsignature": False,
                             "freethreading_compatible": True},
    ),
)
