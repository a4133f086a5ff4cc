"""What an installed fastsub carries: one version everywhere, the license in
its metadata, the command line's --version, and -- in the wheel round-trip
of tools/wheels.py, which sets FASTSUB_EXPECT_INSTALLED to the venv's
site-packages -- that the tests really ran against the installed wheel and
that the wheel holds no build sources."""
import importlib.metadata as md
import os
import subprocess
import sys

import pytest

import fastsub
import fastsub._core

INSTALLED = os.environ.get("FASTSUB_EXPECT_INSTALLED")


def test_one_version_everywhere():
    assert md.version("fastsub") == fastsub.__version__
    out = subprocess.run([sys.executable, "-m", "fastsub", "--version"], capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith(f"fastsub {fastsub.__version__} (CPython ")


def test_license_in_the_metadata():
    meta = md.metadata("fastsub")
    assert meta["License-Expression"] == "Apache-2.0"
    assert "LICENSE" in (meta.get_all("License-File") or [])


@pytest.mark.skipif(not INSTALLED, reason="only in the wheel round-trip (tools/wheels.py sets "
                    "FASTSUB_EXPECT_INSTALLED); a development build is imported from src/")
def test_running_against_the_installed_wheel():
    site = os.path.realpath(INSTALLED) + os.sep
    for mod in (fastsub, fastsub._core):
        assert os.path.realpath(mod.__file__).startswith(site), (mod.__file__, site)
    files = [str(f) for f in md.files("fastsub") or []]
    shipped = [f for f in files if f.startswith("fastsub/")]
    assert "fastsub/py.typed" in shipped and "fastsub/_core.pyi" in shipped
    assert not [f for f in shipped if f.endswith((".pyx", ".pxi", ".pxd", ".c", ".h"))], shipped
    assert any(f.endswith(".dist-info/licenses/LICENSE") for f in files), files


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
