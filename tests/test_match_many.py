"""Sublist.match_many against a loop of Sublist.match.

Every input type (list, tuple, numpy 'U' and object arrays, pyarrow string /
large_string arrays, sliced arrays, chunked arrays with empty chunks), nulls
and invalid rows; the three queue modes; keys; the Arrow view of the result;
argument errors; and batches big enough for the native-thread path."""
import gc
import os
import random
import subprocess
import sys
import sysconfig
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import topicmatch
from topicmatch import _reference as R
from examples import examples
from strategies import (ALL_DIALECTS, DIALECTS, all_ids, is_one_per_group, rows, subjects, subscriptions,
                        tiny_thread_blocks, valid_subject)

pa = pytest.importorskip("pyarrow", reason="these tests feed Arrow columns; pyarrow has no wheels for some platforms (musllinux)")

ROWS_PER_CHUNK = 16384          # fs_column.c (FS_COLUMN_CHUNK_ROWS): the threaded path needs >= 2 chunks
PROPS = settings(max_examples=examples(15), deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# --- building inputs ----------------------------------------------------------

def _arrow_row(x):
    """What a pyarrow string array can hold for a batch row: None for
    non-str rows and for strings that UTF-8 cannot encode."""
    if not isinstance(x, str):
        return None
    try:
        x.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return x


def _chunks(vals, cuts, typ):
    """pa.ChunkedArray of vals split at cuts (which may repeat: empty chunks)."""
    bounds = [0] + sorted(cuts) + [len(vals)]
    return pa.chunked_array([pa.array(vals[a:b], typ) for a, b in zip(bounds, bounds[1:])], typ)


PAD = ["a", None, "b", "a", None, "b", "a", "b", None, "a", "b"]


def make_input(kind, batch, rnd):
    """(column for match_many, the rows as the engine must see them)."""
    if kind == "list":
        return list(batch), list(batch)
    if kind == "tuple":
        return tuple(batch), list(batch)
    if kind == "numpy_U":
        arr = np.array([x if isinstance(x, str) else "" for x in batch] or [""], dtype=str)[:len(batch)]
        return arr, arr.tolist()
    if kind == "numpy_object":
        arr = np.empty(len(batch), dtype=object)
        for i, x in enumerate(batch):
            arr[i] = x
        return arr, list(batch)
    vals = [_arrow_row(x) for x in batch]
    typ = pa.large_string() if kind.startswith("large") else pa.string()
    if kind in ("string", "large_string"):
        return pa.array(vals, typ), vals
    if kind in ("string_sliced", "large_string_sliced"):
        # a validity bitmap and an array offset that is not a multiple of 8
        start = rnd.randint(1, 9)
        padded = PAD[:start] + vals + PAD[:rnd.randint(0, 5)]
        return pa.array(padded, typ).slice(start, len(vals)), vals
    if kind in ("chunked", "large_chunked"):
        cuts = [rnd.randint(0, len(vals)) for _ in range(rnd.randint(0, 4))] + [0, len(vals)]
        return _chunks(vals, cuts, typ), vals
    if kind == "string_view":
        return pa.array(vals, pa.string_view()), vals
    if kind == "dictionary":
        # matched once per distinct value, spread by the indices (keyed
        # "pick": a pointer per row into the dictionary)
        return pa.array(vals, pa.string()).dictionary_encode(), vals
    if kind == "chunked_sliced":
        # chunks that are themselves slices (the ChunkedArray slice keeps offsets)
        start = rnd.randint(1, 9)
        padded = PAD[:start] + vals + PAD[:3]
        cuts = [rnd.randint(0, len(padded)) for _ in range(3)]
        return _chunks(padded, cuts, typ).slice(start, len(vals)), vals
    raise AssertionError(kind)


KINDS = ["list", "tuple", "numpy_U", "numpy_object", "string", "large_string",
         "string_sliced", "large_string_sliced", "chunked", "large_chunked", "chunked_sliced",
         "string_view", "dictionary"]
ARROW_KINDS = [k for k in KINDS if "string" in k or "chunked" in k]


def arrow_keys(keys, kind):
    """keys in the same family as the subjects column."""
    if kind in ARROW_KINDS:
        return pa.array(keys, pa.large_string() if kind.startswith("large") else pa.string())
    if kind.startswith("numpy"):
        return np.array(keys, dtype=object)
    return keys


# --- checking results ---------------------------------------------------------

def check_shape(b, n):
    assert len(b) == n
    assert b.offsets.dtype == np.int64 and b.offsets.shape == (n + 1,)
    assert b.sub_ids.dtype == np.int64 and b.sub_ids.ndim == 1
    assert b.invalid.dtype == np.bool_ and b.invalid.shape == (n,)
    assert b.offsets[0] == 0 and b.offsets[-1] == len(b.sub_ids)
    assert (np.diff(b.offsets) >= 0).all()
    assert (b.counts() == np.diff(b.offsets)).all()
    assert (b.counts()[b.invalid] == 0).all()          # invalid rows get no ids
    for i in range(n):
        assert (b[i] == b.sub_ids[b.offsets[i]:b.offsets[i + 1]]).all()
    if n:
        assert (b[-1] == b[n - 1]).all()
    with pytest.raises(IndexError):
        b[n]
    with pytest.raises(IndexError):
        b[-n - 1]
    check_arrow(b)


def check_arrow(b):
    la = b.to_arrow()
    la.validate(full=True)
    assert la.type == pa.list_(pa.int64())
    assert la.offsets.type == pa.int32()
    assert len(la) == len(b)
    assert la.null_count == int(b.invalid.sum())
    assert la.to_pylist() == [None if b.invalid[i] else b[i].tolist() for i in range(len(b))]
    if len(b.sub_ids):
        # zero-copy: the list values are the numpy ids' own buffer
        assert la.values.buffers()[1].address == b.sub_ids.ctypes.data
        assert la.flatten().to_numpy().ctypes.data == b.sub_ids.ctypes.data


def expected_all(sl, s):
    return all_ids(sl.match(s)) if valid_subject(s, sl.dialect) else None


def check_rows(sl, b, eff, queues, keys=None):
    """Row by row against match(): invalid flags, and ids per queue mode;
    "pick" rows exactly as the reference's rendezvous rule picks from the
    match's groups (key: the row's key, or its subject when None)."""
    for i, s in enumerate(eff):
        ok = valid_subject(s, sl.dialect)
        assert b.invalid[i] == (not ok), (i, s)
        if not ok:
            continue
        m = sl.match(s)
        row = b[i].tolist()
        if queues == "all":
            assert Counter(row) == all_ids(m), (i, s)
        elif queues == "none":
            assert Counter(row) == Counter(m.subs), (i, s)
        else:
            assert is_one_per_group(row, m), (i, s, row, m)
            key = s if keys is None or keys[i] is None else keys[i]
            assert sorted(row) == R.picked_row(m, key, sl.dialect), (i, s, key, row, m)


def build(dialect, subs, cache_size=0):
    sl = topicmatch.Sublist(dialect, cache_size=cache_size)
    sl.insert_many([s[0] for s in subs], [s[1] for s in subs], [s[2] for s in subs])
    return sl


def same_rows(b1, b2):
    """Equal as a multiset per row (the order inside a row is not specified)."""
    assert (b1.invalid == b2.invalid).all()
    assert (b1.offsets == b2.offsets).all()
    for i in range(len(b1)):
        assert sorted(b1[i].tolist()) == sorted(b2[i].tolist()), i


def same(b1, b2):
    assert (b1.offsets == b2.offsets).all()
    assert (b1.sub_ids == b2.sub_ids).all()
    assert (b1.invalid == b2.invalid).all()


# --- the property ---------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dialect", DIALECTS)
@PROPS
@given(data=st.data())
def test_match_many_equals_match_loop(dialect, kind, data):
    subs = data.draw(st.lists(subscriptions(dialect), max_size=25), label="subs")
    cache = data.draw(st.sampled_from([0, 0, 3]), label="cache_size")
    sl = build(dialect, subs, cache)
    batch = data.draw(st.lists(rows(dialect), max_size=25), label="batch")
    rnd = random.Random(data.draw(st.integers(0, 2 ** 16), label="seed"))
    col, eff = make_input(kind, batch, rnd)
    assert len(eff) == len(batch)

    results = {}
    for queues in ("all", "none", "pick"):
        b = sl.match_many(col, queues=queues)
        check_shape(b, len(eff))
        check_rows(sl, b, eff, queues)
        results[queues] = b
    same(sl.match_many(col), results["pick"])                    # "pick" is the default
    same(sl.match_many(col, queues="pick", threads=2), results["pick"])

    # keys: default is the subject itself; and a row's pick depends only on its key
    subj_keys = [s if isinstance(s, str) and valid_subject(s, dialect) else "k" for s in eff]
    same(sl.match_many(col, keys=arrow_keys(subj_keys, kind)), results["pick"])
    keys = data.draw(st.lists(st.sampled_from(["k1", "k2", "k3", "\u00e9"]),
                              min_size=len(eff), max_size=len(eff)), label="keys")
    bk = sl.match_many(col, keys=arrow_keys(keys, kind))
    check_shape(bk, len(eff))
    check_rows(sl, bk, eff, "pick", keys)
    same(sl.match_many(col, keys=keys), bk)
    for i, s in enumerate(eff):
        if not bk.invalid[i]:
            alone = sl.match_many([s], keys=[keys[i]])
            assert alone[0].tolist() == bk[i].tolist()

    # a fresh index built in another order, cached or not, picks the same members
    other = build(dialect, subs[::-1], 0 if cache else 8)
    same_rows(other.match_many(col, keys=keys), bk)
    for queues in ("all", "none", "pick"):
        same_rows(other.match_many(col, queues=queues), results[queues])


# --- input types, one by one --------------------------------------------------

NATS_SUBS = [("a.*", 1, None), ("a.b", 2, None), ("a.>", 3, "q"), ("a.>", 4, "q"),
             ("*.b", 5, "q"), (">", 6, "r"), ("$x.b", 7, None), ("\u00e9.*", 8, None)]
NATS_BATCH = ["a.b", None, "a..b", "a.*", "x", "a.b.c", None, "a.b", "a.\ud800", "",
              "\u00e9.b", "a b", "a.b\x00", "$x.b", ">", "a." * 20 + "b"]


def test_every_input_type_gives_the_same_arrays():
    sl = build("nats", NATS_SUBS)
    base_rows = [x if isinstance(x, str) else None for x in NATS_BATCH]
    want = {q: sl.match_many(NATS_BATCH, queues=q) for q in ("all", "pick", "none")}
    for q in want:
        check_rows(sl, want[q], NATS_BATCH, q)
    vals = [_arrow_row(x) for x in NATS_BATCH]
    inputs = {
        "tuple": tuple(NATS_BATCH),
        "object": np.array(NATS_BATCH, dtype=object),
        "list_of_nones": base_rows,
        "string": pa.array(vals, pa.string()),
        "large_string": pa.array(vals, pa.large_string()),
        "chunked": _chunks(vals, [0, 5, 5, 6, len(vals)], pa.string()),
        "large_chunked": pa.chunked_array([pa.array(vals[:7], pa.large_string()),
                                           pa.array(vals[7:], pa.large_string())]),
        "sliced": pa.array(["x", None, "y"] + vals + [None], pa.string()).slice(3, len(vals)),
        "large_sliced": pa.array(["x"] * 5 + vals, pa.large_string()).slice(5),
        "chunked_sliced": pa.chunked_array([pa.array(["x", None] + vals[:4]), pa.array(vals[4:] + ["z"])])
                            .slice(2, len(vals)),
        "string_view": pa.array(vals, pa.string_view()),
        "string_view_sliced": pa.array(["x" * 20, None] + vals, pa.string_view()).slice(2),
        "dictionary": pa.array(vals).dictionary_encode(),
        "dictionary_int8_sliced": pa.array(["x", None] + vals).dictionary_encode()
                                    .cast(pa.dictionary(pa.int8(), pa.string())).slice(2),
        "dictionary_of_views": pa.array(vals, pa.string_view()).dictionary_encode(),
        "chunked_dictionaries": pa.chunked_array([pa.array(vals[:5]).dictionary_encode(),
                                                  pa.array(vals[5:]).dictionary_encode()]),
    }
    for name, col in inputs.items():
        for q in want:
            same(sl.match_many(col, queues=q), want[q])
    # numpy 'U' cannot hold None or non-str rows: compare with its own rows
    u = np.array([x if isinstance(x, str) else "" for x in NATS_BATCH], dtype=str)
    for q in want:
        same(sl.match_many(u, queues=q), sl.match_many(u.tolist(), queues=q))
        # a strided (non-contiguous) view
        same(sl.match_many(u[::2], queues=q), sl.match_many(u.tolist()[::2], queues=q))
        same(sl.match_many(np.array(NATS_BATCH, dtype=object)[::-3], queues=q),
             sl.match_many(NATS_BATCH[::-3], queues=q))
    if hasattr(np.dtypes, "StringDType"):                  # numpy >= 2: variable-width strings
        t = np.array([x for x in u.tolist() if "\ud800" not in x], dtype=np.dtypes.StringDType())
        same(sl.match_many(t, queues="all"), sl.match_many(t.tolist(), queues="all"))


def test_empty_batches():
    sl = build("nats", NATS_SUBS)
    for col in ([], (), np.array([], dtype=str), np.array([], dtype=object),
                pa.array([], pa.string()), pa.array([], pa.large_string()),
                pa.chunked_array([], pa.string()),
                pa.chunked_array([pa.array([], pa.string())] * 3),
                pa.array(["a.b", "a.b"]).slice(1, 0)):
        for q in ("all", "pick", "none"):
            b = sl.match_many(col, queues=q, threads=2)
            check_shape(b, 0)
            assert b.offsets.tolist() == [0] and len(b.sub_ids) == 0


def test_all_null_and_all_invalid_arrow():
    sl = build("nats", NATS_SUBS)
    for col in (pa.array([None] * 20, pa.string()), pa.nulls(20, pa.large_string()),
                pa.array(["", "a..b", ">", None] * 5).slice(1)):
        b = sl.match_many(col, queues="all")
        check_shape(b, len(col))
        assert b.invalid.all() and len(b.sub_ids) == 0


def test_nulls_at_every_bitmap_position_of_sliced_arrays():
    sl = build("nats", NATS_SUBS)
    vals = [None if i % 3 == 0 or i % 7 == 0 else ("a.b", "x", "a.b.c", "a.a")[i % 4] for i in range(70)]
    for typ in (pa.string(), pa.large_string()):
        arr = pa.array(vals, typ)
        for start in range(0, 17):
            for length in (0, 1, 5, 8, 9, 30, 70 - start):
                sub = arr.slice(start, length)
                b = sl.match_many(sub, queues="all")
                same(b, sl.match_many(vals[start:start + length], queues="all"))
                assert b.invalid.tolist() == [v is None for v in vals[start:start + length]]


def test_subject_length_limit():
    sl = topicmatch.Sublist("nats")
    sl.insert(">", 1)
    sl.insert("*", 2)
    mq = topicmatch.Sublist("mqtt")
    mq.insert("#", 1)
    longest, too_long = "a" * 65535, "a" * 65536
    wide_ok, wide_bad = "\u00e9" * 32767 + "a", "\u00e9" * 32768       # 65535 / 65536 bytes
    batch = [longest, too_long, wide_ok, wide_bad, "a." * 32767 + "a", "a." * 32768]
    want = [False, True, False, True, False, True]
    for col in (batch, np.array(batch, dtype=object), pa.array(batch), pa.array(batch, pa.large_string())):
        b = sl.match_many(col, queues="all")
        assert b.invalid.tolist() == want
        assert sorted(b[0].tolist()) == [1, 2] and sorted(b[2].tolist()) == [1, 2]
        assert b[4].tolist() == [1]
        assert mq.match_many(col, queues="all").invalid.tolist() == want


def _raw_arrow(rows, typ=pa.string()):
    """A string array from raw bytes, bypassing pyarrow's UTF-8 check."""
    offs, data = [0], b""
    for r in rows:
        data += r
        offs.append(len(data))
    odt = np.int32 if typ == pa.string() else np.int64
    return pa.Array.from_buffers(typ, len(rows), [None, pa.py_buffer(np.array(offs, dtype=odt)),
                                                  pa.py_buffer(data)])


@pytest.mark.parametrize("dialect", DIALECTS)
def test_arrow_rows_that_are_not_utf8_are_invalid(dialect):
    # A string array built from buffers is not UTF-8-checked by pyarrow.  A
    # row that is not valid UTF-8 (here: an encoded lone surrogate, a stray
    # byte, a truncated sequence, an overlong form, a code point above
    # U+10FFFF) is not a valid subject: flag it like a lone-surrogate str.
    sl = topicmatch.Sublist(dialect)
    sl.insert({"nats": ">", "mqtt": "#"}[dialect], 1)
    sep = {"nats": b".", "mqtt": b"/"}[dialect]
    bad = [b"a" + sep + b"\xed\xa0\x80", b"\xff", b"a\xc3", b"\xe0\x80\x80", b"\xf4\x90\x80\x80",
           b"\xc0\xae"]
    rows = [b"a" + sep + b"b", "\u00e9".encode()] + bad
    for typ in (pa.string(), pa.large_string()):
        b = sl.match_many(_raw_arrow(rows, typ), queues="all")
        assert b.invalid.tolist() == [False, False] + [True] * len(bad), b.invalid.tolist()
    # the same rows as Python str (surrogatepass) are invalid already
    strs = [r.decode("utf-8", "surrogateescape") for r in rows]
    assert sl.match_many(strs, queues="all").invalid.tolist()[:3] == [False, False, True]


def test_arrow_offsets_changed_after_validation_are_refused():
    # Issue 9, F2: the reproducer, in a fresh interpreter (it used to crash).
    from isolated import run_isolated
    out = run_isolated("""
        import numpy as np, pyarrow as pa, topicmatch
        def main():                  # locals die before exit (LeakSanitizer runs then)
            sl = topicmatch.Sublist(); sl.insert("a.b", 1)
            offs = np.array([0, 3, 6], np.int32)
            a = pa.Array.from_buffers(pa.string(), 2, [None, pa.py_buffer(offs), pa.py_buffer(b"a.bc.d")])
            offs[0] = -(1 << 30)
            try:
                sl.match_many(a)
            except ValueError as e:
                print("refused:", e)
        main()
    """)
    assert "refused: subjects: row 0 has Arrow offsets [-1073741824, 3)" in out, out


BAD_OFFSETS = [  # (offsets, row named in the error): data is b"a.bc.da.b" (9 bytes)
    ([-1, 3, 6, 9], 0), ([0, 3, 6, 10], 2), ([0, 4, 3, 9], 1), ([0, 3, 6, 1 << 30], 2),
    ([0, 3, -6, 9], 1), ([5, 3, 6, 9], 0)]


@pytest.mark.parametrize("typ", [pa.string(), pa.large_string()], ids=str)
@pytest.mark.parametrize("offs,row", BAD_OFFSETS)
def test_arrow_offsets_outside_the_data_are_refused(typ, offs, row):
    sl = build("nats", [("a.b", 1, None)])
    odt = np.int32 if typ == pa.string() else np.int64
    good = np.array([0, 3, 6, 9], odt)
    data = pa.py_buffer(b"a.bc.da.b")
    for what in ("subjects", "keys"):
        o = good.copy()
        arr = pa.Array.from_buffers(typ, 3, [None, pa.py_buffer(o), data])
        assert sl.match_many(arr, keys=arr).offsets.tolist() == [0, 1, 1, 2]
        o[:] = offs                                   # changed after pyarrow built it
        args = (arr, None) if what == "subjects" else (pa.array(["a.b"] * 3), arr)
        with pytest.raises(ValueError, match=rf"^{what}: row {row} has Arrow offsets "
                                              rf"\[{offs[row]}, {offs[row + 1]}\)"):
            sl.match_many(args[0], keys=args[1])
    # chunks, slices and keys count rows from the start of the whole column
    bad = good.copy()
    chunk = pa.Array.from_buffers(typ, 3, [None, pa.py_buffer(bad), data])
    bad[:] = offs
    okay = pa.array(["x.y", "a.b"], typ)
    with pytest.raises(ValueError, match=rf"^subjects: row {row + 2} "):
        sl.match_many(pa.chunked_array([okay, chunk], typ))
    with pytest.raises(ValueError, match=rf"^keys: row {row + 2} "):
        sl.match_many(pa.array(["a.b"] * 5, typ), keys=pa.chunked_array([okay, chunk], typ))
    if row == 0:                                        # the slice leaves the bad row out
        assert sl.match_many(chunk.slice(1)).invalid.tolist() == [False, False]
    else:
        with pytest.raises(ValueError, match=rf"^subjects: row {row - 1} "):
            sl.match_many(chunk.slice(1))


def test_arrow_offsets_of_null_rows_are_not_read():
    # A null row's offsets are never read, so they may be anything; the
    # array's offset into its buffers and its validity bitmap both count.
    sl = build("nats", [("a.b", 1, None)])
    for typ, odt in ((pa.string(), np.int32), (pa.large_string(), np.int64)):
        offs = np.array([0, 3, -7, 3, 6, 9], odt)
        bitmap = pa.py_buffer(np.packbits([1, 0, 0, 1, 1, 1, 1, 1], bitorder="little"))
        arr = pa.Array.from_buffers(typ, 5, [bitmap, pa.py_buffer(offs), pa.py_buffer(b"a.bc.da.b")])
        b = sl.match_many(arr)
        assert b.invalid.tolist() == [False, True, True, False, False]
        assert b.offsets.tolist() == [0, 1, 1, 1, 1, 2]
        assert sl.match_many(arr.slice(2)).invalid.tolist() == [True, False, False]
        offs[3] = 7                                     # row 3 (valid) now ends before it starts
        with pytest.raises(ValueError, match=r"^subjects: row 3 has Arrow offsets \[7, 6\)"):
            sl.match_many(arr)
        with pytest.raises(ValueError, match=r"^subjects: row 1 has"):
            sl.match_many(arr.slice(2))
        no_bitmap = pa.Array.from_buffers(typ, 5, [None, pa.py_buffer(offs), pa.py_buffer(b"a.bc.da.b")])
        with pytest.raises(ValueError, match=r"^subjects: row 1 has Arrow offsets \[3, -7\)"):
            sl.match_many(no_bitmap)


@pytest.mark.parametrize("threads", [2, 3, 4])
def test_list_rows_fed_to_the_threads_as_they_are_converted(threads):
    # A list's strings are copied into buffers of the column's own, and the
    # threads match the rows converted so far while the rest are converted:
    # every kind of row, rows spanning several 1 MiB copy buffers (and one
    # bigger than a buffer), each feed a block and a row long.
    from strategies import tiny_thread_blocks
    sl = build("nats", NATS_SUBS + [(">", 9, None)])
    wide = ["a" * 60000 + str(i) for i in range(40)]          # 2.4 MB: three buffers
    batch = NATS_BATCH * 3 + wide[:20] + ["b." * 600000 + "c"] + wide[20:] + NATS_BATCH
    rows_as_str = [x if isinstance(x, str) else None for x in batch]
    one = sl.match_many(batch, queues="all")
    assert one.invalid.tolist() == [x is None or not valid_subject(x, "nats") for x in rows_as_str]
    for i, x in enumerate(rows_as_str):
        if x is not None and not one.invalid[i]:
            assert Counter(one[i].tolist()) == all_ids(sl.match(x)), i
    for block_rows in (1, 3, 64):
        with tiny_thread_blocks(block_rows):
            for queues in ("all", "pick", "none"):
                same(sl.match_many(batch, queues=queues, threads=threads),
                     sl.match_many(batch, queues=queues))
                same(sl.match_many(tuple(batch), queues=queues, threads=threads),
                     sl.match_many(batch, queues=queues))


def test_bytes_and_other_objects_in_a_list_are_type_errors():
    # only None (a null row) and invalid strings are data; a wrong type is
    # the caller's mistake, named with its row (issue 34)
    sl = build("nats", NATS_SUBS)
    for bad in (b"a.b", bytearray(b"a.b"), 1, 2.5, object(), ["a.b"], True):
        for threads in (1, 2):
            with pytest.raises(TypeError, match=rf"^subjects\[2\] must be str or None, not {type(bad).__name__}$"):
                sl.match_many(["a.b", None, bad, "a.b"], queues="all", threads=threads)
    b = sl.match_many(["a.b", None, "a..b"], queues="all")
    assert b.invalid.tolist() == [False, True, True]


def test_a_list_shrunk_while_a_row_is_converted_is_refused():
    # A row that is not an ASCII str is converted outside the C loop that
    # copies the others (_other_row), and the error a lone surrogate makes
    # and catches there may run a collection, whose callback (a finalizer
    # alike) may shrink the list: the rows past its end are then not read,
    # and match_many says why.  Which collection falls there is found by
    # shrinking the list at each in turn; any other gives the whole list's
    # answer, as it was when match_many took its length.  (A free-threaded
    # build reads a tuple copied from the list: a change is never seen.)
    sl = build("nats", [("a.*", 1, None)])
    outcomes = set()
    for at in range(1, 40):
        rows = ["a.b"] * 10 + ["a.\ud800"] + ["a.c"] * 10
        seen = [0]

        def shrink(phase, info):
            if phase == "start":
                seen[0] += 1
                if seen[0] == at and len(rows) == 21:
                    rows.pop()
        threshold = gc.get_threshold()
        gc.callbacks.append(shrink)
        gc.set_threshold(1)
        try:
            b = sl.match_many(rows, threads=1)
        except RuntimeError as e:
            assert str(e) == "the subjects list changed size during match_many"
            outcomes.add("refused")
        else:
            assert b.invalid.tolist() == [i == 10 for i in range(len(b))]
            outcomes.add(len(b))
        finally:
            gc.set_threshold(*threshold)
            gc.callbacks.remove(shrink)
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        assert outcomes <= {20, 21}, outcomes
    else:
        assert "refused" in outcomes and outcomes <= {"refused", 20, 21}, outcomes


# --- queue groups ----------------------------------------------------------------

def test_pick_spreads_over_members_and_follows_the_key():
    sl = topicmatch.Sublist("nats")
    sl.insert("a.>", 100)
    sl.insert_many(["a.>"] * 4, [1, 2, 3, 4], ["q"] * 4)
    subjects_ = [f"a.s{i}" for i in range(2000)]
    b = sl.match_many(subjects_)
    check_rows(sl, b, subjects_, "pick")
    assert (b.counts() == 2).all()
    picks = Counter(b.sub_ids[1::2].tolist())
    assert set(picks) == {1, 2, 3, 4} and min(picks.values()) > 300, picks
    # one key for every subject: one member for all rows
    same_key = sl.match_many(subjects_, keys=["user-7"] * len(subjects_))
    assert len(set(same_key.sub_ids[1::2].tolist())) == 1
    # distinct keys on one subject spread again
    keyed = sl.match_many(["a.b"] * 2000, keys=[f"user-{i}" for i in range(2000)])
    picks = Counter(keyed.sub_ids[1::2].tolist())
    assert set(picks) == {1, 2, 3, 4} and min(picks.values()) > 300, picks


def test_pick_nats_groups_merge_by_name_mqtt_by_group_and_filter():
    nats = topicmatch.Sublist("nats")
    nats.insert_many(["a.b", "a.*", "a.>", "a.b"], [1, 2, 3, 4], ["q", "q", "q", "r"])
    b = nats.match_many(["a.b"] * 50, keys=[str(i) for i in range(50)])
    assert (b.counts() == 2).all()                  # one from q (of 1, 2, 3), one from r
    for i in range(50):
        row = sorted(b[i].tolist())
        assert row[0] in (1, 2, 3) and row[1] == 4
    assert set(b.sub_ids.tolist()) == {1, 2, 3, 4}

    mq = topicmatch.Sublist("mqtt")
    mq.insert_many(["$share/g/a/b", "$share/g/a/b", "$share/g/a/+", "a/#"], [1, 2, 3, 4],
                   [None, None, None, "g"])
    b = mq.match_many(["a/b"] * 50, keys=[str(i) for i in range(50)])
    assert (b.counts() == 3).all()                  # (g, a/b), (g, a/+), (g, a/#)
    for i in range(50):
        row = sorted(b[i].tolist())
        assert row[0] in (1, 2) and row[1:] == [3, 4]
    assert mq.match_many(["$x/b"], queues="all")[0].tolist() == []   # '$' topics: no '+'/'#'


@pytest.mark.parametrize("dialect", DIALECTS)
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_pick_depends_only_on_the_set_of_members(dialect, data):
    """Equal subscription sets inserted in different orders (one by one or in
    bulk, cached or not, one thread or two) pick exactly the reference's
    rendezvous member for every row and key."""
    subs = data.draw(st.lists(subscriptions(dialect), min_size=1, max_size=30), label="subs")
    perm = data.draw(st.permutations(subs), label="perm")
    batch = data.draw(st.lists(subjects(dialect), min_size=1, max_size=12), label="batch")
    keys = [f"k{i % 5}" if i % 3 else None for i in range(len(batch))]
    a = build(dialect, subs, 0)
    b = topicmatch.Sublist(dialect, cache_size=16)
    for f, i, q in perm:
        b.insert(f, i, queue=q)
    want = [R.picked_row(a.match(s), s if k is None else k, dialect) for s, k in zip(batch, keys)]
    for sl in (a, b):
        for threads in (1, 2):
            got = sl.match_many(batch, keys=keys, threads=threads)
            assert [sorted(got[i].tolist()) for i in range(len(batch))] == want


# --- also: two indexes answered as one ----------------------------------------

@pytest.mark.parametrize("dialect", ALL_DIALECTS)
@PROPS
@given(data=st.data())
def test_also_answers_as_one_index_holding_both(dialect, data):
    """match_many(also=b) gives, row for row and in the same order, what one
    index holding a's and b's subscriptions gives -- the plain ids merged,
    a group whose members the two split as one group, picks over all its
    members -- on every path: one thread or several, keys or none, dedupe,
    a dictionary column, a cached index, and b a mapped image with a live
    part."""
    def once(drawn, seen):          # each subscription once (MQTT: "$share/q/f" is (f, q))
        out = {}
        for f, i, q in drawn:
            key = (*f.split("/", 2)[:0:-1], i) if f.startswith("$share/") else (f, q, i)
            if key not in seen:
                out.setdefault(key, (f, i, q))
        return out
    subs = once(data.draw(st.lists(subscriptions(dialect), max_size=30), label="subs"), {})
    side = data.draw(st.lists(st.booleans(), min_size=len(subs), max_size=len(subs)), label="side")
    late = list(once(data.draw(st.lists(subscriptions(dialect), max_size=4), label="late"), subs).values())
    subs = list(subs.values())
    batch = data.draw(st.lists(rows(dialect), max_size=25), label="batch")
    a = build(dialect, [x for x, s in zip(subs, side) if s], data.draw(st.sampled_from([0, 3])))
    b = topicmatch.Sublist.from_bytes(build(dialect, [x for x, s in zip(subs, side) if not s]).to_bytes())
    for f, i, q in late:            # b's live part, beside its mapped image
        b.insert(f, i, queue=q)
    both = build(dialect, subs + late)
    keys = [f"k{i % 4}" if i % 3 else None for i in range(len(batch))]
    dictionary, eff = make_input("dictionary", batch, random.Random(0))
    for queues in ("all", "none", "pick"):
        for kw in ({}, {"keys": keys}, {"threads": 3}, {"dedupe": True}):
            got = a.match_many(batch, queues=queues, also=b, **kw)
            same(got, both.match_many(batch, queues=queues, **kw))
            if not kw and dialect != "amqp":     # (check_rows knows no once-per-id)
                check_rows(both, got, eff, queues)
        same(a.match_many(dictionary, queues=queues, also=b), both.match_many(dictionary, queues=queues))
        same(b.match_many(batch, queues=queues, also=a), both.match_many(batch, queues=queues))
        with tiny_thread_blocks(1 + len(batch) % 3):       # the threads' path, whatever the size
            same(a.match_many(batch, queues=queues, threads=3, also=b),
                 both.match_many(batch, queues=queues))


def test_also_refuses_what_is_not_another_index_of_its_dialect():
    a = topicmatch.Sublist("nats")
    with pytest.raises(TypeError, match="also must be a topicmatch.Sublist or None, not str"):
        a.match_many(["x"], also="x")
    with pytest.raises(ValueError, match="also must be another index"):
        a.match_many(["x"], also=a)
    with pytest.raises(ValueError, match="also is a 'mqtt' index, this one 'nats'"):
        a.match_many(["x"], also=topicmatch.Sublist("mqtt"))


def _issue21_index(full):
    """63 filler shapes (one '*' in 3..11 tokens: none a 2-token shape) use up
    all but one of the shape budget, so "orders.*" takes the last shape and
    "*.eu" stays in the trie; the small index holds both filters in shapes."""
    sl = topicmatch.Sublist("nats")
    if full:
        n = 0
        for count in range(3, 12):
            for pos in range(count):
                sl.insert(".".join("*" if t == pos else "z" for t in range(count)), 1000 + n)
                n += 1
        assert n == 63
    sl.insert("orders.*", 1, queue="w")
    sl.insert("*.eu", 2, queue="w")
    return sl


def test_pick_ignores_where_a_filter_is_stored_issue_21():
    keys = [f"key{i}" for i in range(8)]
    full, small = _issue21_index(True), _issue21_index(False)
    picks = {}
    for name, sl in (("full", full), ("small", small)):
        for threads in (1, 2):
            picks[name, threads] = full_picks = sl.match_many(["orders.eu"] * 8, keys=keys,
                                                              threads=threads).sub_ids.tolist()
            assert set(full_picks) <= {1, 2} and len(full_picks) == 8
    assert len(set(map(tuple, picks.values()))) == 1, picks
    m = small.match("orders.eu")
    assert picks["small", 1] == [R.pick_member(k, "w", None, [1, 2]) for k in keys]
    assert m.groups and set(m.groups[0][2]) == {1, 2}
    # the 8 keys do not all pick one member: the test would catch a swap
    assert set(picks["small", 1]) == {1, 2}, picks


def test_same_key_same_pick_across_subjects():
    for dialect, filt, subs_ in (("nats", "a.>", ["a.b", "a.c", "a.b.c", "a.\u00e9"]),
                                 ("mqtt", "a/#", ["a", "a/b", "a//", "a/\u00e9"])):
        sl = topicmatch.Sublist(dialect)
        sl.insert_many([filt] * 7, list(range(7)), ["q"] * 7)
        for k in range(50):
            b = sl.match_many(subs_, keys=[f"key{k}"] * len(subs_))
            assert len(set(b.sub_ids.tolist())) == 1 and len(b.sub_ids) == len(subs_)


def test_pick_ignores_null_keys_rows_stay_valid():
    sl = build("nats", NATS_SUBS)
    b = sl.match_many(["a.b", "a.b"], keys=pa.array([None, "k"]))
    assert not b.invalid.any()
    check_rows(sl, b, ["a.b", "a.b"], "pick", [None, "k"])


@pytest.mark.parametrize("mode", ["all", "none", "pick"])
def test_queue_modes_on_a_fixed_index(mode):
    sl = build("nats", NATS_SUBS)
    b = sl.match_many(["a.b"], queues=mode)
    row = sorted(b[0].tolist())
    if mode == "all":
        assert row == [1, 2, 3, 4, 5, 6]
    elif mode == "none":
        assert row == [1, 2]
    else:
        assert len(row) == 4 and row[:2] == [1, 2] and row[3] == 6 and row[2] in (3, 4, 5)


# --- keys ------------------------------------------------------------------------------

def test_keys_in_every_form_agree():
    sl = build("nats", NATS_SUBS)
    subj = ["a.b", "a.c", None, "a.b.c", "x.b"] * 7
    keys = [f"k{i % 11}" for i in range(len(subj))]
    want = sl.match_many(subj, keys=keys)
    check_rows(sl, want, subj, "pick", keys)
    forms = [tuple(keys), np.array(keys), np.array(keys, dtype=object), pa.array(keys),
             pa.array(keys, pa.large_string()),
             pa.chunked_array([pa.array(keys[:3]), pa.array([], pa.string()), pa.array(keys[3:])]),
             pa.array(["pad"] * 3 + keys).slice(3)]
    for k in forms:
        same(sl.match_many(subj, keys=k), want)
    # keys with chunked subjects (keys cut at other places than the subjects)
    col = pa.chunked_array([pa.array(subj[:10]), pa.array(subj[10:])])
    same(sl.match_many(col, keys=keys), want)
    same(sl.match_many(col, keys=pa.array(keys)), want)


def test_keys_of_the_wrong_length_or_type():
    sl = build("nats", NATS_SUBS)
    with pytest.raises(ValueError, match="keys"):
        sl.match_many(["a.b", "a.c"], keys=["k"])
    with pytest.raises(ValueError, match="keys"):
        sl.match_many(["a.b"], keys=pa.array(["k", "l"]))
    with pytest.raises(ValueError, match="keys"):
        sl.match_many(pa.chunked_array([pa.array(["a.b"]), pa.array(["a.c"])]), keys=[])
    with pytest.raises((TypeError, ValueError)):
        sl.match_many(["a.b"], keys=pa.array([1]))


def test_keys_that_are_not_strings_are_rejected_not_silently_ignored():
    # An int key column, or one str taken as a sequence of characters, would
    # otherwise fall back to the subject (or key by a character), quietly
    # partitioning by the wrong thing.  subjects= already refuses these.
    sl = topicmatch.Sublist("nats")
    sl.insert_many(["a"] * 8, list(range(8)), ["q"] * 8)
    with pytest.raises((TypeError, ValueError)):
        sl.match_many(["a"] * 5, keys=np.arange(5))
    with pytest.raises((TypeError, ValueError)):
        sl.match_many(["a"] * 5, keys=[1, 2, 3, 4, 5])
    with pytest.raises(TypeError):
        sl.match_many(["a"], keys="k")


# --- bad arguments -------------------------------------------------------------

def test_bad_arguments_give_clear_errors():
    sl = build("nats", NATS_SUBS)
    ok = ["a.b"]
    with pytest.raises(ValueError, match="queues"):
        sl.match_many(ok, queues="bogus")
    with pytest.raises((TypeError, ValueError)):
        sl.match_many(ok, queues=None)
    for t in (0, -1):
        with pytest.raises(ValueError, match="threads"):
            sl.match_many(ok, threads=t)
    for t in ("2", 2.0, None):
        with pytest.raises(TypeError):
            sl.match_many(ok, threads=t)
    for col in ("a.b", b"a.b", 5, None, np.arange(3), np.array([b"a.b"]), np.array([["a.b"]]),
                pa.array([1, 2]), pa.array([b"a.b"], pa.binary()),
                pa.array([1]).dictionary_encode(), pa.chunked_array([pa.array([1])]),
                pa.table({"s": ["a.b"]}), 3.5, pa.array([b"a.b"], pa.binary()).dictionary_encode()):
        with pytest.raises(TypeError):
            sl.match_many(col)
    assert sorted(sl.match_many(["a.b"], queues="all")[0].tolist()) == [1, 2, 3, 4, 5, 6]  # still fine


def test_generators_and_other_iterables_are_accepted():
    sl = build("nats", NATS_SUBS)
    want = sl.match_many(["a.b", "x", None], queues="all")
    same(sl.match_many((s for s in ["a.b", "x", None]), queues="all"), want)


# --- results -------------------------------------------------------------------------

def test_result_is_read_only_and_outlives_everything():
    sl = build("nats", NATS_SUBS)
    subj = ["a.b", "a.c", "x", None] * 100
    b = sl.match_many(pa.array(subj), queues="all")
    want = [None if b.invalid[i] else b[i].tolist() for i in range(len(b))]
    assert not b.sub_ids.flags.writeable
    with pytest.raises(ValueError):
        b.sub_ids[0] = 99
    la = b.to_arrow()
    del sl, b
    gc.collect()
    assert la.to_pylist() == want
    ids = la.values
    del la
    gc.collect()
    assert ids.to_pylist() == [x for r in want if r for x in r]


def test_repr():
    # Every row of a small result (None: invalid), so equal reprs are equal
    # results; a large one its first and last rows and its sizes.
    sl = build("nats", NATS_SUBS)
    assert repr(sl.match_many(["a.b", None, "x"])) == "BatchResult([[1, 2, 5, 6], None, [6]])"
    big = repr(sl.match_many(["a.b"] * 30 + [None]))
    assert big == ("BatchResult([[1, 2, 5, 6], [1, 2, 5, 6], [1, 2, 5, 6], ..., [1, 2, 5, 6], [1, 2, 5, 6], "
                   "None], rows=31, ids=120, invalid=1)")


# --- big batches: the native-thread path ---------------------------------------------

def _big_index(cache_size=0):
    sl = topicmatch.Sublist("nats", cache_size=cache_size)
    rnd = random.Random(5)
    toks = ["a", "b", "c", "d", "e"]
    for i in range(300):
        f = ".".join(rnd.choice(toks + ["*"]) for _ in range(rnd.randint(1, 3)))
        if rnd.random() < 0.2:
            f += ".>"
        q = rnd.choice([None, None, "q1", "q2"])
        sl.insert(f, i, queue=q)
    return sl


def _big_batch(n, seed=7):
    rnd = random.Random(seed)
    toks = ["a", "b", "c", "d", "e", "f"]
    out = []
    for _ in range(n):
        r = rnd.random()
        if r < 0.01:
            out.append(None)
        elif r < 0.02:
            out.append("a..b")
        else:
            out.append(".".join(rnd.choice(toks) for _ in range(rnd.randint(1, 4))))
    return out


def test_threads_give_identical_arrays_on_big_batches():
    sl = _big_index()
    cached_small = _big_index(cache_size=64)
    cached_big = _big_index(cache_size=5000)
    n = 2 * ROWS_PER_CHUNK + 7000                     # > 2 chunks: threads really run
    subj = _big_batch(n)
    keys = [f"k{i % 1013}" for i in range(n)]
    for queues in ("all", "pick", "none"):
        want = sl.match_many(subj, queues=queues, threads=1)
        for t in (2, 3, 4, 1000):
            same(sl.match_many(subj, queues=queues, threads=t), want)
        same(cached_small.match_many(subj, queues=queues, threads=2), want)
        same(cached_big.match_many(pa.array(subj), queues=queues, threads=2), want)
    # spot-check rows against match()
    b = sl.match_many(subj, queues="all", threads=2)
    idx = list(range(0, n, 97)) + list(range(ROWS_PER_CHUNK - 3, ROWS_PER_CHUNK + 3)) + [n - 1]
    for i in idx:
        s = subj[i]
        assert b.invalid[i] == (s is None or s == "a..b")
        if not b.invalid[i]:
            assert Counter(b[i].tolist()) == all_ids(sl.match(s)), (i, s)
    # keys, and a chunked array mixing threaded and single-thread chunks
    want = sl.match_many(subj, keys=keys)
    col = pa.chunked_array([pa.array(subj[:100]), pa.array([], pa.string()),
                            pa.array(subj[100:n - 2]), pa.array(subj[n - 2:])])
    for t in (1, 2, 4):
        same(sl.match_many(subj, keys=keys, threads=t), want)
        same(sl.match_many(col, keys=pa.array(keys), threads=t), want)
    big_first = pa.chunked_array([pa.array(subj[:n - 50]), pa.array(subj[n - 50:])])
    same(sl.match_many(big_first, keys=keys, threads=2), want)
    two_big = pa.chunked_array([pa.array(subj), pa.array(subj[:100]), pa.array(subj)])
    want2 = sl.match_many(subj + subj[:100] + subj, queues="all")
    same(sl.match_many(two_big, queues="all", threads=2), want2)
    check_arrow(want2)


# --- big outputs: buffers kept by the output pool (csrc/batch/fs_idbuf.h) ---------------

POOL_MIN_BYTES = 4 << 20        # fs_idbuf.h: FS_IDPOOL_MIN_BYTES


def _fanout_index():
    """Subjects matching up to 220 ids each: batches of tens of thousands
    of rows return several MB, the size whose buffers the pool keeps."""
    sl = topicmatch.Sublist("nats")
    sl.insert_many(["a.>"] * 150 + ["a.*.c"] * 40 + ["*.b.*"] * 30, list(range(220)),
                   [None] * 150 + ["g1", "g2"] * 20 + [None] * 30)
    return sl


def test_big_outputs_reuse_released_buffers_and_stay_exact():
    """Released outputs of 4 MiB or more are kept and written again by
    later batches, on one thread and several: every batch must still be
    exactly the rows' ids (a stale id left from an earlier batch, or a row
    written over another's, shows in the exact comparison)."""
    topicmatch.release_memory()
    assert topicmatch._core._idpool_status() == (0, 0)
    sl = _fanout_index()
    kinds = ["a.b.c", "a.x.c", "q.b.z", "a.b", "zz", None, "a..b"]
    per_kind = {}
    for s in kinds:
        one = sl.match_many([s], queues="all")
        got = one.sub_ids.copy()
        if s is not None and s != "a..b":
            assert Counter(got.tolist()) == all_ids(sl.match(s)), s
        per_kind[s] = got
    rnd = random.Random(3)
    kept_any = False
    for n, threads in [(40000, 1), (40000, 2), (25000, 3), (60000, 2), (3000, 1), (40000, 1), (70000, 4)]:
        subj = [rnd.choice(kinds) for _ in range(n)]
        b = sl.match_many(subj, queues="all", threads=threads)
        lens = np.array([len(per_kind[s]) for s in subj], dtype=np.int64)
        assert np.array_equal(np.diff(b.offsets), lens), (n, threads)
        assert np.array_equal(b.sub_ids, np.concatenate([per_kind[s] for s in subj])), (n, threads)
        big = b.sub_ids.nbytes >= POOL_MIN_BYTES
        del b
        gc.collect()
        kept, nbytes = topicmatch._core._idpool_status()
        if big and sys.platform.startswith("linux"):      # MADV_FREE: the buffer is kept
            assert kept >= 1 and nbytes >= POOL_MIN_BYTES, (n, threads, kept, nbytes)
            kept_any = True
        assert kept <= 4 and nbytes <= 1 << 30
    assert kept_any or not sys.platform.startswith("linux")
    # A batch of many rows but few ids starts in the largest kept buffer
    # and moves its ids out at the end: the result is exact and the pool
    # still holds every buffer it had (no small result pins a big one).
    before = topicmatch._core._idpool_status()
    subj = ["zz"] * 5000 + ["a.b.c"]
    small = sl.match_many(subj, queues="all")
    assert small.sub_ids.tolist() == per_kind["a.b.c"].tolist()
    assert topicmatch._core._idpool_status() == before
    del small
    kept, nbytes = topicmatch._core._idpool_status()
    assert topicmatch.release_memory() == nbytes
    assert topicmatch._core._idpool_status() == (0, 0)
    assert topicmatch.release_memory() == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX")
def test_fork_while_another_thread_holds_the_output_pool():
    """The output pool is process-wide and locked: a fork() while another
    thread holds the lock must wait for it (fs_idbuf.c registers fork
    handlers), not copy it held into the child, which would then hang at
    its first big batch.  A thread holds the lock for 0.5 s (the GIL
    released); the main thread forks meanwhile; the child must match a
    big batch exactly, within the deadline."""
    import threading
    import time
    import warnings
    sl = _fanout_index()
    subj = (["a.b.c"] + ["zz"] * 4) * 2000            # 10,000 rows: the pool is used
    want = sl.match_many(subj, queues="all").sub_ids.copy()
    holder = threading.Thread(target=topicmatch._core._idpool_hold, args=(500,))
    holder.start()
    time.sleep(0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # 3.12+: fork() with threads
        pid = os.fork()
        if pid == 0:                                           # the child
            ok = np.array_equal(sl.match_many(subj, queues="all").sub_ids, want)
            os._exit(0 if ok else 1)
    holder.join()
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung: the output pool's lock was copied held")
        time.sleep(0.05)


# --- determinism across processes and serialization ----------------------------------

DETERMINISM_SCRIPT = r'''
import hashlib, random
import topicmatch
def digest():
    out = hashlib.sha256()
    for dialect, sep in (("nats", "."), ("mqtt", "/")):
        rnd = random.Random(11)
        toks = ["a", "b", "c", "$x"]
        subs = []
        for i in range(200):
            f = sep.join(rnd.choice(toks + ["*" if dialect == "nats" else "+"]) for _ in range(rnd.randint(1, 3)))
            subs.append((f, i, rnd.choice([None, "q1", "q2", "q3"])))
        subj = [sep.join(rnd.choice(toks) for _ in range(rnd.randint(1, 3))) for _ in range(40000)]
        keys = ["k%d" % rnd.randrange(500) for _ in range(len(subj))]
        for cache in (0, 64):
            sl = topicmatch.Sublist(dialect, cache_size=cache)
            for f, i, q in subs:
                sl.insert(f, i, queue=q)
            for k in (None, keys):
                for t in (1, 2):
                    b = sl.match_many(subj, keys=k, threads=t)
                    out.update(b.offsets.tobytes()); out.update(b.sub_ids.tobytes())
    return out.hexdigest()
'''


def _digest_here():
    ns = {}
    exec(DETERMINISM_SCRIPT, ns)
    return ns["digest"]()


def test_pick_is_the_same_in_another_process():
    here = _digest_here()
    env = dict(os.environ)
    env["PYTHONHASHSEED"] = "12345"
    pkg_root = os.path.dirname(os.path.dirname(topicmatch.__file__))
    env["PYTHONPATH"] = pkg_root + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", DETERMINISM_SCRIPT + "\nprint(digest())"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == here


@pytest.mark.parametrize("dialect", DIALECTS)
def test_pick_survives_a_serialization_round_trip(dialect):
    sep = {"nats": ".", "mqtt": "/"}[dialect]
    rnd = random.Random(3)
    sl = topicmatch.Sublist(dialect)
    for i in range(150):
        f = sep.join(rnd.choice(["a", "b", "c"]) for _ in range(rnd.randint(1, 3)))
        sl.insert(f, i, queue=rnd.choice(["q1", "q2", None]))
    try:
        blob = sl.to_bytes()
        loaded = topicmatch.Sublist.from_bytes(blob)
    except NotImplementedError:
        pytest.skip("serialization not available in this build")
    subj = [sep.join(rnd.choice(["a", "b", "c"]) for _ in range(rnd.randint(1, 3))) for _ in range(3000)]
    keys = [f"k{i}" for i in range(len(subj))]
    for k in (None, keys):
        # the same members (the order of groups inside a row may differ)
        same_rows(loaded.match_many(subj, keys=k), sl.match_many(subj, keys=k))
        same(loaded.match_many(subj, keys=k), loaded.match_many(subj, keys=k, threads=2))
