"""One error hierarchy (issue 48, item 4): every image refusal is an
ImageError -- a TopicmatchError and a ValueError -- and "not an image at
all" (NotAnImageError) is told apart from "an image, damaged"
(CorruptImageError).  Sublist.open's messages name the user's path.
Every error the package raises is a TopicmatchError and the built-in a
caller catches (the sources hold no bare built-in raise; a sample of bad
calls across the API)."""
import ast
import builtins
import errno
import os
import pickle
import re

import pytest

import topicmatch
from topicmatch import CorruptImageError, ImageChangedError, ImageError, NotAnImageError, TopicmatchError

MAGIC = b"\x89FSB\r\n\x1a\n"
CSV = b"id,filter\n1,a.b\n"           # 16 bytes: a CSV given where an image belongs
assert len(CSV) == 16

VERIFY = [True, "checksum", False]


def image():
    sl = topicmatch.Sublist("nats")
    sl.insert("a.b", 1)
    sl.insert("a.*", 2)
    sl.insert("a.>", 3, queue="q")
    return sl.to_bytes()


def damaged_cases():
    good = image()
    return {
        "cut": good[:-9],
        "flipped": good[:60] + bytes([good[60] ^ 0xFF]) + good[61:],
        "reserved": good[:12] + b"\x01" + good[13:],
        "short": good[:20],
        "magic only": MAGIC[:5],
        "version 2 cut": topicmatch.Sublist.from_bytes(good).to_bytes(version=2)[:-1],
    }


def test_hierarchy():
    for cls in (ImageError, NotAnImageError, CorruptImageError):
        assert issubclass(cls, TopicmatchError)
        assert issubclass(cls, ValueError)
        assert issubclass(cls, ImageError)
    assert not issubclass(NotAnImageError, CorruptImageError)
    assert not issubclass(CorruptImageError, NotAnImageError)
    # unchanged: a file changed under its mapping is an OSError
    assert issubclass(ImageChangedError, TopicmatchError) and issubclass(ImageChangedError, OSError)
    assert not issubclass(ImageChangedError, ImageError)
    for name in ("ImageError", "NotAnImageError", "CorruptImageError"):
        assert name in topicmatch.__all__
        assert getattr(topicmatch, name).__module__ == "topicmatch._core"


@pytest.mark.parametrize("verify", VERIFY)
@pytest.mark.parametrize("data", [CSV, b"x", b"PK\x03\x04" + b"\x00" * 60, b"\x88" + image()[1:], b""],
                         ids=["csv", "one byte", "zip", "first byte", "empty"])
def test_from_bytes_not_an_image(data, verify):
    for cls in (NotAnImageError, ImageError, TopicmatchError, ValueError):
        with pytest.raises(cls) as e:
            topicmatch.Sublist.from_bytes(data, verify=verify)
        assert type(e.value) is NotAnImageError
        msg = str(e.value)
        assert msg.startswith("not a topicmatch image: "), msg
        assert "corrupt" not in msg and "truncated header" not in msg, msg


def test_csv_message_says_what_it_starts_with():
    with pytest.raises(NotAnImageError) as e:
        topicmatch.Sublist.from_bytes(CSV)
    assert str(e.value) == (f"not a topicmatch image: bad magic: it starts with {CSV[:8]!r}, not {MAGIC!r}, "
                            f"the magic bytes every topicmatch image and serialized index starts with")


@pytest.mark.parametrize("verify", VERIFY)
@pytest.mark.parametrize("name", sorted(damaged_cases()))
def test_from_bytes_damaged(name, verify):
    data = damaged_cases()[name]
    with pytest.raises(CorruptImageError) as e:
        topicmatch.Sublist.from_bytes(data, verify=verify)
    assert isinstance(e.value, ValueError) and isinstance(e.value, TopicmatchError)
    assert isinstance(e.value, ImageError) and not isinstance(e.value, NotAnImageError)
    assert str(e.value).startswith("corrupt topicmatch index: "), str(e.value)


@pytest.mark.parametrize("verify", VERIFY)
@pytest.mark.parametrize("as_path", [str, os.fsencode, lambda p: p], ids=["str", "bytes", "pathlib"])
def test_open_csv_is_not_an_image_and_names_the_path(tmp_path, verify, as_path):
    path = tmp_path / "subs.csv"
    path.write_bytes(CSV)
    with pytest.raises(NotAnImageError) as e:
        topicmatch.Sublist.open(as_path(path), verify=verify)
    assert isinstance(e.value, ValueError) and isinstance(e.value, TopicmatchError)
    msg = str(e.value)
    assert msg.startswith(f"{os.fspath(as_path(path))!r}: not a topicmatch image: bad magic: "), msg
    assert "corrupt" not in msg and "truncated header" not in msg


