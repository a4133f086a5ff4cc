"""The code blocks of docs/spark.md marked `<!-- example: NAME -->`, run as written."""
import os
import re

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "spark.md")


def example(name):
    with open(DOC) as f:
        text = f.read()
    m = re.search(r"<!-- example: " + re.escape(name) + r" -->\s*```python\n(.*?)```", text, re.S)
    if m is None:
        raise LookupError(f"docs/spark.md has no example {name!r}")
    return m.group(1)


def run(names, namespace):
    """exec the examples, in order, in one namespace; -> the namespace."""
    for name in names:
        exec(compile(example(name), f"docs/spark.md:{name}", "exec"), namespace)
    return namespace
