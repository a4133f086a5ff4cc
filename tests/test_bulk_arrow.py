"""insert_many / remove_many straight from Arrow columns (no Python str per
row): the same index as the list path, the same all-or-nothing errors."""
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from topicmatch import InvalidSubjectError, Sublist, TopicmatchValueError
from examples import examples
from strategies import ALL_DIALECTS, subjects, subscriptions

pa = pytest.importorskip("pyarrow", reason="these tests feed Arrow columns; pyarrow has no wheels for some platforms (musllinux)")


def _columns(subs, large=False, chunks=1):
    t = pa.large_string() if large else pa.string()
    filters = [f for f, _, _ in subs]
    queues = [q for _, _, q in subs]
    cut = len(subs) // 2
    if chunks == 2:
        return (pa.chunked_array([filters[:cut], filters[cut:]], t),
                pa.chunked_array([queues[:cut], queues[cut:]], t))
    return pa.array(filters, t), pa.array(queues, t)


@pytest.mark.parametrize("dialect", ALL_DIALECTS)
@settings(max_examples=examples(40), deadline=None)
@given(data=st.data(), large=st.booleans(), chunks=st.sampled_from([1, 2]),
       ids_as=st.sampled_from(["arrow", "numpy", "list"]))
def test_arrow_columns_build_the_list_paths_index(dialect, data, large, chunks, ids_as):
    subs = data.draw(st.lists(subscriptions(dialect), max_size=30))
    probes = data.draw(st.lists(subjects(dialect), min_size=1, max_size=10))
    ids = [i for _, i, _ in subs]
    by_list = Sublist(dialect)
    n_list = by_list.insert_many([f for f, _, _ in subs], ids, [q for _, _, q in subs])
    filters, queues = _columns(subs, large, chunks)
    id_col = {"arrow": pa.array(ids, pa.int64()), "numpy": np.array(ids, np.int64), "list": ids}[ids_as]
    by_arrow = Sublist(dialect)
    assert by_arrow.insert_many(filters, id_col, queues) == n_list
    assert by_arrow.to_bytes() == by_list.to_bytes()
    for s in probes:
        assert repr(by_arrow.match(s)) == repr(by_list.match(s))
    assert by_arrow.remove_many(filters, id_col, queues) == n_list
    assert len(by_arrow) == 0


def test_queues_may_be_omitted_or_a_list():
    sl = Sublist("nats")
    assert sl.insert_many(pa.array(["a.b", "a.*"]), pa.array([1, 2], pa.int32())) == 2
    assert sl.insert_many(pa.array(["c.>"]), [3], ["g"]) == 1
    m = sl.match("c.d")
    assert m.subs == [] and m.groups == [("g", None, [3])]


@pytest.mark.parametrize("filters,ids,queues,err,text", [
    (pa.array(["a.b", None]), [1, 2], None, TypeError, "filters[1] must be str, not None"),
    (pa.array(["a.b", "a..b"]), [1, 2], None, InvalidSubjectError, "item 1: invalid filter 'a..b'"),
    (pa.array(["a.b", "c"]), [1, 2], pa.array([None, "bad queue"]), InvalidSubjectError, "item 1: invalid queue"),
    (pa.array(["a.b"]), pa.array([None], pa.int64()), None, TypeError, "sub_ids[0] must be int, not None"),
    (pa.array(["a.b"]), np.array([2 ** 63], np.uint64), None, OverflowError, "outside the signed 64-bit range"),
    (pa.array(["a.b", "c"]), [1, "x"], None, TypeError, "sub_ids[1] must be int, not str"),
    (pa.array(["a.b", "c"]), [1], None, ValueError, "filters and sub_ids differ in length (2 != 1)"),
    (pa.array([1, 2]), [1, 2], None, TypeError, "filters must be an Arrow column of string, large_string, string_view or dictionary<string>, not int64"),
    (pa.array(["a.b"]), pa.array([1.5]), None, TypeError, "sub_ids must be an integer Arrow array, not double"),
])
def test_bad_arrow_input_names_the_item_and_changes_nothing(filters, ids, queues, err, text):
    sl = Sublist("nats")
    sl.insert("x.y", 9)
    before = (sl.to_bytes(), sl.stats()["memory_bytes"])
    with pytest.raises(err, match=re.escape(text)):
        sl.insert_many(filters, ids, queues)
    assert (sl.to_bytes(), sl.stats()["memory_bytes"]) == before


def _utf8_column(rows):
    """A string column of these bytes rows, built past pyarrow's checks."""
    offsets = np.cumsum([0] + [len(r) for r in rows]).astype(np.int32)
    return pa.Array.from_buffers(pa.string(), len(rows), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(rows))])


@pytest.mark.parametrize("dialect", ["nats", "mqtt", "amqp"])
def test_invalid_utf8_in_an_arrow_column_is_refused(dialect):
    """Checked by C, not by pyarrow's serial validation: a filter by the
    tokenizer, naming its row as the list path names a lone surrogate's; a
    queue column before any row is applied, in every dialect (the core
    takes a NATS or MQTT queue name's bytes as they are).  Overlong forms
    and encoded surrogates are not UTF-8 either (fs_utf8.h)."""
    sl = Sublist(dialect)
    for bad in (b"a.b\xff\xfe", b"\xc0\xae", b"\xed\xa0\x80"):
        with pytest.raises(InvalidSubjectError) as ei:
            sl.insert_many(_utf8_column([b"a", bad, b"c"]), [1, 2, 3])
        assert ei.value.row == 1 and ei.value.reason == "invalid UTF-8" and str(ei.value).startswith("item 1: ")
        assert ei.value.subject.encode("utf-8", "surrogateescape") == bad
        coded = pa.DictionaryArray.from_arrays(pa.array([0, 0, 1], pa.int32()), _utf8_column([b"a", bad]))
        with pytest.raises(InvalidSubjectError) as ei:
            sl.insert_many(coded, [1, 2, 3])
        assert ei.value.row == 2 and ei.value.subject.encode("utf-8", "surrogateescape") == bad
        queues = _utf8_column([b"ok", b"q\xe2\x82\xacq", b"q" * 20 + bad])
        with pytest.raises(TopicmatchValueError, match=re.escape("queues[2] is not valid UTF-8 (byte ")):
            sl.insert_many(pa.array(["a", "b", "c"]), [1, 2, 3], queues)
    assert len(sl) == 0
    good = _utf8_column([b"ok", b"q\xe2\x82\xacq", b"qq"])
    assert sl.insert_many(pa.array(["a", "b", "c"]), [1, 2, 3], good) == 3
    assert sl.match("b").groups[0][0] == "q\u20acq"
