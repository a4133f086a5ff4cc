"""The Arrow reader (csrc/arrow/fs_arrow.c, issue 46): pyarrow columns
exported through Arrow's C Data Interface and read in C, every read checked
against the buffers' sizes first.

What the reader makes of a column (topicmatch._core._arrow_rows: its rows
as bytes, and whether it read them in place) is compared with pyarrow's own
to_pylist(), over random arrays of every kind -- string, large_string,
string_view, dictionary of each with any index type -- sliced, with nulls,
chunked; match_many, insert_many and route_keys over the same arrays give
what they give for the Python list.  Hostile arrays built with
pa.Array.from_buffers (offsets out of order or past the data, buffers too
short, views pointing outside their buffers, dictionary indices outside the
dictionary, misaligned offsets) are refused with the messages the Python
layer always gave, the row and numbers computed here independently."""
import re
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from topicmatch import Sublist
from topicmatch._core import _arrow_indices, _arrow_rows, route_keys
from examples import examples

pa = pytest.importorskip("pyarrow", reason="these tests feed Arrow columns; pyarrow has no wheels for some platforms (musllinux)")
HAS_VIEW = hasattr(pa, "string_view")
VALUE_TYPES = [pa.string(), pa.large_string()] + ([pa.string_view()] if HAS_VIEW else [])
INDEX_TYPES = [pa.int8(), pa.uint8(), pa.int16(), pa.uint16(), pa.int32(), pa.uint32(), pa.int64(), pa.uint64()]
PROPS = settings(max_examples=examples(200), deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
HOSTILE = settings(max_examples=examples(300), deadline=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Strings short and long (a string_view holds up to 12 bytes inline), with
# multi-byte characters, and subjects the index below answers.
TEXT = st.one_of(st.text(st.characters(blacklist_categories=("Cs",)), max_size=20),
                 st.sampled_from(["a.b", "a.c", "x.y.z", "a." + "b" * 30, "", "é.ü"]))
ROWS = st.lists(st.one_of(st.none(), TEXT), max_size=40)


def _bytes(rows):
    return [None if r is None else r.encode() for r in rows]


@st.composite
def layouts(draw):
    """(value type, index type or None): a column's Arrow type."""
    return draw(st.sampled_from(VALUE_TYPES)), draw(st.one_of(st.none(), st.sampled_from(INDEX_TYPES)))


@st.composite
def arrays(draw, rows, layout):
    """One Arrow array of rows in layout: plain, or dictionary-encoded (the
    dictionary in random order, with an unused value and, at times, a null
    value some null rows point at), sliced out of padding."""
    vtype, itype = layout
    front = draw(st.lists(st.one_of(st.none(), st.just("pad" * 5)), max_size=9))
    back = draw(st.lists(st.one_of(st.none(), st.just("q")), max_size=3))
    vals = front + rows + back
    if itype is None:
        arr = pa.array(vals, vtype)
    else:
        order = draw(st.permutations(sorted({v for v in vals if v is not None}) + ["unused"]))
        null_value = draw(st.booleans())
        where = {v: i for i, v in enumerate(order)}
        # a null row: a null index, or (at times) an index of the null value
        nulls = [len(order) if null_value and draw(st.booleans()) else None for _ in vals]
        indices = pa.array([nulls[i] if v is None else where[v] for i, v in enumerate(vals)], itype)
        arr = pa.DictionaryArray.from_arrays(indices, pa.array(list(order) + [None] * null_value, vtype))
    return arr.slice(len(front), len(rows))


@st.composite
def columns(draw):
    """(rows, an Arrow Array of them or a ChunkedArray, empty chunks too)."""
    rows = draw(ROWS)
    layout = draw(layouts())
    cuts = sorted(draw(st.lists(st.integers(0, len(rows)), max_size=3)))
    if not cuts and draw(st.booleans()):
        return rows, draw(arrays(rows, layout))
    bounds = [0] + cuts + [len(rows)]
    parts = [draw(arrays(rows[a:b], layout)) for a, b in zip(bounds, bounds[1:])]
    return rows, pa.chunked_array(parts, parts[0].type)


@PROPS
@given(columns())
def test_the_reader_sees_what_pyarrow_sees(case):
    rows, col = case
    assert col.to_pylist() == rows
    got, in_place = _arrow_rows(col)
    assert got == _bytes(rows)
    # (large_)string is read in place through its offsets when it is one
    # array; anything else is a pointer per row
    one = col if isinstance(col, pa.Array) else (col.chunks[0] if col.num_chunks == 1 else None)
    assert in_place == (one is not None and (pa.types.is_string(one.type) or pa.types.is_large_string(one.type)))


@PROPS
@given(rows=ROWS, data=st.data())
def test_dictionary_indices_are_read_as_pyarrow_reads_them(rows, data):
    vtype, itype = data.draw(layouts())
    arr = data.draw(arrays(rows, (vtype, itype or pa.int8())))
    assert _arrow_indices(arr) == arr.indices.to_pylist()


SUBS = [("a.*", 1), ("a.b", 2), (">", 3), ("x.y.z", 4), ("a." + "b" * 30, 5), ("é.ü", 6)]


@PROPS
@given(columns(), st.sampled_from(["pick", "all", "none"]), st.booleans())
def test_the_public_calls_read_an_arrow_column_as_its_list(case, queues, keyed):
    rows, col = case
    sl = Sublist("nats")
    sl.insert_many([f for f, _ in SUBS], [i for _, i in SUBS])
    sl.insert("a.b", 7, queue="q")
    sl.insert("a.b", 8, queue="q")
    keys = col if keyed else None
    want = sl.match_many(rows, keys=rows if keyed else None, queues=queues)
    assert sl.match_many(col, keys=keys, queues=queues) == want
    assert sl.match_many(col, keys=keys, queues=queues, dedupe=True) == \
        sl.match_many(rows, keys=rows if keyed else None, queues=queues, dedupe=True)
    k1, t1 = route_keys(col)
    k2, t2 = route_keys(rows)
    assert k1.tolist() == k2.tolist() and t1.tolist() == t2.tolist()


@PROPS
@given(columns())
def test_insert_many_reads_an_arrow_column_as_its_list(case):
    rows, col = case
    a, b = Sublist("mqtt"), Sublist("mqtt")
    if None in rows:
        with pytest.raises(TypeError, match=r"^filters\[\d+\] must be str, not None$"):
            a.insert_many(col, np.arange(len(rows)))
        return
    try:
        want = b.insert_many(rows, list(range(len(rows))))
    except ValueError as e:
        with pytest.raises(ValueError) as got:
            a.insert_many(col, np.arange(len(rows)))
        assert str(got.value) == str(e)
        return
    assert a.insert_many(col, np.arange(len(rows))) == want
    assert len(a) == len(b) and a.to_bytes() == b.to_bytes()      # the same subscriptions, in the same order


# ---------------------------------------------------------------- hostile arrays

def _bitmap(valid):
    return pa.py_buffer(np.packbits(np.array(valid, np.uint8), bitorder="little").tobytes())


def _first_bad_offsets(offs, data_size, valid, off, n):
    """(row, a, b) of the first valid row whose offsets are not inside the
    data, or None."""
    for i in range(n):
        j = off + i
        if valid is not None and not valid[j]:
            continue
        a, b = int(offs[j]), int(offs[j + 1])
        if a < 0 or b < a or b > data_size:
            return i, a, b
    return None


@HOSTILE
@given(typ=st.sampled_from([pa.string(), pa.large_string()]),
       offs=st.lists(st.integers(-4, 14), min_size=1, max_size=12),
       data=st.binary(max_size=10), nulls=st.lists(st.booleans(), max_size=12),
       off=st.integers(0, 3), what=st.sampled_from(["subjects", "keys", "values"]))
def test_hostile_offsets_name_the_first_bad_row(typ, offs, data, nulls, off, what):
    n = len(offs) - 1 - off
    if n < 0:
        return
    valid = [not (nulls[j] if j < len(nulls) else False) for j in range(len(offs))] if any(nulls) else None
    odt = np.int32 if typ == pa.string() else np.int64
    o = np.zeros(len(offs), odt)
    arr = pa.Array.from_buffers(typ, n, [_bitmap(valid) if valid else None, pa.py_buffer(o), pa.py_buffer(data)],
                                offset=off)
    o[:] = offs                          # changed after pyarrow validated it
    bad = _first_bad_offsets(offs, len(data), valid, off, n)
    sl = Sublist("nats")
    sl.insert("a.b", 1)
    call = {"subjects": lambda: sl.match_many(arr), "keys": lambda: sl.match_many(["a.b"] * n, keys=arr),
            "values": lambda: route_keys(arr)}[what]
    if bad is None:
        call()
        got, _ = _arrow_rows(arr)
        assert got == [None if valid and not valid[off + i] else data[offs[off + i]:offs[off + i + 1]]
                       for i in range(n)]
        return
    row, a, b = bad
    with pytest.raises(ValueError) as e:
        call()
    assert str(e.value) == (f"{what}: row {row} has Arrow offsets [{a}, {b}), not within the data "
                            f"buffer's {len(data)} bytes")


@pytest.mark.parametrize("typ", [pa.string(), pa.large_string()] + ([pa.string_view()] if HAS_VIEW else []), ids=str)
def test_buffers_too_short_are_refused(typ):
    # pyarrow checks a buffer's size when it builds an array, so a short one
    # is shown to the reader by saying its size smaller (_arrow_rows' shrink)
    arr = pa.array(["a.b", None, "c" * 20, "d", "e"], typ).slice(1, 3)
    fixed = "views buffer" if typ not in (pa.string(), pa.large_string()) else "offsets buffer"

    def need(rows, offset):             # bytes of the fixed-width buffer the rows read
        return {"u": 4 * (offset + rows + 1), "U": 8 * (offset + rows + 1), "v": 16 * (offset + rows)}[fmt]
    fmt = "u" if typ == pa.string() else "U" if typ == pa.large_string() else "v"
    size = arr.buffers()[1].size
    assert _arrow_rows(arr, shrink={1: size - need(3, 1)})[0] == [None, b"c" * 20, b"d"]     # exactly enough
    with pytest.raises(ValueError, match=rf"^values: the Arrow {fixed} is too short for 3 rows at offset 1$"):
        _arrow_rows(arr, shrink={1: size - need(3, 1) + 1})
    with pytest.raises(ValueError, match=r"^values: the Arrow validity bitmap is too short for 3 rows at offset 1$"):
        _arrow_rows(arr, shrink={0: arr.buffers()[0].size})
    if fixed == "offsets buffer":
        with pytest.raises(ValueError, match=r"^values: row 2 has Arrow offsets \[23, 24\), not within the data "
                                             r"buffer's 23 bytes$"):
            _arrow_rows(arr, shrink={2: arr.buffers()[2].size - 23})
    else:
        with pytest.raises(ValueError, match=r"^values: row 1 has an Arrow view of 20 bytes at \[buffer 0, offset 0\], "
                                             r"not within the array's data buffers$"):
            _arrow_rows(arr, shrink={2: arr.buffers()[2].size - 19})
    assert _arrow_rows(arr) == ([None, b"c" * 20, b"d"], fixed == "offsets buffer")
    # a dictionary's indices, and its values (numbered after the indices)
    d = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int16()), pa.array(["x" * 13, "y"], typ))
    with pytest.raises(ValueError, match=r"^values: the Arrow dictionary indices buffer is too short for 3 rows "
                                         r"at offset 0$"):
        _arrow_rows(d, shrink={1: d.buffers()[1].size - 5})
    with pytest.raises(ValueError, match=rf"^values \(dictionary\): the Arrow {fixed} is too short for 2 rows "
                                         r"at offset 0$"):
        _arrow_rows(d, shrink={3: d.dictionary.buffers()[1].size - need(2, 0) + 1})
    assert _arrow_rows(d)[0] == [b"x" * 13, b"y", b"x" * 13]