@pytest.mark.parametrize("verify", VERIFY)
def test_open_empty_file_is_not_an_image(tmp_path, verify):
    path = tmp_path / "empty.img"
    path.write_bytes(b"")
    with pytest.raises(NotAnImageError, match=f"^{repr(str(path))}: empty file, not a topicmatch image$"):
        topicmatch.Sublist.open(path, verify=verify)


def test_open_directory_is_not_an_image(tmp_path):
    with pytest.raises(NotAnImageError, match=f"^{repr(str(tmp_path))}: a directory, not a topicmatch"):
        topicmatch.Sublist.open(tmp_path)


@pytest.mark.parametrize("verify", VERIFY)
@pytest.mark.parametrize("name", sorted(damaged_cases()))
def test_open_damaged_names_the_path(tmp_path, name, verify):
    path = tmp_path / "index.img"
    path.write_bytes(damaged_cases()[name])
    with pytest.raises(CorruptImageError) as e:
        topicmatch.Sublist.open(str(path), verify=verify)
    assert isinstance(e.value, ValueError) and isinstance(e.value, TopicmatchError)
    assert str(e.value).startswith(f"{str(path)!r}: corrupt topicmatch index: "), str(e.value)


def test_damage_found_after_open_is_corrupt_image_error(tmp_path):
    """verify=False opens an image whose damage only a call reaches: that
    call raises CorruptImageError (still a ValueError)."""
    sl = topicmatch.Sublist("nats")
    for i in range(64):
        sl.insert(f"a.b{i}.c", i)
    good = bytearray(sl.to_bytes())
    import struct
    # find a damage verify=False lets through at open but a match reaches
    for at in range(48, len(good) - 8, 8):
        bad = bytearray(good)
        bad[at:at + 8] = struct.pack("<Q", 1 << 62)
        try:
            idx = topicmatch.Sublist.from_bytes(bytes(bad), verify=False)
        except CorruptImageError:
            continue
        try:
            for i in range(64):
                idx.match(f"a.b{i}.c")
        except CorruptImageError as e:
            assert isinstance(e, ValueError)
            assert "is damaged" in str(e)
            return
    pytest.skip("no damage found that opens with verify=False and fails on a call")


def test_existing_except_valueerror_still_catches(tmp_path):
    path = tmp_path / "x.img"
    path.write_bytes(CSV)
    for call in (lambda: topicmatch.Sublist.open(path), lambda: topicmatch.Sublist.from_bytes(CSV),
                 lambda: topicmatch.Sublist.from_bytes(image()[:-1])):
        try:
            call()
        except ValueError:
            pass
        else:
            pytest.fail("no ValueError")


# -- every error under TopicmatchError ------------------------------------------------------

# The sources, not the installed package: a wheel ships no .pyx or .pxi
# (the round trip runs these tests from the sdist, which has src/).
PKG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src", "topicmatch")
#: Built-ins the package may still raise as they are: out of memory and Ctrl-C stay what
#: Python makes them, and the protocol ones are not errors to report.
ALLOWED = {"MemoryError", "KeyboardInterrupt", "NotImplementedError", "StopIteration", "SystemExit"}
BUILTIN_EXCEPTIONS = {n for n, v in vars(builtins).items()
                      if isinstance(v, type) and issubclass(v, BaseException)}
#: Cython-only lines (cdef, cimport, typed arguments...) are not Python: each line that
#: starts a raise is read with the lines of its statement, on its own.
RAISE = re.compile(r"^(\s*)raise\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(", re.M)


def bare_builtin_raises(text):
    """[(line, name)] of every `raise <built-in exception>(` in source text (Python or
    Cython) other than ALLOWED.  A .py source is parsed; Cython's is searched by line."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        tree = None
    if tree is not None:
        out = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and isinstance(node.exc, (ast.Call, ast.Name)):
                f = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(f, ast.Name) and f.id in BUILTIN_EXCEPTIONS and f.id not in ALLOWED:
                    out.append((node.lineno, f.id))
        return sorted(out)
    return [(text.count("\n", 0, m.start()) + 1, m.group(2)) for m in RAISE.finditer(text)
            if m.group(2) in BUILTIN_EXCEPTIONS and m.group(2) not in ALLOWED]


def package_sources():
    """The package's .py/.pyx/.pxi sources, but the private reference model
    (_reference.py, test-only) and Cython's generated C."""
    for root, dirs, files in os.walk(PKG):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".py", ".pyx", ".pxi")) and name != "_reference.py":
                yield os.path.join(root, name)


