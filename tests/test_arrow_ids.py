"""Arrow id columns (insert_many's and build_image's sub_ids) read over
their own buffers, and Arrow results made from numpy, without pyarrow's
conversions that import pandas (about a second, the first time in a
process, where pandas is installed)."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")

import topicmatch  # noqa: E402
from isolated import pandas_stand_in  # noqa: E402

INT_TYPES = [pa.int8(), pa.uint8(), pa.int16(), pa.uint16(), pa.int32(), pa.uint32(), pa.int64(), pa.uint64()]


def _answers(sl, subjects):
    return [sorted(sl.match(s).subs) for s in subjects]


@pytest.mark.parametrize("t", INT_TYPES, ids=str)
def test_ids_of_every_integer_type_sliced_and_chunked(t):
    filters = ["a.b", "a.*", "a.>", "c.d", "*.d", "e"]
    values = [7, 0, 3, 100, 5, 9, 11, 2]
    ids = pa.array(values, t).slice(1, 6)               # an offset into the buffer
    chunked = pa.chunked_array([pa.array(values, t).slice(1, 2), pa.array(values, t).slice(3, 4)])
    want = topicmatch.Sublist("nats")
    want.insert_many(filters, values[1:7])
    for col in (ids, chunked):
        sl = topicmatch.Sublist("nats")
        assert sl.insert_many(pa.array(filters), col) == 6
        assert _answers(sl, ["a.b", "c.d", "e", "x.d"]) == _answers(want, ["a.b", "c.d", "e", "x.d"])


def test_empty_and_unsigned_past_the_signed_range():
    sl = topicmatch.Sublist("nats")
    assert sl.insert_many(pa.array([], pa.string()), pa.array([], pa.int64())) == 0
    assert sl.insert_many(pa.array([], pa.string()), pa.chunked_array([], pa.int64())) == 0
    with pytest.raises(OverflowError, match=r"item 1: sub_id 9223372036854775808 is outside"):
        sl.insert_many(pa.array(["a", "b"]), pa.array([0, 2 ** 63], pa.uint64()))


def test_to_arrow_offsets_and_nulls():
    sl = topicmatch.Sublist("nats")
    sl.insert_many(["a.*", "a.b", ">"], [1, 2, 3])
    r = sl.match_many(["a.b", "a..b", "x", "a.c"] * 5)
    got = r.to_arrow()
    assert got.type == pa.list_(pa.int64())
    assert got.to_pylist() == [None if r.invalid[i] else r[i].tolist() for i in range(len(r))]
    assert got.null_count == 5
    # the ids are the result's own buffer, not a copy
    assert got.values.buffers()[1].address == r.sub_ids.__array_interface__["data"][0]


def test_arrow_columns_do_not_import_pandas(tmp_path):
    # The child finds a stand-in "pandas" first on its path, which notes
    # that it was imported (and then is not there, as pyarrow allows): so
    # the check holds whether or not pandas is installed.  It reads its
    # columns from an IPC file (pa.array would import pandas itself).
    table = pa.table({"f": ["a.b", "a.*", "c"] * 10, "id": pa.array(range(30), pa.int64()),
                      "q": [None, "g", None] * 10})
    rows = str(tmp_path / "rows.arrow")
    with pa.ipc.new_file(rows, table.schema) as w:
        w.write_table(table)
    fake, marker = pandas_stand_in(tmp_path)
    child = textwrap.dedent(f"""
        import pyarrow.ipc
        import topicmatch
        t = pyarrow.ipc.open_file({rows!r}).read_all()
        sl = topicmatch.Sublist("nats")
        sl.insert_many(t["f"], t["id"], t["q"])
        sl.insert_many(t["f"].slice(3), t["id"].combine_chunks().slice(3), t["q"].slice(3))
        img = topicmatch.build_image({str(tmp_path / 'x.img')!r}, t["f"], t["id"], t["q"])
        print(img.match_many(t["f"], queues="all").to_arrow().null_count)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([fake] + sys.path))
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.split() == ["10"]
    assert not os.path.exists(marker), "pandas was imported:\n" + open(marker).read()


def test_python_values_to_arrow_without_pandas_agree_with_pyarrow():
    # _columns.python_array and batch_of (the rows Spark tasks return) make
    # what pa.array makes, nulls included, from buffers of their own
    from topicmatch import _columns
    cases = [([1, None, -3, 2 ** 63 - 1], pa.int64()), ([None, 2, 3], pa.int32()), ([255, None, 0], pa.uint8()),
             (["x", None, "é", ""], pa.string()), (["a", "bb", None], pa.large_string()),
             ([b"\x00", None, b""], pa.binary()), ([True, None, False], pa.bool_()),
             ([1.5, None, 2.0], pa.float64()), ([None, None], pa.null()), ([], pa.string()), ([], pa.int64())]
    for values, t in cases:
        got = _columns.python_array(values, t)
        got.validate(full=True)
        assert got.equals(pa.array(values, t)), (values, t)
    schema = pa.schema([("a", pa.int64()), ("b", pa.string()), ("c", pa.binary())])
    b = _columns.batch_of({"a": [7], "b": ["x"]}, schema)          # c left out: null
    assert b.schema == schema and b.to_pylist() == [{"a": 7, "b": "x", "c": None}]
    with pytest.raises(topicmatch.TopicmatchTypeError, match="list<item: int64>"):
        _columns.python_array([[1]], pa.list_(pa.int64()))


def test_arrow_ints_and_bools_to_numpy_without_pandas():
    from topicmatch import _columns
    ints = pa.chunked_array([pa.array([1, 2], pa.int32()), pa.array([3], pa.int32())])
    assert _columns.int_values(ints).tolist() == [1, 2, 3]
    assert _columns.int_values(pa.array([4, 5, 6], pa.int64()).slice(1)).tolist() == [5, 6]
    assert _columns.int_values(pa.chunked_array([], pa.int16())).dtype == np.int16
    bools = pa.array([i % 3 == 0 for i in range(19)]).slice(5)       # an offset inside a byte
    assert _columns.bool_values(bools).tolist() == bools.to_pylist()
    assert _columns.bool_values(pa.chunked_array([bools, bools.slice(2, 3)])).tolist() == \
        bools.to_pylist() + bools.to_pylist()[2:5]
    assert _columns.bool_values(pa.array([], pa.bool_())).tolist() == []
