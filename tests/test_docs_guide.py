"""docs/guide.md, the README's Quickstart as it grew: every ```python block
runs as written, in order, in one namespace, and the blocks together pass
`mypy --strict` against the type stubs (as the README's do in
tests/test_typing.py)."""
import os
import subprocess
import sys
import traceback

import pytest

from readme import python_blocks

GUIDE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "guide.md")
CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mypy.ini")


def test_guide_python_blocks_run_in_order(tmp_path, monkeypatch, capsys):
    pytest.importorskip("pyarrow", reason="the guide's examples use an Arrow column; "
                        "pyarrow has no wheels for some platforms (musllinux)")
    blocks = python_blocks(GUIDE)
    assert len(blocks) >= 8
    monkeypatch.chdir(tmp_path)               # the image example writes subs.fsb here
    namespace = {"__name__": "__guide__"}
    for lineno, code in blocks:
        # padded so a traceback points at the guide's own line numbers
        compiled = compile("\n" * (lineno - 1) + code, GUIDE, "exec")
        try:
            exec(compiled, namespace)
        except Exception:  # noqa: BLE001 - reported with the guide's line it came from
            pytest.fail(f"docs/guide.md block at line {lineno} raised:\n{traceback.format_exc(limit=-1)}")
    out = capsys.readouterr().out
    assert "empty token 7" in out                     # the Errors block's printed reason
    assert (tmp_path / "subs.fsb").exists()


@pytest.mark.skipif(
    any(rt in os.environ.get("LD_PRELOAD", "") for rt in ("libasan", "libtsan", "libclang_rt.")),
    reason="typing is checked by the plain run; this is a sanitizer run")
def test_guide_examples_pass_mypy_strict(tmp_path):
    pytest.importorskip("mypy", reason="mypy is in the test extras: pip install 'topicmatch[test]'")
    blocks = python_blocks(GUIDE)
    src = tmp_path / "guide_examples.py"
    src.write_text("\n\n".join(code for _, code in blocks))
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--config-file", CONFIG,
                        "--no-incremental", str(src)], cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
