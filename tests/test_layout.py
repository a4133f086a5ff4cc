"""The package's house rules (issue 25): its imports flow one way (no
cycle, not even through an import inside a function), the command line's
shared module is a leaf, no Python module passes 700 lines, and the dialect
names are written once, in fastsub._dialects, with the places that cannot
import them (the compiled core's stub, the reference matcher) agreeing."""
import ast
import os
import re

import fastsub
from fastsub import Sublist
from fastsub import _reference as R
from fastsub._dialects import DIALECTS

PKG = os.path.dirname(os.path.abspath(fastsub.__file__))
MAX_LINES = 700
#: The command line's modules (cli.py: the parser and the dispatch).
CLI = {"fastsub.cli", "fastsub.cli.main", "fastsub.cli.common", "fastsub.cli.demo",
       "fastsub.cli.fanout", "fastsub.cli.match", "fastsub.cli.fanout_io",
       "fastsub.cli.fanout_schema", "fastsub.cli.__main__"}


def _modules():
    """{dotted name: path} of every .py module of the package, subpackages
    included (a package's __init__.py is the package's own name)."""
    out = {}
    for root, dirs, files in os.walk(PKG):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = os.path.relpath(root, PKG)
        prefix = "fastsub" if rel == "." else "fastsub." + rel.replace(os.sep, ".")
        for name in sorted(files):
            if name.endswith(".py"):
                out[prefix if name == "__init__.py" else f"{prefix}.{name[:-3]}"] = os.path.join(root, name)
    return out


def _imports(path, known):
    """The fastsub modules `path` imports, at the top or inside a function."""
    got = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from fastsub.spark import fanout` imports that module
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        got |= {n for n in names if n in known}
    if "fastsub._core" in got:          # a compiled module: no .py here
        got.discard("fastsub._core")
    return got


def _graph():
    mods = _modules()
    return {m: _imports(p, mods) - {m} for m, p in mods.items()}


def test_imports_have_no_cycle():
    graph = _graph()
    state = {}

    def visit(m, path):
        state[m] = "open"
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(n):] + [n]))
            if n not in state:
                visit(n, path + [n])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


def test_command_line_flows_one_way():
    graph = _graph()
    assert CLI <= set(graph), sorted(CLI - set(graph))
    assert {m for m, deps in graph.items() if "fastsub.cli" in deps} <= {"fastsub.__main__"}
    assert not graph["fastsub.cli.common"] & CLI, "the CLI's shared module must be a leaf"
    # The parser imports the commands, never the other way round.
    assert not any("fastsub.cli.main" in graph[m] for m in CLI - {"fastsub.cli", "fastsub.cli.__main__"})
    assert not any(graph[m] & CLI for m in graph if m not in CLI | {"fastsub.__main__"}), \
        "only the command line imports the command line"


def test_no_python_module_over_700_lines():
    long = {m: n for m, p in _modules().items() if (n := sum(1 for _ in open(p, "rb"))) > MAX_LINES}
    assert not long, long


def test_dialect_names_are_written_once():
    spelled = re.compile(r"""["']nats["'],\s*["']mqtt["']""")
    others = [m for m, p in _modules().items() if m not in ("fastsub._dialects", "fastsub._reference")
              and spelled.search(open(p, encoding="utf-8").read())]
    assert not others, f"{others} list the dialects: import DIALECTS from fastsub._dialects"


def test_the_places_that_cannot_import_the_dialects_agree():
    # The compiled core: every name works, nothing else does.
    for d in DIALECTS:
        assert Sublist(d).dialect == d
    try:
        Sublist("stomp")
    except ValueError:
        pass
    else:
        raise AssertionError("Sublist('stomp') was accepted")
    # Its stub's Literal.
    stub = open(os.path.join(PKG, "_core.pyi"), encoding="utf-8").read()
    m = re.search(r"^_Dialect = Literal\[(.*)\]$", stub, re.M)
    assert m and tuple(ast.literal_eval(f"({m.group(1)},)")) == DIALECTS
    # The reference matcher (loaded without the package when the core is not built).
    assert tuple(R._SEP) == tuple(R._ONE) == tuple(R._REST) == DIALECTS


# -- the C core ------------------------------------------------------------------
CSRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "csrc")
# A comparison with a dialect's name: `d == FS_MQTT`, `FS_AMQP != d`, `case FS_NATS:`.
_DIALECT_TEST = re.compile(r"(?:[=!]=\s*FS_(?:NATS|MQTT|AMQP)\b)|(?:\bFS_(?:NATS|MQTT|AMQP)\s*[=!]=)"
                           r"|(?:\bcase\s+FS_(?:NATS|MQTT|AMQP)\b)")


def _strip_c_comments(text):
    return re.sub(r"/\*.*?\*/|//[^\n]*", lambda m: re.sub(r"[^\n]", " ", m.group()), text, flags=re.S)


def dialect_comparisons(sources):
    """[(file, line, text)] of every comparison with a dialect's name in the
    C sources {name: text} outside fs_dialect.[ch], where the rules live."""
    found = []
    for name, text in sorted(sources.items()):
        if os.path.basename(name) in ("fs_dialect.h", "fs_dialect.c"):
            continue
        for no, line in enumerate(_strip_c_comments(text).splitlines(), 1):
            if _DIALECT_TEST.search(line):
                found.append((name, no, line.strip()))
    return found


def _c_sources():
    out = {}
    for root, _dirs, files in os.walk(CSRC):
        for f in files:
            if f.endswith((".c", ".h")):
                p = os.path.join(root, f)
                out[os.path.relpath(p, CSRC)] = open(p, encoding="utf-8").read()
    return out


def test_dialects_differ_only_through_their_rules():
    """Every semantic difference of the dialects is a field of fs_dialect's
    rules table: code reads the fields, it never compares the dialect."""
    assert _c_sources(), CSRC
    assert dialect_comparisons(_c_sources()) == []


def test_the_dialect_check_can_fail():
    stray = {"fs_walk.h": "int f(fs_dialect d) {\n  /* d == FS_MQTT in a comment is fine */\n"
                          "  return d == FS_MQTT;\n}\n",
             "fs_x.c": "switch (d) { case FS_AMQP: return 1; }\nif (FS_NATS != d) {}\n",
             "fs_dialect.h": "return d == FS_AMQP;\n"}
    got = dialect_comparisons(stray)
    assert [(f, n) for f, n, _ in got] == [("fs_walk.h", 3), ("fs_x.c", 1), ("fs_x.c", 2)]
