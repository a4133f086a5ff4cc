"""Every ```python block of README.md runs as written, in order, in one
namespace (as a reader pasting them into one session would)."""
import traceback

import pytest

from readme import README, python_blocks


def test_readme_has_install_then_contributing_then_quickstart():
    text = open(README, encoding="utf-8").read()
    order = [text.find(h) for h in ("pip install topicmatch", "pip install 'topicmatch[spark]'",
                                    "make demo", "make test", "## Quickstart")]
    assert -1 not in order and order == sorted(order), order
    assert "Windows" in text and "Linux" in text and "macOS" in text


def test_readme_python_blocks_run_in_order(tmp_path, monkeypatch, capsys):
    pytest.importorskip("pyarrow", reason="the README's examples use an Arrow column; "
                        "pyarrow has no wheels for some platforms (musllinux)")
    blocks = python_blocks()
    assert len(blocks) >= 3
    monkeypatch.chdir(tmp_path)               # a block that writes files writes them here
    namespace = {"__name__": "__readme__"}
    for lineno, code in blocks:
        # padded so a traceback points at the README's own line numbers
        compiled = compile("\n" * (lineno - 1) + code, README, "exec")
        try:
            exec(compiled, namespace)
        except Exception:  # noqa: BLE001 - reported with the README line it came from
            pytest.fail(f"README.md block at line {lineno} raised:\n{traceback.format_exc(limit=-1)}")
    out = capsys.readouterr().out
    assert "empty token 7" in out
