"""The package's house rules (issue 25): its imports flow one way (no
cycle, not even through an import inside a function), the command line's
shared module is a leaf, no Python module passes 700 lines, and the dialect
names are written once, in topicmatch._dialects, with the places that cannot
import them (the compiled core's stub, the reference matcher) agreeing."""
import ast
import os
import re

import topicmatch
from topicmatch import Sublist
from topicmatch import _reference as R
from topicmatch._dialects import DIALECTS

PKG = os.path.dirname(os.path.abspath(topicmatch.__file__))
MAX_LINES = 700
#: The command line's modules that must exist (main.py: the dispatch); every
#: module under topicmatch/cli/ is the command line's (_cli_modules).
CLI_REQUIRED = {"topicmatch.cli", "topicmatch.cli.main", "topicmatch.cli.parser",
                "topicmatch.cli.common", "topicmatch.cli.demo", "topicmatch.cli.fanout",
                "topicmatch.cli.match", "topicmatch.cli.build", "topicmatch.cli.__main__"}


def _modules():
    """{dotted name: path} of every .py module of the package, subpackages
    included (a package's __init__.py is the package's own name)."""
    out = {}
    for root, dirs, files in os.walk(PKG):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = os.path.relpath(root, PKG)
        prefix = "topicmatch" if rel == "." else "topicmatch." + rel.replace(os.sep, ".")
        for name in sorted(files):
            if name.endswith(".py"):
                out[prefix if name == "__init__.py" else f"{prefix}.{name[:-3]}"] = os.path.join(root, name)
    return out


