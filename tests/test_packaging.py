"""What an installed topicmatch carries: one version everywhere, the license in
its metadata, the command line's --version, and -- in the wheel round-trip
of tools/wheels.py, which sets TOPICMATCH_EXPECT_INSTALLED to the venv's
site-packages -- that the tests really ran against the installed wheel and
that the wheel holds no build sources."""
import importlib.metadata as md
import os
import subprocess
import sys

import pytest

import topicmatch
import topicmatch._core

INSTALLED = os.environ.get("TOPICMATCH_EXPECT_INSTALLED")


def test_one_version_everywhere():
    assert md.version("topicmatch") == topicmatch.__version__
    out = subprocess.run([sys.executable, "-m", "topicmatch", "--version"], capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith(f"topicmatch {topicmatch.__version__} (CPython ")


def test_license_in_the_metadata():
    meta = md.metadata("topicmatch")
    assert meta["License-Expression"] == "Apache-2.0"
    assert "LICENSE" in (meta.get_all("License-File") or [])


@pytest.mark.skipif(not INSTALLED, reason="only in the wheel round-trip (tools/wheels.py sets "
                    "TOPICMATCH_EXPECT_INSTALLED); a development build is imported from src/")
def test_running_against_the_installed_wheel():
    site = os.path.realpath(INSTALLED) + os.sep
    for mod in (topicmatch, topicmatch._core):
        assert os.path.realpath(mod.__file__).startswith(site), (mod.__file__, site)
    files = [str(f) for f in md.files("topicmatch") or []]
    shipped = [f for f in files if f.startswith("topicmatch/")]
    assert "topicmatch/py.typed" in shipped and "topicmatch/_core.pyi" in shipped
    assert not [f for f in shipped if f.endswith((".pyx", ".pxi", ".pxd", ".c", ".h"))], shipped
    assert any(f.endswith(".dist-info/licenses/LICENSE") for f in files), files
    # the old name (taken on PyPI by an unrelated project) is not shipped
    assert not [f for f in files if f.split("/")[0].startswith(OLD_NAME)], files


#: The package's name before the rename: PyPI's "fastsub" is another project.
OLD_NAME = "fastsub"


def test_the_old_name_is_not_importable():
    # no shim: this project was never published under the old name, and
    # the stranger's package of that name must not be shadowed either
    out = subprocess.run([sys.executable, "-c", f"import {OLD_NAME}"], capture_output=True, text=True)
    assert out.returncode == 1 and "ModuleNotFoundError" in out.stderr, out.stderr
    assert md.version("topicmatch") == topicmatch.__version__


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(not os.path.isdir(os.path.join(ROOT, "bench")),
                    reason="not a source checkout: bench/ is not beside tests/")
def test_benchmarks_reach_nothing_outside_the_repository():
    outside = ("shared/bench", "'..', '..'", '"..", ".."', "../..")
    for d in ("bench", "tools"):
        for name in sorted(os.listdir(os.path.join(ROOT, d))):
            if name.endswith((".py", ".sh", ".md")):
                text = open(os.path.join(ROOT, d, name), encoding="utf-8").read()
                assert not [o for o in outside if o in text], f"{d}/{name} reaches outside the repository"
    assert os.path.exists(os.path.join(ROOT, "bench", "gen_workload.py"))
