"""An index built on the driver and how it reaches the executors:
build_index collects a subscriptions DataFrame and builds its Sublist;
ship_sublist sends a Sublist (share_index's work for one) by broadcast,
file, artifact, inline, or as an image in image_dir.  The fan-out's plan
(plan.py) comes here only for a Sublist passed in, or where images cannot
be used (its explain() says why)."""
import atexit
import os
import re
import shutil
import tempfile
import uuid
from typing import Optional

from pyspark.sql import DataFrame, SparkSession

from topicmatch import Sublist
from topicmatch._core import TopicmatchTypeError, TopicmatchValueError
from topicmatch._dialects import check_dialect
from topicmatch.spark.base import (FanoutInputError, IndexTooLargeError, collect_subscriptions,
                                   expect_dataframe, index_from_arrow, type_name)
from topicmatch.spark.images import check_dir_and_ship, save_sublist
from topicmatch.spark.limits import limit
from topicmatch.spark.session import is_connect
from topicmatch.spark.ship import SharedIndex


def build_index(subscriptions: DataFrame, dialect: str = "nats") -> Sublist:
    """build_index(subscriptions, dialect="nats") -> Sublist

    Collect `subscriptions` (`sub_id` integer, `filter` string, optional
    `queue` string) to the driver and build the index.  A bad row raises one
    error naming the row (1-based, in the table's order), its sub_id and
    filter: InvalidSubjectError for an invalid filter or queue name,
    FanoutInputError for a null sub_id/filter or a wrong column type."""
    check_dialect(dialect)
    expect_dataframe(subscriptions, "subscriptions")
    try:
        table = collect_subscriptions(subscriptions)
    except FanoutInputError:
        raise
    except Exception as e:  # noqa: BLE001 - only a driver-capacity failure is translated
        text = str(e)
        if not re.search(r"maxResultSize|OutOfMemoryError|Java heap space|GC overhead", text):
            raise
        why = next((ln.strip() for ln in text.splitlines()
                    if re.search(r"maxResultSize|OutOfMemory|heap space|GC overhead", ln)), text[:300])
        raise IndexTooLargeError(
            f"the subscriptions do not fit through the driver ({why[:300]}); an unsharded "
            "fan-out collects them all: pass shards=N (or shards='auto') to fanout / "
            "fanout_with_rejects / fanout_stream, or --shards to `topicmatch fanout`, to build "
            "the index shard by shard on the executors; or leave ship='auto' with image_dir= "
            "(a directory every executor shares) to build it as one image on an executor") from None
    return index_from_arrow(table, dialect)


_TMPDIR = []


def _tmpdir():
    if not _TMPDIR:
        _TMPDIR.append(tempfile.mkdtemp(prefix="topicmatch-index-"))
        atexit.register(shutil.rmtree, _TMPDIR[0], True)
    return _TMPDIR[0]


def _write_image(data: bytes, name: str) -> str:
    path = os.path.join(_tmpdir(), name)
    with open(path, "wb") as f:
        f.write(data)
    return path


SHIP_METHODS = ("auto", "broadcast", "file", "artifact", "inline")


def check_ship(ship) -> None:
    """ship= is one of SHIP_METHODS, or a clear error naming it."""
    if ship not in SHIP_METHODS:
        raise TopicmatchValueError("ship must be 'auto', 'broadcast', 'file', 'artifact' or "
                                   f"'inline', not {ship!r}")


def ship_sublist(spark: SparkSession, sublist: Sublist, *, ship: str = "auto",
                 image_dir: Optional[str] = None, dialect: Optional[str] = None) -> SharedIndex:
    """share_index for a Sublist: saved into image_dir as an image named by
    its content, or serialized and shipped as `ship` says (share_index's
    docstring gives the rule for "auto")."""
    if not isinstance(sublist, Sublist):
        raise TopicmatchTypeError("share_index needs a topicmatch.Sublist (or a subscriptions DataFrame), "
                        f"not {type_name(sublist)}")
    if dialect is not None and dialect != sublist.dialect:
        raise TopicmatchValueError(f"the Sublist is {sublist.dialect!r}, share_index was given "
                         f"dialect={dialect!r}")
    if image_dir is not None:
        check_dir_and_ship(image_dir, ship)
        return save_sublist(sublist, image_dir)
    connect = is_connect(spark)
    data = sublist.to_bytes()
    n = len(data)
    if ship == "auto":
        if connect:
            ship = "inline" if n <= limit("INLINE_MAX_BYTES") else "artifact"
        else:
            ship = "broadcast" if n <= limit("BROADCAST_MAX_BYTES") else "file"
    elif connect and ship == "file":
        ship = "artifact"
    check_ship(ship)
    if connect and ship == "broadcast":
        raise TopicmatchValueError("ship='broadcast' needs classic Spark (a SparkContext); on Spark Connect "
                         "use 'inline' or 'artifact' (or 'auto')")
    if not connect and ship == "artifact":
        raise TopicmatchValueError("ship='artifact' is for Spark Connect sessions; on classic Spark "
                         "use 'broadcast' or 'file' (or 'auto')")
    index_id = uuid.uuid4().hex
    common = dict(index_id=index_id, dialect=sublist.dialect, nbytes=n, nsubs=len(sublist),
                  shipped_by=ship, sublist=sublist)
    if ship == "broadcast":
        return SharedIndex(broadcast=spark.sparkContext.broadcast(data), **common)
    if ship == "inline":
        return SharedIndex(data=data, **common)
    name = f"topicmatch-index-{index_id}.bin"
    path = _write_image(data, name)
    del data
    if ship == "file":
        spark.sparkContext.addFile(path)
    else:
        spark.addArtifacts(path, file=True)
    return SharedIndex(filename=name, local_path=path, **common)


