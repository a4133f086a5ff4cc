"""The typed surface: the stubs agree with the compiled module (mypy's
stubtest), the README's examples pass `mypy --strict`, and the stats()
TypedDict names exactly the keys stats() returns."""
import ast
import importlib.util
import os
import subprocess
import sys

import pytest

import topicmatch
from topicmatch import Sublist

from readme import python_blocks

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = os.path.join(HERE, "mypy.ini")
ALLOWLIST = os.path.join(HERE, "stubtest_allowlist.txt")

pytest.importorskip("mypy", reason="mypy is in the test extras: pip install 'topicmatch[test]'")
# The sanitizer runs (make test-sanitize / test-tsan) repeat the suite for
# memory and races; mypy under a preloaded sanitizer runtime only adds minutes.
pytestmark = pytest.mark.skipif(
    any(rt in os.environ.get("LD_PRELOAD", "") for rt in ("libasan", "libtsan", "libclang_rt.")),
    reason="typing is checked by the plain run; this is a sanitizer run")


def _mypy(args, cwd):
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_stubtest(tmp_path):
    allow = [open(ALLOWLIST).read()]
    if importlib.util.find_spec("pyspark") is None:
        # topicmatch.spark cannot be imported here: stubtest reports that (and
        # nothing else about the module), and the spark.py entry goes unused.
        # The same for its modules (the package's __init__ imports PySpark).
        allow = [a.replace("topicmatch.spark.e\n", "topicmatch.spark\n") for a in allow]
        allow.append("topicmatch\\.spark\\.\\w+\n")
    if importlib.util.find_spec("amqtt") is None:
        # topicmatch.amqtt needs the optional amqtt (topicmatch[amqtt], Python >= 3.10):
        # without it stubtest reports only that the module cannot be imported.
        allow.append("topicmatch.amqtt\n")
        allow.append("topicmatch._amqtt_wire\n")
    path = tmp_path / "allowlist.txt"
    path.write_text("".join(allow))
    # From an empty directory, so the module checked is the importable topicmatch
    # (the installed wheel, or the in-place build) and nothing else.
    r = _mypy(["mypy.stubtest", "topicmatch", "--mypy-config-file", CONFIG, "--allowlist", str(path)],
              cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_readme_examples_pass_mypy_strict(tmp_path):
    blocks = python_blocks()
    assert blocks, "README.md has no python blocks"
    src = tmp_path / "readme_examples.py"
    src.write_text("\n\n".join(code for _, code in blocks))
    r = _mypy(["mypy", "--strict", "--config-file", CONFIG, "--no-incremental", str(src)], cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_strict_catches_a_wrong_call(tmp_path):
    """The check above can fail: a misuse of the API is an error."""
    src = tmp_path / "wrong.py"
    src.write_text("from topicmatch import Sublist\n"
                   "sl = Sublist('nats')\n"
                   "sl.insert('a.b', 'not an id')\n"
                   "n: str = sl.match_many(['a.b']).offsets\n")
    r = _mypy(["mypy", "--strict", "--config-file", CONFIG, "--no-incremental", str(src)], cwd=tmp_path)
    assert r.returncode == 1
    assert 'Argument 2 to "insert" of "Sublist" has incompatible type "str"; expected "int"' in r.stdout
    assert "wrong.py:4: error: Incompatible types in assignment" in r.stdout


def _stub_stats_keys():
    stub = os.path.join(os.path.dirname(topicmatch.__file__), "_core.pyi")
    tree = ast.parse(open(stub).read())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "_Stats":
            return {n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
    raise AssertionError(f"no _Stats in {stub}")


def test_stats_typeddict_names_every_key():
    assert set(Sublist("nats").stats()) == _stub_stats_keys()


def test_public_names_are_in_the_stubs():
    stub = os.path.join(os.path.dirname(topicmatch.__file__), "__init__.pyi")
    tree = ast.parse(open(stub).read())
    stubbed = {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    stubbed |= {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign)}
    assert set(topicmatch.__all__) <= stubbed