def test_misaligned_offsets_are_read_row_by_row():
    # A buffer sliced from bytes at an odd address: its offsets are read
    # byte by byte (never as an int32 at an odd address), the rows the same.
    raw = pa.py_buffer(b"\0" + np.array([0, 3, 3, 6], np.int32).tobytes())
    offs = raw.slice(1)
    assert offs.address % 4 != 0
    arr = pa.Array.from_buffers(pa.string(), 3, [None, offs, pa.py_buffer(b"a.bc.d")])
    rows, in_place = _arrow_rows(arr)
    assert rows == [b"a.b", b"", b"c.d"] and not in_place
    sl = Sublist("nats")
    sl.insert("a.b", 1)
    assert sl.match_many(arr).offsets.tolist() == [0, 1, 1, 1]


@pytest.mark.skipif(not HAS_VIEW, reason="pyarrow without string_view")
@HOSTILE
@given(views=st.lists(st.tuples(st.integers(-3, 40), st.integers(-2, 3), st.integers(-4, 40)), min_size=1, max_size=8),
       sizes=st.lists(st.integers(0, 40), max_size=3))
def test_hostile_views_name_the_first_bad_row(views, sizes):
    buffers = [pa.py_buffer(bytes(range(65, 65 + s))) for s in sizes]
    raw = b"".join(struct.pack("<i", ln) + (b"inlinebytes!"[:12] if ln <= 12 else b"pfx!" + struct.pack("<ii", bi, bo))
                   for ln, bi, bo in views)
    n = len(views)
    arr = pa.Array.from_buffers(pa.string_view(), n, [None, pa.py_buffer(raw)] + buffers)
    sl = Sublist("nats")
    want = None
    for i, (ln, bi, bo) in enumerate(views):
        if ln < 0:
            want = f"subjects: row {i} has an Arrow view of length {ln}"
        elif ln > 12 and not (0 <= bi < len(sizes) and bo >= 0 and bo + ln <= sizes[bi]):
            want = (f"subjects: row {i} has an Arrow view of {ln} bytes at [buffer {bi}, offset {bo}], "
                    f"not within the array's data buffers")
        if want:
            break
    if want is None:
        rows, _ = _arrow_rows(arr)
        assert rows == [b"inlinebytes!"[:ln] if ln <= 12 else bytes(range(65, 65 + sizes[bi]))[bo:bo + ln]
                        for ln, bi, bo in views]
        sl.match_many(arr)
        return
    with pytest.raises(ValueError) as e:
        sl.match_many(arr)
    assert str(e.value) == want


