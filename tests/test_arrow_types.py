"""Every Arrow layout of a string column (issue 34): string, large_string,
string_view and dictionary<string> (any index type, values of any of the
three), sliced, chunked, with nulls -- wherever a column is taken
(match_many's subjects and keys, insert_many/remove_many's filters and
queues, route_keys' values), each compared with the list of the same rows.

A dictionary of subjects is matched once per distinct value and its rows
take their value's ids; string_view and dictionary rows are read through
their own buffers (no string copied), every view and index checked first."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from topicmatch import Sublist
from topicmatch._core import route_keys
from examples import examples
from strategies import ALL_DIALECTS, fuzz, subjects, subscriptions

pa = pytest.importorskip("pyarrow", reason="these tests feed Arrow columns; pyarrow has no wheels for some platforms (musllinux)")
HAS_VIEW = hasattr(pa, "string_view")
VALUE_TYPES = [pa.string(), pa.large_string()] + ([pa.string_view()] if HAS_VIEW else [])
INDEX_TYPES = [pa.int8(), pa.uint8(), pa.int16(), pa.uint16(), pa.int32(), pa.uint32(), pa.int64(), pa.uint64()]
PROPS = settings(max_examples=examples(25), deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _utf8(x):
    """None for what an Arrow string cannot hold (lone surrogates)."""
    try:
        x.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return x


@st.composite
def arrow_columns(draw, rows):
    """(an Arrow column of rows in a random layout, a short description).
    Layouts: a value type; plain or dictionary-encoded (random index type,
    values in random order with unused and repeated-null entries); sliced
    out of padding (offsets not a multiple of 8); cut into chunks (empty
    ones included)."""
    vtype = draw(st.sampled_from(VALUE_TYPES))
    dictionary = draw(st.booleans())
    itype = draw(st.sampled_from(INDEX_TYPES))
    pad_front = draw(st.lists(st.one_of(st.none(), st.sampled_from(["p", "pad" * 6])), max_size=9))
    pad_back = draw(st.lists(st.one_of(st.none(), st.just("q")), max_size=3))
    cuts = sorted(draw(st.lists(st.integers(0, len(rows)), max_size=3)))

    def array(vals):
        if not dictionary:
            return pa.array(vals, vtype)
        distinct = sorted({v for v in vals if v is not None}) + ["unused.value"]
        order = draw(st.permutations(distinct))
        where = {v: i for i, v in enumerate(order)}
        indices = pa.array([None if v is None else where[v] for v in vals], itype)
        return pa.DictionaryArray.from_arrays(indices, pa.array(order, vtype))

    def sliced(vals):
        return array(pad_front + vals + pad_back).slice(len(pad_front), len(vals))

    if not cuts:
        col = sliced(rows)
    else:
        bounds = [0] + cuts + [len(rows)]
        col = pa.chunked_array([sliced(rows[a:b]) for a, b in zip(bounds, bounds[1:])],
                               pa.dictionary(itype, vtype) if dictionary else vtype)
    return col, f"{'dictionary<' + str(itype) + ', ' if dictionary else ''}{vtype}, chunks={cuts}"


def same(b1, b2, why=""):
    assert b1.offsets.tolist() == b2.offsets.tolist(), why
    assert b1.sub_ids.tolist() == b2.sub_ids.tolist(), why
    assert b1.invalid.tolist() == b2.invalid.tolist(), why


@pytest.mark.parametrize("dialect", ALL_DIALECTS)
@PROPS
@given(data=st.data())
def test_every_layout_matches_as_the_list_does(dialect, data):
    subs = data.draw(st.lists(subscriptions(dialect), max_size=20), label="subs")
    sl = Sublist(dialect)
    sl.insert_many([f for f, _, _ in subs], [i for _, i, _ in subs], [q for _, _, q in subs])
    rows = data.draw(st.lists(st.one_of(subjects(dialect), subjects(dialect), fuzz(dialect), st.none()),
                              max_size=30).map(lambda r: [None if x is None else _utf8(x) for x in r]),
                     label="rows")
    # repeats, so that a dictionary's values are shared by several rows
    rows = rows + rows[: len(rows) // 2]
    col, layout = data.draw(arrow_columns(rows), label="layout")
    keys = data.draw(st.lists(st.sampled_from(["k1", "k2", None]), min_size=len(rows), max_size=len(rows)),
                     label="keys")
    for queues in ("all", "pick", "none"):
        for dedupe in (False, True):
            same(sl.match_many(col, queues=queues, dedupe=dedupe),
                 sl.match_many(rows, queues=queues, dedupe=dedupe), (layout, queues, dedupe))
        same(sl.match_many(col, queues=queues, keys=keys), sl.match_many(rows, queues=queues, keys=keys),
             (layout, queues, "keys"))
    # the layout as the keys column, cut elsewhere than the subjects
    key_col, key_layout = data.draw(arrow_columns(keys), label="key layout")
    same(sl.match_many(rows, keys=key_col), sl.match_many(rows, keys=keys), key_layout)
    same(sl.match_many(col, keys=key_col), sl.match_many(rows, keys=keys), (layout, key_layout))
    # route_keys, as subjects and as filters
    for filters in (False, True):
        k1, t1 = route_keys(col, dialect, 2, filters=filters)
        k2, t2 = route_keys(rows, dialect, 2, filters=filters)
        assert k1.tolist() == k2.tolist() and t1.tolist() == t2.tolist(), layout


@pytest.mark.parametrize("dialect", ALL_DIALECTS)
@PROPS
@given(data=st.data())
def test_every_layout_inserts_as_the_list_does(dialect, data):
    subs = data.draw(st.lists(subscriptions(dialect), max_size=20), label="subs")
    filters = [f for f, _, _ in subs]
    queues = [q for _, _, q in subs]
    ids = [i for _, i, _ in subs]
    fcol, flayout = data.draw(arrow_columns(filters), label="filters layout")
    qcol, qlayout = data.draw(arrow_columns(queues), label="queues layout")
    by_list, by_arrow = Sublist(dialect), Sublist(dialect)
    n = by_list.insert_many(filters, ids, queues)
    assert by_arrow.insert_many(fcol, ids, qcol) == n, (flayout, qlayout)
    assert by_arrow.to_bytes() == by_list.to_bytes(), (flayout, qlayout)
    assert by_arrow.remove_many(fcol, np.array(ids, np.int64), qcol) == n
    assert len(by_arrow) == 0


def test_a_dictionary_is_matched_once_per_distinct_value():
    # the stats count one match per subject matched: a dictionary's
    # values, not its rows
    sl = Sublist("nats")
    sl.insert_many(["a.*", "a.b", "x"], [1, 2, 3])
    col = pa.array(["a.b", "x", None, "a.b", "a.c"] * 1000).dictionary_encode()
    before = sl.stats()["matches"]
    b = sl.match_many(col, queues="all")
    assert sl.stats()["matches"] - before <= 3
    same(b, sl.match_many(col.to_pylist(), queues="all"))
    assert b.invalid.tolist()[:5] == [False, False, True, False, False]
    # with keys that pick per row, each row is matched (through its value)
    keyed = sl.match_many(col, keys=[str(i) for i in range(len(col))])
    same(keyed, sl.match_many(col.to_pylist(), keys=[str(i) for i in range(len(col))]))


def test_dictionary_values_that_are_null_or_invalid():
    sl = Sublist("nats")
    sl.insert("a.b", 1)
    col = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, None, 0, 2], pa.int8()),
                                         pa.array(["a.b", None, "a..b"]))
    b = sl.match_many(col, queues="all")
    assert b.invalid.tolist() == [False, True, True, True, False, True]
    assert b.counts().tolist() == [1, 0, 0, 0, 1, 0]


@pytest.mark.skipif(not HAS_VIEW, reason="pyarrow without string_view")
def test_string_view_reads_inline_and_buffered_strings_in_place():
    long = "a." + "b" * 40
    col = pa.array(["a.b", long, None, "", "a." + "c" * 10], pa.string_view())
    sl = Sublist("nats")
    sl.insert_many(["a.*", long], [1, 2])
    same(sl.match_many(col, queues="all"), sl.match_many(col.to_pylist(), queues="all"))
    assert sorted(sl.match_many(col, queues="all")[1].tolist()) == [1, 2]     # a.* and the long one


def _view(length, buffer_index, offset, data=b"x" * 32):
    view = np.zeros(4, np.int32)
    view[0] = length
    view[2] = buffer_index
    view[3] = offset
    return pa.Array.from_buffers(pa.string_view(), 1, [None, pa.py_buffer(view.tobytes()), pa.py_buffer(data)])


@pytest.mark.skipif(not HAS_VIEW, reason="pyarrow without string_view")
@pytest.mark.parametrize("length,index,offset,text", [
    (20, 1, 0, "row 0 has an Arrow view of 20 bytes at [buffer 1, offset 0], not within"),
    (20, 0, 20, "row 0 has an Arrow view of 20 bytes at [buffer 0, offset 20], not within"),
    (20, -1, 0, "row 0 has an Arrow view of 20 bytes at [buffer -1, offset 0]"),
    (20, 0, -4, "row 0 has an Arrow view of 20 bytes at [buffer 0, offset -4]"),
    (-3, 0, 0, "row 0 has an Arrow view of length -3"),
])
def test_hostile_string_views_are_refused_before_they_are_read(length, index, offset, text):
    sl = Sublist("nats")
    sl.insert("a.b", 1)
    bad = _view(length, index, offset)
    for call in (lambda: sl.match_many(bad), lambda: sl.match_many(["a.b"], keys=bad),
                 lambda: route_keys(bad), lambda: sl.match_many(pa.chunked_array([pa.array(["a.b"], pa.string_view()), bad]))):
        with pytest.raises(ValueError, match=r"^(subjects|keys|values): row [01] has an Arrow view"):
            call()
    with pytest.raises(ValueError, match=r"^subjects: " + text.replace("[", r"\[").replace("]", r"\]")):
        sl.match_many(bad)
    with pytest.raises(ValueError, match="^filters: "):
        sl.insert_many(bad, [1])          # pyarrow's own full validation
    assert len(sl) == 1


@pytest.mark.parametrize("index", [3, -1, 200])
def test_dictionary_indices_out_of_range_are_refused(index):
    sl = Sublist("nats")
    sl.insert("a.b", 1)
    itype = pa.uint8() if index == 200 else pa.int8()
    indices = pa.array([0, 1, 0], itype)
    buf = np.frombuffer(indices.buffers()[1], np.uint8 if index == 200 else np.int8).copy()
    buf[1] = index
    bad_indices = pa.Array.from_buffers(itype, 3, [None, pa.py_buffer(buf.tobytes())])
    bad = pa.DictionaryArray.from_buffers(pa.dictionary(itype, pa.string()), 3,
                                          [None, bad_indices.buffers()[1]], pa.array(["a.b", "x", "y"]))
    want = f"^subjects: row 1 has dictionary index {index}, outside the dictionary's 3 values$"
    with pytest.raises(ValueError, match=want):
        sl.match_many(bad)
    with pytest.raises(ValueError, match=want):
        sl.match_many(bad, keys=["k"] * 3)         # keyed: rows read through the dictionary
    with pytest.raises(ValueError, match=want.replace("subjects", "values")):
        route_keys(bad)


class _CapsuleOnly:
    """An object exporting a column through the Arrow PyCapsule interface,
    as a polars Series does (polars' strings are string_view)."""
    def __init__(self, arr):
        self._arr = arr

    def __arrow_c_stream__(self, requested_schema=None):
        return pa.chunked_array([self._arr]).__arrow_c_stream__(requested_schema)


@pytest.mark.skipif(not hasattr(pa.ChunkedArray, "__arrow_c_stream__"), reason="pyarrow without the PyCapsule interface")
def test_columns_through_the_arrow_pycapsule_interface():
    vals = ["a.b", None, "a.c", "a.b"]
    sl = Sublist("nats")
    sl.insert("a.*", 1)
    for t in VALUE_TYPES:
        col = _CapsuleOnly(pa.array(vals, t))
        same(sl.match_many(col, queues="all"), sl.match_many(vals, queues="all"))
        same(sl.match_many(vals, keys=col), sl.match_many(vals, keys=vals))
        assert route_keys(col)[1].tolist() == route_keys(vals)[1].tolist()