def _imports(path, known):
    """The topicmatch modules `path` imports, at the top or inside a function."""
    got = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from topicmatch.spark import fanout` imports that module
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        got |= {n for n in names if n in known}
    if "topicmatch._core" in got:          # a compiled module: no .py here
        got.discard("topicmatch._core")
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
    CLI = {m for m in graph if m == "topicmatch.cli" or m.startswith("topicmatch.cli.")}
    assert CLI_REQUIRED <= CLI, sorted(CLI_REQUIRED - CLI)
    assert {m for m, deps in graph.items() if "topicmatch.cli" in deps} <= {"topicmatch.__main__"}
    assert not graph["topicmatch.cli.common"] & CLI, "the CLI's shared module must be a leaf"
    # The dispatch imports the parser, the parser the commands, never the other way round.
    assert not any("topicmatch.cli.main" in graph[m] for m in CLI - {"topicmatch.cli", "topicmatch.cli.__main__"})
    assert not any("topicmatch.cli.parser" in graph[m]
                   for m in CLI - {"topicmatch.cli", "topicmatch.cli.main", "topicmatch.cli.__main__"})
    assert not any(graph[m] & CLI for m in graph if m not in CLI | {"topicmatch.__main__"}), \
        "only the command line imports the command line"


def test_no_python_module_over_700_lines():
    long = {m: n for m, p in _modules().items() if (n := sum(1 for _ in open(p, "rb"))) > MAX_LINES}
    assert not long, long


def test_dialect_names_are_written_once():
    spelled = re.compile(r"""["']nats["'],\s*["']mqtt["']""")
    others = [m for m, p in _modules().items() if m not in ("topicmatch._dialects", "topicmatch._reference")
              and spelled.search(open(p, encoding="utf-8").read())]
    assert not others, f"{others} list the dialects: import DIALECTS from topicmatch._dialects"


def test_the_places_that_cannot_import_the_dialects_agree():
    # The compiled core: its names (from the C core's one table) are these,
    # every name works, nothing else does.
    from topicmatch._core import DIALECT_NAMES
    assert DIALECT_NAMES == DIALECTS
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


# -- the C core's layers ------------------------------------------------------------
#: The folders of csrc/, bottom first: each may include and call only its own
#: layer and those below it (docs/design.md, "Layers of the C core").
C_LAYERS = ("base", "rules", "arrow", "index", "match", "batch", "api", "serial")
_C_TOKEN = re.compile(r"[A-Za-z_]\w*|[{}();]")
_C_NOT_CALLS = {"if", "for", "while", "switch", "return", "sizeof", "_Alignof", "defined", "case", "do",
                "else", "_Static_assert", "__attribute__", "offsetof", "_Generic", "static_assert"}


def _c_code(text):
    """text without comments, string and character literals, and
    preprocessor lines (whose line breaks are kept)."""
    text = _strip_c_comments(text)
    text = re.sub(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', '""', text)
    return re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", lambda m: re.sub(r"[^\n]", " ", m.group()), text, flags=re.M)


def c_functions(text):
    """(defined, static, called): the functions a C file defines (those
    defined `static` too, a .c file's own), and the names it calls from
    inside its function bodies."""
    defined, static, called = set(), set(), set()
    depth = paren = 0
    head = []            # the tokens of the declaration at file scope so far
    toks = _C_TOKEN.findall(_c_code(text))
    for i, tok in enumerate(toks):
        prev = toks[i - 1] if i else ""
        if tok == "{":
            if depth == 0 and head and "(" in head:
                name = head[head.index("(") - 1]
                defined.add(name)
                if "static" in head:
                    static.add(name)
            depth += 1
            head = []
        elif tok == "}":
            depth -= 1
        elif tok == ";":
            if depth == 0:
                head = []
        else:
            if tok == "(":
                if depth > 0 and re.match(r"[A-Za-z_]", prev) and prev not in _C_NOT_CALLS:
                    called.add(prev)
                paren += 1
            elif tok == ")":
                paren -= 1
            if depth == 0 and (tok != "(" or "(" not in head):
                head.append(tok)
    return defined, static, called


def _c_module(name):
    """A C file's module: its folder and stem (fs_x.c and fs_x.h are one)."""
    return os.path.splitext(name.replace(os.sep, "/"))[0]


def c_layering(sources):
    """Breaks of the C layering in sources {"layer/file": text}, as lines:
    a file outside the layers, an #include that goes up a layer, a call that
    goes up a layer, and a circle of calls between modules (a .c file with
    its header is one module; a header alone is one too)."""
    found = []
    layer = {}
    for name in sources:
        top = name.replace(os.sep, "/").split("/")[0]
        if top not in C_LAYERS or "/" not in name.replace(os.sep, "/"):
            found.append(f"{name}: not in a layer's folder {C_LAYERS}")
            continue
        layer[name] = C_LAYERS.index(top)
    by_base = {}
    for name in layer:
        by_base.setdefault(os.path.basename(name), []).append(name)
    for base, names in by_base.items():
        if len(names) > 1:
            found.append(f"{base}: in more than one folder {sorted(names)} (includes name files alone)")
    for name in sorted(layer):
        for no, line in enumerate(_strip_c_comments(sources[name]).splitlines(), 1):
            m = re.match(r'\s*#\s*include\s*"([^"]+)"', line)
            if m and m.group(1) in by_base:
                to = by_base[m.group(1)][0]
                if layer[to] > layer[name]:
                    found.append(f"{name}:{no}: includes {to}, a layer up")
    # Calls: a function belongs to the module that defines it (a .c file's
    # static functions are its own).
    info = {name: c_functions(sources[name]) for name in layer}
    owner = {}
    for name, (defined, static, _called) in info.items():
        for f in defined - (static if name.endswith(".c") else set()):
            owner.setdefault(f, _c_module(name))
    edges = {}
    mod_layer = {}
    for name, (defined, _static, called) in sorted(info.items()):
        mod = _c_module(name)
        mod_layer[mod] = layer[name]
        for f in sorted(called - defined):
            to = owner.get(f)
            if to and to != mod:
                edges.setdefault(mod, {}).setdefault(to, f)
    for mod in sorted(edges):
        for to, f in sorted(edges[mod].items()):
            if mod_layer[to] > mod_layer[mod]:
                found.append(f"{mod} calls {to} ({f}), a layer up")
    # Circles: the strongly connected parts of the call graph (Tarjan).
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(mod_layer):
        if v not in index:
            visit(v)
    for comp in sorted(comps):
        how = ", ".join(f"{a} -> {b} ({edges[a][b]})" for a in comp for b in sorted(edges.get(a, {})) if b in comp)
        found.append(f"a circle of calls: {how}")
    return found


def test_c_layers_only_look_down():
    """csrc/'s folders are its layers: a file includes and calls only its own
    layer and those below, and no two modules call each other (not even
    round a longer circle)."""
    sources = _c_sources()
    assert sorted({n.replace(os.sep, "/").split("/")[0] for n in sources}) == sorted(C_LAYERS)
    assert c_layering(sources) == []


def test_the_c_layer_check_can_fail():
    """Fed the real tree with one synthetic break of each kind, the check
    reports each, and only those."""
    sources = _c_sources()
    assert c_layering(sources) == []
    bad = dict(sources)
    # an upward include: the rules layer includes the index's layout
    bad["rules/fs_dialect.c"] = '#include "fs_layout.h"\n' + bad["rules/fs_dialect.c"]
    # a circle: the slab calls the memory account, which calls the slab
    bad["index/fs_slab.c"] += "\nint fs_test_slab_calls(void) { return fs_test_mem_calls(); }\n"
    bad["index/fs_mem.c"] += "\nint fs_test_mem_calls(void) { return fs_test_slab_calls(); }\n"
    # an upward call: base calls the trie
    bad["base/fs_status.h"] += "\nstatic inline void fs_test_up(void *sl) { fs_trie_free(sl); }\n"
    # a stray file, and a header in two folders
    bad["fs_loose.c"] = "int x;\n"
    bad["match/fs_bits.h"] = "\n"
    got = c_layering(bad)
    assert got == [
        "fs_loose.c: not in a layer's folder " + str(C_LAYERS),
        f"fs_bits.h: in more than one folder {sorted(['base/fs_bits.h', 'match/fs_bits.h'])} "
        "(includes name files alone)",
        "rules/fs_dialect.c:1: includes index/fs_layout.h, a layer up",
        "base/fs_status calls index/fs_trie (fs_trie_free), a layer up",
        "a circle of calls: index/fs_mem -> index/fs_slab (fs_test_slab_calls), "
        "index/fs_slab -> index/fs_mem (fs_test_mem_calls)",
    ], got
    # and a stray dialect comparison in the real tree is found too
    bad = dict(sources)
    bad["match/fs_match.c"] += "\nint fs_test_is_mqtt(fs_dialect d) { return d == FS_MQTT; }\n"
    assert [(f, t) for f, _n, t in dialect_comparisons(bad)] == [
        ("match/fs_match.c", "int fs_test_is_mqtt(fs_dialect d) { return d == FS_MQTT; }")]


def test_every_source_file_is_in_the_map():
    """docs/design.md's "The files" names every source file of the package
    and of the C core (by its name, `.[ch]` for a pair, or a `subs_*.py`
    family), so that a new file lands with its line in the map."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the tree beside tests/
    design = open(os.path.join(root, "docs", "design.md"), encoding="utf-8").read()
    the_map = design[design.index("## The files"):]
    sources = []
    for folder, _, files in os.walk(os.path.join(root, "src", "topicmatch")):
        sources += [f for f in files if f.endswith((".py", ".pyx", ".pxi", ".pxd", ".pyi"))]
    for folder, _, files in os.walk(os.path.join(root, "csrc")):
        sources += [f for f in files if f.endswith((".c", ".h"))]

    def named(f):
        stem, ext = os.path.splitext(f)
        pair = f"{stem}.[ch]" if ext in (".c", ".h") else None
        family = re.match(r"([a-z]+_)", f)
        return (f in the_map or (pair and pair in the_map)
                or (family and f"{family.group(1)}*{ext}" in the_map))
    missing = sorted({f for f in sources if not named(f)})
    assert not missing, f"not in docs/design.md's file map: {missing}"


# -- the C core's function lengths --------------------------------------------------
#: The most lines a C function may take, its signature's first line to its
#: closing brace (issue 46): longer, it is split into helpers with one job each.
MAX_C_FUNCTION_LINES = 80
_C_PIECE = re.compile(r"[{};\n]|[^{};\n]+")


def c_function_lengths(text):
    """[(name, line, lines)] of every function a C file defines: the line of
    its signature's start and the lines from there to its closing brace (its
    body matched brace by brace, outside comments, strings and preprocessor
    lines; a definition is a file-scope declaration with a parameter list
    and no `=` before its `{`)."""
    found = []
    depth = 0
    line = 1
    head, head_line = "", None     # the file-scope declaration so far, and its first line
    start = None                   # (name, line) of the function whose body is open
    for m in _C_PIECE.finditer(_c_code(text)):
        piece = m.group()
        if piece == "\n":
            line += 1
            head += " "
        elif piece == "{":
            if depth == 0 and "(" in head and "=" not in head:
                start = (re.findall(r"\w+", head[:head.index("(")])[-1], head_line)
            depth += 1
            head, head_line = "", None
        elif piece == "}":
            depth -= 1
            if depth == 0 and start:
                found.append((start[0], start[1], line - start[1] + 1))
                start = None
        elif piece == ";":
            if depth == 0:
                head, head_line = "", None
        elif depth == 0 and piece.strip():
            if head_line is None:
                head_line = line
            head += piece
    return found


def long_c_functions(sources, limit=MAX_C_FUNCTION_LINES, lengths=None):
    """"file:line: name, N lines" of every function of the sources
    {name: text} longer than limit lines, as `lengths` (C's by default)
    measures them."""
    lengths = lengths or c_function_lengths
    return [f"{name}:{no}: {fn}, {n} lines"
            for name, text in sorted(sources.items())
            for fn, no, n in lengths(text) if n > limit]


def test_no_c_function_over_80_lines():
    sources = _c_sources()
    assert sources, CSRC
    assert sum(len(c_function_lengths(t)) for t in sources.values()) > 100   # the scanner finds them
    assert long_c_functions(sources) == []


def test_the_c_function_length_check_can_fail():
    """Fed the real tree with synthetic functions of 80 and 81 lines, the
    check names the long one, and only it; one-line functions, prototypes,
    initialisers and braces in comments and strings are no functions."""
    body = "    x++;\n"
    fits = "static int fits(int x)\n{\n" + body * 76 + "    return x;\n}\n"               # 80 lines
    long_ = ("FS_ALWAYS_INLINE size_t\ntoo_long(const char *s,\n         int x)\n{\n"   # 81 lines
             "    /* } */ const char *b = \"}\"; char c = '{';\n" + body * 74 + "    return x;\n}\n")
    other = ("typedef struct {\n    int a;\n} pair;\nstatic const int tab[] = {1, 2};\nint proto(int x);\n"
             "static inline int one(int x) { return x; }\n#define BLOCK(x) { \\\n  x; \\\n}\n")
    bad = dict(_c_sources())
    bad["match/fs_x.c"] = other + fits + "\n" + long_
    assert c_function_lengths(bad["match/fs_x.c"]) == [("one", 6, 1), ("fits", 10, 80), ("too_long", 91, 81)]
    assert long_c_functions(bad) == ["match/fs_x.c:91: too_long, 81 lines"]


# -- the Cython layer's function lengths ---------------------------------------
#: The same limit for the Cython layer's functions (issue 46: a thin layer
#: of short translations).
CYTHON_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "topicmatch")
_CY_DEF = re.compile(r"^(\s*)(?:cpdef|cdef|def)\s+(?!class\b|extern\b|enum\b|struct\b|union\b)[^=(]*?(\w+)\s*\(")


_CY_STRING = re.compile(r"""[rRbBuUfF]{0,2}('''|\"\"\"|'|\")""")


def _cy_code(text):
    """text with its comments dropped and its strings' contents blanked,
    newlines kept (so lines keep their numbers): a '#' or a bracket inside
    a string is no comment and no bracket."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        m = _CY_STRING.match(text, i) if c in "'\"rRbBuUfF" else None
        if not m or (c not in "'\"" and i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            out.append(c)
            i += 1
            continue
        quote, j = m.group(1), m.end()
        while j < n and not text.startswith(quote, j):
            if text[j] == "\\":
                j += 1
            elif text[j] == "\n" and len(quote) == 1:
                break
            j += 1
        out.append('""' + "\n" * text.count("\n", i, j))
        i = j + len(quote)
    return "".join(out)


def cython_function_lengths(text):
    """[(name, line, lines)] of every function a .pyx/.pxi file defines
    (def, cdef, cpdef with a parameter list): from its first line to the
    last line of its body, which ends at the next code line indented no
    deeper than the definition (the signature's own continuation lines,
    inside its parentheses, blank lines, comments and the lines of a
    string do not end it)."""
    lines = _cy_code(text).split("\n")
    found = []
    for i, ln in enumerate(lines):
        m = _CY_DEF.match(ln)
        if not m:
            continue
        indent, depth, last, j = len(m.group(1)), 0, i, i
        while j < len(lines):
            code = lines[j]
            if j > i and depth == 0 and code.strip() and len(code) - len(code.lstrip()) <= indent:
                break
            depth += code.count("(") + code.count("[") - code.count(")") - code.count("]")
            if code.strip():
                last = j
            j += 1
        found.append((m.group(2), i + 1, last - i + 1))
    return found


def _cython_sources():
    return {name: open(os.path.join(CYTHON_SRC, name), encoding="utf-8").read()
            for name in sorted(os.listdir(CYTHON_SRC)) if name.endswith((".pyx", ".pxi"))}


def long_cython_functions(sources, limit=MAX_C_FUNCTION_LINES):
    return long_c_functions(sources, limit, cython_function_lengths)


def test_no_cython_function_over_80_lines():
    sources = _cython_sources()
    assert "_core.pyx" in sources and "_batch.pxi" in sources, CYTHON_SRC
    assert sum(len(cython_function_lengths(t)) for t in sources.values()) > 100   # the scanner finds them
    assert long_cython_functions(sources) == []


def test_the_cython_function_length_check_can_fail():
    """Synthetic functions of 80 and 81 lines, a signature over several
    lines, comments at the left margin, '#' and brackets inside strings (one
    over three lines) and a nested def inside: the check names the long
    one only, with its own length."""
    body = "    x += 1\n"
    fits = "cdef int fits(int x) except -1:\n" + body * 78 + "    return x\n"                   # 80 lines
    long_ = ("cdef object too_long(object a,\n                     object b):\n"              # 81 lines
             "    def inner(y):\n        return y\n# a comment at the margin\n\n"
             "    s = f\"{a:#o} (\" + '#[' + \"\"\"\n(\n\"\"\"\n"
             + body * 71 + "    return a\n")
    other = "cdef class C:\n    cdef int a\n    def m(self):\n        return 1\ncdef extern from \"x.h\":\n    int f(int)\n"
    bad = dict(_cython_sources())
    bad["_x.pxi"] = other + fits + "\n" + long_ + "\nX = 1\n"
    assert cython_function_lengths(bad["_x.pxi"]) == [("m", 3, 2), ("fits", 7, 80), ("too_long", 88, 81),
                                                      ("inner", 90, 2)]
    assert long_cython_functions(bad) == ["_x.pxi:88: too_long, 81 lines"]


# -- the Cython layer's C headers ------------------------------------------------
#: The csrc/ headers the extension module may name: api/sublist.h, the whole
#: C API (issue 46: it includes the public faces of the layers below, and
#: declares the image's calls of serial/, the layer above), and the status
#: codes.  No other header of any layer.
CYTHON_HEADERS_ALLOWED = {"sublist.h", "fs_status.h"}
_CY_HEADER = re.compile(r'^\s*cdef\s+extern\s+from\s+"([^"]+)"|^\s*#\s*include\s*"([^"]+)"', re.M)


def cython_includes_beside_the_api(cython_sources, c_sources):
    """"file:line: includes layer/header, not the api" for every csrc/
    header a Cython source {name: text} names -- `cdef extern from "h"` or
    an `#include "h"` in a verbatim C block -- other than
    CYTHON_HEADERS_ALLOWED, whatever its layer.  Headers outside csrc/
    (Python.h, the C library's, the extension's own) are not the core's."""
    path_of = {os.path.basename(n): n.replace(os.sep, "/") for n in c_sources if "/" in n.replace(os.sep, "/")}
    found = []
    for name, text in sorted(cython_sources.items()):
        for m in _CY_HEADER.finditer(text):
            # (by its file name: "serial/fs_image.h" or "../csrc/..." is the same header)
            header = os.path.basename((m.group(1) or m.group(2)).replace("\\", "/"))
            if header in path_of and header not in CYTHON_HEADERS_ALLOWED:
                line = text.count("\n", 0, m.start()) + 1
                found.append(f"{name}:{line}: includes {path_of[header]}, not the api")
    return found


def _cython_sources_with_pxd():
    """The extension's sources: its Cython (.pyx, .pxi, .pxd) and its own C
    headers (_pyrows.h, _pyobjects.h: the C that needs Python.h)."""
    return {name: open(os.path.join(CYTHON_SRC, name), encoding="utf-8").read()
            for name in sorted(os.listdir(CYTHON_SRC)) if name.endswith((".pyx", ".pxi", ".pxd", ".h"))}


def test_cython_includes_only_the_api():
    """The extension module names api/sublist.h and the status header, and
    no other header of csrc/, of a layer below api/ or of serial/ above it
    (issue 46: sublist.h is the whole C API, the Cython layer a translation
    of it)."""
    sources = _cython_sources_with_pxd()
    assert {"_core.pyx", "_core.pxd", "_batch.pxi"} <= set(sources), CYTHON_SRC
    named = {m.group(1) or m.group(2) for t in sources.values() for m in _CY_HEADER.finditer(t)}
    assert {"sublist.h", "fs_status.h"} <= named          # the scanner finds the includes
    assert cython_includes_beside_the_api(sources, _c_sources()) == []


def test_the_cython_include_check_can_fail():
    """Fed the real sources with an extern block of a batch header, one of
    the image's header (serial/, above api/), one of serial/'s by a path, a
    verbatim C block including the thread layer, and harmless ones (the
    status header, sublist.h, Python.h, the extension's own _pyrows.h, a
    header in a comment or a string), the check names the four, and only
    them."""
    sources = _cython_sources_with_pxd()
    bad = dict(sources)
    bad["_x.pxi"] = ('cdef extern from "fs_status.h" nogil:\n    enum: FS_OK\n'
                     'cdef extern from "sublist.h":\n    pass\n'
                     'cdef extern from "fs_image.h":\n    pass\n'
                     'cdef extern from "Python.h":\n    pass\n'
                     'cdef extern from "_pyrows.h":\n    pass\n'
                     'cdef extern from "../csrc/serial/fs_serial.h":\n    pass\n'
                     'cdef extern from "fs_batch.h" nogil:\n    void fs_batch_cancel(void *job)\n'
                     'cdef extern from *:\n    """\n    #include <stdatomic.h>\n'
                     '    #include "fs_sys.h"\n    """\n'
                     '# cdef extern from "fs_pool.h": a comment\n'
                     'x = "cdef extern from \\"fs_pool.h\\""  # not at a line\'s start: no include\n')
    assert cython_includes_beside_the_api(bad, _c_sources()) == [
        "_x.pxi:5: includes serial/fs_image.h, not the api",
        "_x.pxi:11: includes serial/fs_serial.h, not the api",
        "_x.pxi:13: includes batch/fs_batch.h, not the api",
        "_x.pxi:18: includes base/fs_sys.h, not the api",
    ]