@HOSTILE
@given(itype=st.sampled_from(INDEX_TYPES), raw=st.binary(min_size=1, max_size=64), ndict=st.integers(0, 5),
       nulls=st.lists(st.booleans(), max_size=8), spread=st.booleans())
def test_hostile_dictionary_indices_name_the_first_bad_row(itype, raw, ndict, nulls, spread):
    width = itype.bit_width // 8
    n = len(raw) // width
    if n == 0:
        return
    raw = raw[:n * width]
    values = np.frombuffer(raw, np.dtype(f"<{'i' if pa.types.is_signed_integer(itype) else 'u'}{width}"))
    valid = [not (nulls[i] if i < len(nulls) else False) for i in range(n)] if any(nulls) else None
    # 8-byte indices past the signed range read as negative
    values = [int(v) if int(v) < 2 ** 63 else int(v) - 2 ** 64 for v in values]
    dictionary = pa.array([f"v{k}" for k in range(ndict)], pa.string())
    arr = pa.DictionaryArray.from_buffers(pa.dictionary(itype, pa.string()), n,
                                          [_bitmap(valid) if valid else None, pa.py_buffer(raw)], dictionary)
    bad = next(((i, k) for i, k in enumerate(values) if (valid is None or valid[i]) and not 0 <= k < ndict), None)
    sl = Sublist("nats")
    sl.insert("v1", 1)
    # spread: each distinct value matched once; keyed: each row read through the dictionary
    call = (lambda: sl.match_many(arr)) if spread else (lambda: sl.match_many(arr, keys=["k"] * n))
    if bad is None:
        assert _arrow_indices(arr) == [k if valid is None or valid[i] else None for i, k in enumerate(values)]
        b = call()
        assert b.invalid.tolist() == [not (valid is None or valid[i]) for i in range(n)]
        assert b.counts().tolist() == [int((valid is None or valid[i]) and k == 1) for i, k in enumerate(values)]
        return
    row, k = bad
    want = f"subjects: row {row} has dictionary index {k}, outside the dictionary's {ndict} values"
    with pytest.raises(ValueError) as e:
        call()
    assert str(e.value) == want
    with pytest.raises(ValueError) as e:
        _arrow_indices(arr)
    assert str(e.value) == want.replace("subjects", "values")