def test_the_check_finds_a_bare_builtin_raise():
    sample = ("def f(x):\n"
              "    if x:\n"
              "        raise ValueError(f'bad {x}')\n"
              "    raise MemoryError()\n")
    assert bare_builtin_raises(sample) == [(3, "ValueError")]
    cython = ("cdef int f(object x) except -1:\n"
              "    if x is None:\n"
              "        raise TypeError('x')\n"
              "    raise topicmatch.TopicmatchValueError('y')\n"
              "    raise OSError(2, 'z')\n")
    assert bare_builtin_raises(cython) == [(3, "TypeError"), (5, "OSError")]
    assert bare_builtin_raises("raise KeyboardInterrupt\nraise TopicmatchValueError('x')\n") == []
    assert bare_builtin_raises("raise PermissionError('x')\n") == [(1, "PermissionError")]


def test_no_bare_builtin_raise_in_the_package():
    found = []
    srcs = list(package_sources())
    assert any(p.endswith("_core.pyx") for p in srcs) and any(p.endswith("_batch.pxi") for p in srcs)
    for path in srcs:
        with open(path, encoding="utf-8") as f:
            for line, name in bare_builtin_raises(f.read()):
                found.append(f"{os.path.relpath(path, PKG)}:{line}: raise {name}(")
    assert not found, "raise the package's error (TopicmatchValueError...), not a bare built-in:\n" + \
        "\n".join(found)


GENERAL = {"TopicmatchValueError": ValueError, "TopicmatchTypeError": TypeError,
           "TopicmatchOSError": OSError, "TopicmatchOverflowError": OverflowError,
           "TopicmatchKeyError": KeyError, "TopicmatchIndexError": IndexError,
           "TopicmatchRuntimeError": RuntimeError, "TopicmatchBufferError": BufferError,
           "TopicmatchImportError": ImportError}


def test_the_general_classes():
    for name, builtin in GENERAL.items():
        cls = getattr(topicmatch, name)
        assert name in topicmatch.__all__ and cls.__module__ == "topicmatch._core"
        assert issubclass(cls, TopicmatchError) and issubclass(cls, builtin)
    for cls in (ImageError, topicmatch.ClosedError, topicmatch.InvalidSubjectError):
        assert issubclass(cls, topicmatch.TopicmatchValueError)
    assert issubclass(ImageChangedError, topicmatch.TopicmatchOSError)
    assert not issubclass(TopicmatchError, (ValueError, TypeError, OSError))
    doc = TopicmatchError.__doc__
    assert "MemoryError" in doc and "KeyboardInterrupt" in doc


def test_os_errors_keep_their_errno_subclass(tmp_path):
    missing = tmp_path / "no" / "such" / "x.img"
    with pytest.raises(FileNotFoundError) as e:
        topicmatch.Sublist("nats").save(missing)
    assert isinstance(e.value, topicmatch.TopicmatchOSError) and e.value.errno == errno.ENOENT
    assert e.value.filename == str(missing)
    assert str(e.value) == f"[Errno {errno.ENOENT}] cannot save the image: {os.strerror(errno.ENOENT)}: " \
                           f"{str(missing)!r}"
    again = pickle.loads(pickle.dumps(e.value))
    assert type(again) is type(e.value) and str(again) == str(e.value)


def _raised(call):
    try:
        call()
    except BaseException as e:  # noqa: BLE001 - returned to the test
        return e
    pytest.fail("no error")


