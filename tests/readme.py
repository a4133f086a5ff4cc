"""The ```python blocks of the repository's README.md, for the tests that run
and type-check them."""
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(os.path.dirname(HERE), "README.md")

_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def python_blocks(path=README):
    """-> [(line number of the block's first code line, code)] in order."""
    text = open(path, encoding="utf-8").read()
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in _FENCE.finditer(text)]
