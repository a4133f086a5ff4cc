"""The thresholds of topicmatch.spark, read at call time.

A user (or a test's monkeypatch) sets them on the package,
``topicmatch.spark.BROADCAST_MAX_BYTES = n``, where they are defined with their
defaults (topicmatch/spark/__init__.py); every reader asks ``limit(name)``, so
the value is read in one place, when it is used.  A leaf: it imports nothing
of topicmatch but the compiled core's error class (the package is found in
sys.modules, loaded by then).
"""
import sys

from topicmatch._core import TopicmatchKeyError

#: The names a user may set on topicmatch.spark.
SETTABLE = ("AUTO_SHARD_MIN_SUBS", "BROADCAST_MAX_BYTES", "INLINE_MAX_BYTES")


def limit(name: str) -> int:
    """topicmatch.spark.<name> as it is now."""
    if name not in SETTABLE:
        raise TopicmatchKeyError(f"{name!r} is no threshold of topicmatch.spark (those are {', '.join(SETTABLE)})")
    return getattr(sys.modules[__package__], name)