def _bad_calls(tmp_path):
    """(name, call, the built-in the error must also be, message it starts with)."""
    np = pytest.importorskip("numpy")
    sl = topicmatch.Sublist("nats")
    sl.insert("a.b", 1)
    garbage = tmp_path / "garbage.img"
    garbage.write_bytes(CSV)
    closed = topicmatch.Sublist("nats")
    closed.close()
    return [
        ("dialect", lambda: topicmatch.Sublist("stomp"), ValueError, "dialect must be"),
        ("dialect type", lambda: topicmatch.Sublist(3), TypeError, "dialect must be str"),
        ("filter type", lambda: sl.insert(b"a.b", 1), TypeError, "filter must be str, not bytes"),
        ("bad filter", lambda: sl.insert("a..b", 1), ValueError, "invalid filter"),
        ("id type", lambda: sl.insert("a.b", "1"), TypeError, "sub_id must be int, not str"),
        ("id bool", lambda: sl.insert("a.b", True), TypeError, "sub_id must be int, not bool"),
        ("id range", lambda: sl.insert("a.b", 2 ** 63), OverflowError, "sub_id 9223372036854775808"),
        ("remove missing", lambda: sl.remove("x.y", 9), KeyError, "('x.y', 9, None)"),
        ("cache_size", lambda: topicmatch.Sublist("nats", cache_size=-1), ValueError, "cache_size must be"),
        ("lengths", lambda: sl.insert_many(["a", "b"], [1]), ValueError, "filters and sub_ids differ"),
        ("column type", lambda: sl.match_many(42), TypeError, "subjects must be"),
        ("column dtype", lambda: sl.match_many(np.arange(3)), TypeError, "subjects: numpy arrays"),
        ("threads", lambda: sl.match_many(["a.b"], threads=0), ValueError, "threads must be >= 1"),
        ("queues", lambda: sl.match_many(["a.b"], queues="most"), ValueError, "queues must be"),
        ("row", lambda: sl.match_many(["a.b"])[5], IndexError, "row 5 out of range"),
        ("version", lambda: sl.to_bytes(version=7), ValueError, "version must be 2, 3 or 4"),
        ("verify", lambda: topicmatch.Sublist.from_bytes(image(), verify="all"), ValueError, "verify must be"),
        ("from_bytes type", lambda: topicmatch.Sublist.from_bytes("text"), TypeError, "data must be"),
        ("not an image", lambda: topicmatch.Sublist.open(garbage), ValueError, repr(str(garbage))),
        ("a directory", lambda: topicmatch.Sublist.open(tmp_path), ValueError, repr(str(tmp_path))),
        ("save mode", lambda: sl.save(tmp_path / "m.img", mode=0o1777), ValueError, "mode must be"),
        ("save mode type", lambda: sl.save(tmp_path / "m.img", mode="644"), TypeError, "mode must be"),
        ("save missing dir", lambda: sl.save(tmp_path / "no" / "x.img"), FileNotFoundError, "[Errno"),
        ("closed", lambda: closed.match("a.b"), ValueError, ""),
        ("subject", lambda: sl.match("a..b"), ValueError, "invalid subject"),
    ]


def test_bad_calls_raise_the_hierarchy(tmp_path):
    for name, call, builtin, starts in _bad_calls(tmp_path):
        e = _raised(call)
        assert isinstance(e, TopicmatchError), f"{name}: {type(e).__name__}: {e}"
        assert isinstance(e, builtin), f"{name}: {type(e).__name__} is not a {builtin.__name__}"
        assert str(e).startswith(starts) or starts in str(e), f"{name}: {e}"


def test_open_of_a_missing_path_is_the_os_error(tmp_path):
    # open()'s own error on the user's path passes through: it names the path already
    missing = tmp_path / "missing.img"
    with pytest.raises(FileNotFoundError, match="missing.img"):
        topicmatch.Sublist.open(missing)


def test_command_line_errors():
    from topicmatch.cli.common import CLIError, check_readable
    from topicmatch.cli.fanout_schema import parse_ddl
    assert issubclass(CLIError, TopicmatchError)
    e = _raised(lambda: check_readable("/no/such/subs.csv", "subscriptions"))
    assert type(e) is CLIError and str(e) == "subscriptions /no/such/subs.csv: no such file or directory"
    for ddl, msg in (("", "empty schema"), ("a INT, a INT", "column 'a' appears twice")):
        e = _raised(lambda: parse_ddl(ddl))
        assert isinstance(e, topicmatch.TopicmatchValueError) and str(e) == msg, e
    from topicmatch._dialects import check_dialect
    e = _raised(lambda: check_dialect("stomp"))
    assert isinstance(e, topicmatch.TopicmatchValueError) and str(e).startswith("unknown dialect 'stomp'")


def test_spark_argument_checks():
    pytest.importorskip("pyspark")
    from topicmatch import spark
    from topicmatch.spark import ShardPlan
    for kw, builtin, msg in (({"shards": 0, "depth": 1}, ValueError, "shards must be"),
                             ({"shards": 4, "depth": 99}, ValueError, "depth must be")):
        e = _raised(lambda: ShardPlan(**kw))
        assert isinstance(e, topicmatch.TopicmatchValueError) and isinstance(e, builtin), e
        assert str(e).startswith(msg), e
    e = _raised(lambda: spark.fanout([{"subject": "a"}], [{"sub_id": 1, "filter": "a"}]))
    assert isinstance(e, topicmatch.TopicmatchTypeError), f"{type(e).__name__}: {e}"
    assert "must be a pyspark.sql.DataFrame, not list" in str(e), e
    e = _raised(lambda: spark.limits.limit("NOPE"))
    assert isinstance(e, topicmatch.TopicmatchKeyError), e
    assert issubclass(spark.FanoutInputError, topicmatch.TopicmatchValueError)
    assert issubclass(spark.ExecutorEnvironmentError, topicmatch.TopicmatchRuntimeError)
    assert issubclass(spark.IndexTooLargeError, topicmatch.TopicmatchRuntimeError)
