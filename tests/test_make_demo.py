"""`make demo` installs only what it runs, compiles once and says what it is
doing at each step (issue 48, item 7), read from what make would run
(`make -n`, nothing run): on a machine with no venv it installs pyproject's
build tools, dependencies and [spark] extra from a requirements list (no
test, bench or wheel tools, no editable install that compiles on its own),
compiles the extension once, and echoes a numbered line before each step."""
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def dry_run(target, venv, makefile="Makefile"):
    r = subprocess.run(["make", "-n", "-B", "-f", makefile, target, f"VENV={venv}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def problems(recipe):
    """-> what is wrong with a demo recipe (make -n's text)."""
    out = []
    if re.search(r"\[(test|bench|wheels)\b|\btest,|,(test|bench|wheels)\b", recipe):
        out.append("installs the test/bench/wheels extras")
    if re.search(r"pip install[^\n]*(-e|--editable)\b", recipe):
        out.append("an editable install (it compiles the extension by itself)")
    compiles = len(re.findall(r"\bbuild_ext\b|setup\.py[^\n]*\bbuild\b", recipe))
    if compiles != 1:
        out.append(f"{compiles} compiles")
    # each step announced, in order (step 1 has two wordings: a venv made,
    # or make test's full one found)
    steps = [int(n) for n in re.findall(r'echo "== make demo: \[(\d)/\d\]', recipe)]
    if sorted(set(steps)) != list(range(1, 5)) or steps != sorted(steps):
        out.append(f"steps announced: {steps}")
    return out


def test_a_first_demo_installs_the_spark_extra_and_compiles_once(tmp_path):
    recipe = dry_run("demo", tmp_path / "venv")
    assert problems(recipe) == [], recipe
    assert "optional-dependencies']['spark']" in recipe and "build-system" in recipe
    assert "-m topicmatch demo" in recipe


def test_the_full_set_up_is_left_as_ci_uses_it(tmp_path):
    """`make build` (and so `make test`) still installs every extra."""
    recipe = dry_run("build", tmp_path / "venv")
    assert "'.[test,bench,spark,wheels]'" in recipe and "build_ext --inplace" in recipe


def test_the_check_finds_the_old_demo(tmp_path):
    """The demo as it was (the full venv, an editable install, then a
    second compile, and no word of either) fails each check."""
    old = tmp_path / "Makefile.old"
    old.write_text(
        "VENV ?= .venv\nPY := $(VENV)/bin/python\nPIP := $(PY) -m pip\n"
        "$(VENV)/.deps:\n\tpython3 -m venv $(VENV)\n"
        "\t$(PIP) install -q -e '.[test,bench,spark,wheels]' --no-build-isolation\n\ttouch $@\n"
        "build: $(VENV)/.deps\n\t$(PY) setup.py -q build_ext --inplace\n"
        "demo: build\n\t$(VENV)/bin/topicmatch demo\n")
    recipe = dry_run("demo", tmp_path / "venv", makefile=str(old))
    assert problems(recipe) == ["installs the test/bench/wheels extras",
                                "an editable install (it compiles the extension by itself)",
                                "steps announced: []"]
