"""Every ```python block of README.md runs as written, in order, in one
namespace (as a reader pasting them into one session would), and the README
starts where a newcomer starts: what it is, install, a first example within
its first 25 lines, then the command line, Spark, a service, the evidence,
and last the contributors' commands (issue 48, item 6).  docs/guide.md's
blocks, moved out of the README, run in tests/test_docs_guide.py."""
import re
import traceback

import pytest

from readme import README, python_blocks

#: The README's sections, in the order a newcomer needs them.
SECTIONS = ["## Install", "## Five lines", "## The command line", "## Spark",
            "## Inside a service", "## The evidence", "## Documentation", "## For contributors"]


def _text():
    return open(README, encoding="utf-8").read()


def sections_in_order(text, sections=SECTIONS):
    """-> the problems: a section missing, or one out of order."""
    heads = re.findall(r"^## .+$", text, re.M)
    missing = [s for s in sections if s not in heads]
    found = [h for h in heads if h in sections]
    order = [] if missing or found == sections else [f"order {found}, expected {sections}"]
    return [f"missing {s!r}" for s in missing] + order


def test_readme_sections_come_in_a_newcomers_order():
    text = _text()
    assert sections_in_order(text) == []
    assert text.index("pip install topicmatch") < text.index("```python")
    assert "Windows" in text and "Linux" in text and "macOS" in text
    contributors = text[text.index("## For contributors"):]
    for command in ("make demo", "make test", ".ci/run", "make bench-instructions"):
        assert command in contributors, command


def test_the_order_check_can_fail():
    swapped = "\n".join(SECTIONS[:2] + [SECTIONS[3], SECTIONS[2]] + SECTIONS[4:])
    assert sections_in_order(swapped) == [f"order {SECTIONS[:2] + [SECTIONS[3], SECTIONS[2]] + SECTIONS[4:]}, "
                                          f"expected {SECTIONS}"]
    assert sections_in_order("\n".join(SECTIONS[1:])) == ["missing '## Install'"]


def test_the_first_example_comes_within_25_lines_and_is_short():
    blocks = python_blocks()
    first_line, code = blocks[0]
    assert first_line - 1 <= 25, f"the first ```python block opens on line {first_line - 1}"
    assert len(code.strip().splitlines()) <= 5, code
    assert len(_text().splitlines()) <= 250


def test_readme_python_blocks_run_in_order(tmp_path, monkeypatch):
    blocks = python_blocks()
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)               # a block that writes files writes them here
    namespace = {"__name__": "__readme__"}
    for lineno, code in blocks:
        # padded so a traceback points at the README's own line numbers
        compiled = compile("\n" * (lineno - 1) + code, README, "exec")
        try:
            exec(compiled, namespace)
        except Exception:  # noqa: BLE001 - reported with the README line it came from
            pytest.fail(f"README.md block at line {lineno} raised:\n{traceback.format_exc(limit=-1)}")
    assert namespace["sl"].match("orders.eu.created").subs == [17]
