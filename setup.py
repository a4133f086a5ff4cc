"""Build script: the C core (csrc/) as its own strictly-warned static library,
then the thin Cython extension fastsub._core linked against it.

Build switches (environment variables, "1" to enable):
  FASTSUB_DEBUG     -O0 -g, C asserts on
  FASTSUB_SANITIZE  AddressSanitizer + UndefinedBehaviorSanitizer (implies DEBUG)
  FASTSUB_COVERAGE  gcov instrumentation of the C core
  FASTSUB_SYMBOLS   keep debug symbols (-g) in an optimized build, for
                    profilers; release builds (wheels) carry none
"""
import glob
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class build_ext_with_core(build_ext):
    """Build the C core library first, whatever command asked for build_ext
    (pip's editable install and `build_ext --inplace` skip build_clib)."""

    def run(self):
        self.run_command("build_clib")
        super().run()


def flag(name):
    return os.environ.get(name, "0") not in ("", "0", "false", "False")


DEBUG = flag("FASTSUB_DEBUG") or flag("FASTSUB_SANITIZE")
SANITIZE = flag("FASTSUB_SANITIZE")
COVERAGE = flag("FASTSUB_COVERAGE")
SYMBOLS = flag("FASTSUB_SYMBOLS")

mode = ", ".join(m for m, on in (("debug", DEBUG), ("sanitize", SANITIZE), ("coverage", COVERAGE),
                                 ("symbols", SYMBOLS and not DEBUG)) if on)
print(f"fastsub build: {mode or 'release'}", file=sys.stderr)

# -g0 last: Python's own CFLAGS often carry -g, which would leave megabytes
# of debug information in a release build.
opt = ["-O0", "-g3"] if DEBUG else ["-O3", "-g"] if SYMBOLS else ["-O3", "-g0"]
defines = [] if DEBUG else [("NDEBUG", "1")]
instrument = []
link_instrument = []
if SANITIZE:
    instrument += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]
    link_instrument += ["-fsanitize=address,undefined"]
if COVERAGE:
    instrument += ["--coverage"]
    link_instrument += ["--coverage"]

# Our own C: strict.  Cython's generated C: the compiler's defaults.
strict = ["-std=c11", "-Wall", "-Wextra", "-Wconversion", "-Wshadow", "-Werror", "-fPIC",
          "-D_GNU_SOURCE", "-pthread"]
core_sources = sorted(glob.glob("csrc/*.c"))

ext = Extension(
    "fastsub._core",
    sources=["src/fastsub/_core.pyx"],
    # relink when the core library changes
    depends=sorted(glob.glob("csrc/*.[ch]")),
    include_dirs=["csrc"],
    define_macros=defines,
    extra_compile_args=opt + instrument,
    extra_link_args=link_instrument + ["-pthread"],
)

setup(
    cmdclass={"build_ext": build_ext_with_core},
    libraries=[("fastsub_core", {
        "sources": core_sources,
        "include_dirs": ["csrc"],
        "macros": defines,
        "cflags": strict + opt + instrument,
    })],
    ext_modules=__import__("Cython.Build", fromlist=["cythonize"]).cythonize(
        [ext],
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False, "embedsignature": True},
    ),
)
