"""A pandas DataFrame (or any other object) given where topicmatch.spark
wants a Spark DataFrame is named by its kind, module.qualname: "not
pandas.core.frame.DataFrame", never a bare "not DataFrame" that reads like
the type asked for (issue 48, item 9).  Every check here runs on the driver
before Spark is used: no JVM, no session."""
import pytest

pytest.importorskip("pyspark", reason="topicmatch.spark needs PySpark (topicmatch[spark])")
pd = pytest.importorskip("pandas", reason="the mistake under test is a pandas DataFrame")

from topicmatch import Sublist  # noqa: E402
from topicmatch.spark import (ShardPlan, build_index, fanout, fanout_stream,  # noqa: E402
                              fanout_with_rejects, share_index)
from topicmatch.spark import plan, stream  # noqa: E402
from topicmatch.spark.base import type_name  # noqa: E402

PANDAS = "pandas.core.frame.DataFrame"


@pytest.fixture
def frame():
    return pd.DataFrame({"sub_id": [1], "filter": ["a.b"], "subject": ["a.b"]})


def test_type_name_is_module_and_qualname(frame):
    assert type_name(frame) == PANDAS
    assert type_name(Sublist("nats")) == "topicmatch._core.Sublist"
    assert type_name([]) == "list" and type_name(None) == "NoneType"    # built-ins stay short

    class Local:
        pass
    assert type_name(Local()) == f"{__name__}.test_type_name_is_module_and_qualname.<locals>.Local"


@pytest.mark.parametrize("call", [fanout, fanout_with_rejects])
def test_pandas_events_are_named(call, frame):
    with pytest.raises(TypeError) as e:
        call(frame, Sublist("nats"))
    assert str(e.value) == f"events must be a pyspark.sql.DataFrame, not {PANDAS}"


def test_pandas_stream_events_are_named(frame, tmp_path):
    with pytest.raises(TypeError) as e:
        fanout_stream(frame, Sublist("nats"), str(tmp_path / "out"), str(tmp_path / "cp"))
    assert str(e.value) == f"events must be a pyspark.sql.DataFrame, not {PANDAS}"


def test_pandas_subscriptions_are_named(frame, tmp_path):
    with pytest.raises(TypeError) as e:
        plan.plan_fanout(frame, spark=object())
    assert str(e.value) == ("subscriptions must be a pyspark.sql.DataFrame, a topicmatch.Sublist "
                            f"or a SharedIndex, not {PANDAS}")
    with pytest.raises(TypeError) as e:
        build_index(frame)
    assert str(e.value) == f"subscriptions must be a pyspark.sql.DataFrame, not {PANDAS}"
    with pytest.raises(TypeError) as e:
        share_index(None, frame)
    assert str(e.value) == ("share_index needs a topicmatch.Sublist (or a subscriptions DataFrame), "
                            f"not {PANDAS}")
    with pytest.raises(TypeError) as e:
        stream._StreamIndex(frame, "nats", "auto", str(tmp_path))._current(frame)
    assert str(e.value) == ("subscriptions must be a DataFrame, a Sublist, or a callable "
                            f"returning one, not {PANDAS}")


def test_a_shard_plan_names_what_it_cannot_shard(frame):
    with pytest.raises(ValueError) as e:
        plan.plan_fanout(frame, spark=object(), shards=ShardPlan(2, 1))
    assert str(e.value) == f"a ShardPlan shards a subscriptions DataFrame, not a {PANDAS}"
    with pytest.raises(ValueError) as e:
        plan.plan_fanout(Sublist("nats"), spark=object(), shards=4)
    assert str(e.value).startswith("shards=4 needs the subscriptions as a DataFrame: a "
                                   "topicmatch._core.Sublist is one index already built")