def test_bad_dictionary_values_are_refused():
    sl = Sublist("nats")
    # a dictionary whose values' offsets run past their data: named as the
    # dictionary's, its own rows counted, on both the spread and the keyed path
    offs = np.array([0, 1, 2], np.int32)
    values = pa.Array.from_buffers(pa.string(), 2, [None, pa.py_buffer(offs), pa.py_buffer(b"ab")])
    bad = pa.DictionaryArray.from_arrays(pa.array([0, 0, 1], pa.int8()), values)
    offs[2] = 9                          # changed after pyarrow validated it
    want = r"^subjects \(dictionary\): row 1 has Arrow offsets \[1, 9\), not within the data buffer's 2 bytes$"
    with pytest.raises(ValueError, match=want):
        sl.match_many(bad)
    with pytest.raises(ValueError, match=want):
        sl.match_many(bad, keys=["k"] * 3)
    with pytest.raises(ValueError, match=want.replace("subjects", "keys")):
        sl.match_many(["a"] * 3, keys=bad)


def test_types_that_are_not_strings_are_type_errors():
    sl = Sublist("nats")
    msg = "must be an Arrow column of string, large_string, string_view or dictionary<string>, not "
    for col, shown in ((pa.array([b"a"]), "binary"), (pa.array([1]), "int64"),
                       (pa.chunked_array([], pa.binary()), "binary"),
                       (pa.array([1.5]).dictionary_encode(), "dictionary<values=double, indices=int32, ordered=0>"),
                       (pa.array([["a"]]), "list<item: string>")):
        with pytest.raises(TypeError, match="^subjects " + re.escape(msg + shown) + "$"):
            sl.match_many(col)
    # an extension type over string storage is not a string column either
    class Tag(pa.ExtensionType):
        def __init__(self):
            super().__init__(pa.string(), "topicmatch.test.tag")

        def __arrow_ext_serialize__(self):
            return b""

        @classmethod
        def __arrow_ext_deserialize__(cls, storage_type, serialized):
            return cls()

    tagged = pa.ExtensionArray.from_storage(Tag(), pa.array(["a.b"]))
    with pytest.raises(TypeError, match="^subjects " + msg):
        sl.match_many(tagged)
    with pytest.raises(TypeError, match="^values " + msg):
        route_keys(pa.chunked_array([tagged]))
